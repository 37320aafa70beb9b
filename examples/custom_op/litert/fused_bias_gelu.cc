// FusedBiasGelu's LiteRT kernel: y = gelu(x + bias), the exact erf GELU, float32,
// for the TFLite CUSTOM node "FusedBiasGelu" that `bridge export --to tflite
// --mode custom` keeps.
//
// A team's own LiteRT op, written like bridge's own (litert/native/*.cc)
// against the Node API of litert/native/common.h: bridge compiles it into
// a copy of its LiteRT kernel library (`--litert-library examples/custom_op/litert`),
// which does the LiteRT plumbing (attributes, shapes, buffers, errors). The spec
// is ../fused_bias_gelu.py.
#include <cmath>

#include "common.h"

namespace {

using bridge::dims;
using bridge::OpFailure;
using namespace bridge::litert;

const char* kOp = "FusedBiasGelu";

inline float Gelu(float z) { return 0.5f * z * (1.0f + std::erf(z * 0.70710678118654752f)); }

struct FusedBiasGelu : Node {
  explicit FusedBiasGelu(const Attrs& a) { a.require_float32(); }

  std::vector<std::vector<int64_t>> output_shapes(const std::vector<std::vector<int64_t>>& in) override {
    const auto& x = in[0];
    const auto& bias = in[1];
    if (x.empty()) throw OpFailure(kOp, "x", "must have rank >= 1, got a scalar (shape [])");
    if (bias.size() != 1 || bias[0] != x.back())
      throw OpFailure(kOp, "bias", "must have shape [C]=[" + std::to_string(x.back()) + "] (the last dim of x " +
                                       dims(x) + "), got " + dims(bias));
    return {x};
  }

  void run(const std::vector<View>& in, const std::vector<View>& out) override {
    const int64_t c = in[0].shape.empty() ? 0 : in[0].shape.back();
    const int64_t n = in[0].size();
    if (c == 0 || n == 0) return;
    const float *x = in[0].as<float>(), *b = in[1].as<float>();
    float* y = out[0].mut<float>();
    const int64_t rows = n / c;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x + r * c;
      float* yr = y + r * c;
      for (int64_t j = 0; j < c; ++j) yr[j] = Gelu(xr[j] + b[j]);
    }
  }
};

std::unique_ptr<Node> create(const Attrs& a) { return std::make_unique<FusedBiasGelu>(a); }

const OpDef kDef{kOp, 1, 2, 1, create, nullptr};
const int kRegistered = register_op(&kDef);

}  // namespace
