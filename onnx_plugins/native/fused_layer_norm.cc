// FusedLayerNorm: layer normalization over the last axis, one row at a time
// while the row is in cache, by the row math the TensorFlow kernel uses
// (bridge/kernels/fused_layer_norm.h). float16 rows are widened to float32
// (ops.md: float16 accumulates in float32).
#include <algorithm>
#include <vector>

#include "bridge_ort.h"
#include "kernels/fused_layer_norm.h"

namespace bridge {
namespace {

using layer_norm::NormalizeRow;

const char* kOp = "FusedLayerNorm";

struct FusedLayerNorm : Kernel {
  float eps;
  explicit FusedLayerNorm(const Attrs& a) : eps(a.f("epsilon")) {}

  void compute(Ctx& ctx) override;
};

extern const OpDef kDef;

void FusedLayerNorm::compute(Ctx& ctx) {
  View x = ctx.input(0), g = ctx.input(1), b = ctx.input(2);
  check_same_type(kOp, {x, g, b}, kDef);
  if (x.shape.empty()) throw OpFailure(kOp, "x", "must have rank >= 1, got a scalar (shape [])");
  const int64_t h = x.shape.back();
  for (auto [arg, v] : {std::pair<const char*, const View&>{"gamma", g}, {"beta", b}})
    if (v.shape.size() != 1 || v.shape[0] != h)
      throw OpFailure(kOp, arg, "must have shape [H]=[" + std::to_string(h) + "] (the last dim of x " +
                                    dims(x.shape) + "), got " + dims(v.shape));
  void* out = ctx.output(0, x.shape);
  const int64_t n = x.size();
  if (n == 0) return;
  const int64_t rows = n / h;
  // ~64 KB of row data per task: enough to amortise scheduling, small enough to balance.
  const int64_t per_task = std::max<int64_t>(1, 16384 / h);
  const size_t tasks = static_cast<size_t>((rows + per_task - 1) / per_task);
  const float e = eps;
  if (!is_half(x)) {
    const float *xp = x.as<float>(), *gp = g.as<float>(), *bp = b.as<float>();
    float* yp = static_cast<float*>(out);
    ctx.parallel_for(tasks, [&](size_t t) {
      const int64_t r1 = std::min<int64_t>(rows, (t + 1) * per_task);
      for (int64_t r = t * per_task; r < r1; ++r) NormalizeRow(xp + r * h, h, gp, bp, e, yp + r * h);
    });
    return;
  }
  std::vector<float> gb(2 * h);
  half_to_float(g.as<uint16_t>(), gb.data(), h);
  half_to_float(b.as<uint16_t>(), gb.data() + h, h);
  const uint16_t* xp = x.as<uint16_t>();
  uint16_t* yp = static_cast<uint16_t*>(out);
  ctx.parallel_for(tasks, [&](size_t t) {
    std::vector<float> row(h);
    const int64_t r1 = std::min<int64_t>(rows, (t + 1) * per_task);
    for (int64_t r = t * per_task; r < r1; ++r) {
      half_to_float(xp + r * h, row.data(), h);
      NormalizeRow(row.data(), h, gb.data(), gb.data() + h, e, row.data());
      float_to_half(row.data(), yp + r * h, h);
    }
  });
}

Kernel* create(const Attrs& a, const OrtKernelInfo*) { return new FusedLayerNorm(a); }

const OpDef kDef{kOp, {"x", "gamma", "beta"}, {"y"}, {{"epsilon", "float", "1e-06"}}, create};
const int kRegistered = register_op(&kDef);

}  // namespace
}  // namespace bridge
