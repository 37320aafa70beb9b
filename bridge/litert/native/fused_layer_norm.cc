// FusedLayerNorm on LiteRT: rows of the last axis through the shared row core
// (bridge/kernels/fused_layer_norm.h), rows spread over OpenMP threads.
#include "common.h"
#include "kernels/fused_layer_norm.h"

namespace bridge {
namespace litert {
namespace {

const char* kOp = "FusedLayerNorm";

struct FusedLayerNorm : Node {
  float epsilon;
  explicit FusedLayerNorm(const Attrs& a) {
    const float fallback = 1e-6f;  // ops.md's default
    epsilon = a.f("epsilon", &fallback);
    a.require_float32();
  }

  std::vector<std::vector<int64_t>> output_shapes(const std::vector<std::vector<int64_t>>& in) override {
    const auto& x = in[0];
    if (x.empty()) throw OpFailure(kOp, "x", "must have rank >= 1, got a scalar (shape [])");
    const int64_t h = x.back();
    const char* names[] = {"gamma", "beta"};
    for (int k = 1; k <= 2; ++k) {
      if (in[k].size() != 1 || in[k][0] != h)
        throw OpFailure(kOp, names[k - 1], "must have shape [H]=[" + std::to_string(h) + "] (the last dim of x " +
                                               dims(x) + "), got " + dims(in[k]));
    }
    return {x};
  }

  void run(const std::vector<View>& in, const std::vector<View>& out) override {
    const int64_t h = in[0].shape.empty() ? 0 : in[0].shape.back();
    if (h == 0 || in[0].size() == 0) return;
    const int64_t rows = in[0].size() / h;
    const float *x = in[0].as<float>(), *g = in[1].as<float>(), *b = in[2].as<float>();
    float* y = out[0].mut<float>();
    const float eps = epsilon;
#pragma omp parallel for schedule(static) if (rows * h > 32768)
    for (int64_t r = 0; r < rows; ++r) layer_norm::NormalizeRow(x + r * h, h, g, b, eps, y + r * h);
  }
};

std::unique_ptr<Node> create(const Attrs& a) { return std::make_unique<FusedLayerNorm>(a); }

const OpDef kDef{kOp, 1, 3, 1, create, nullptr};
const int kRegistered = register_op(&kDef);

}  // namespace
}  // namespace litert
}  // namespace bridge
