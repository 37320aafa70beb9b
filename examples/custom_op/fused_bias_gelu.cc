// FusedBiasGelu for TensorFlow: y = gelu(x + bias), exact (erf) GELU, one pass.
// Built against the installed TensorFlow by this folder's CMakeLists.txt; the
// registration must agree with fused_bias_gelu.py (bridge checks: `bridge ops
// --op-spec fused_bias_gelu.py --op-library libfused_bias_gelu.so`).
#include <cmath>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/util/work_sharder.h"

namespace {

using tensorflow::DEVICE_CPU;
using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::shape_inference::InferenceContext;
using tensorflow::shape_inference::ShapeHandle;

absl::Status BiasGeluShape(InferenceContext* c) {
  ShapeHandle x = c->input(0);
  TF_RETURN_IF_ERROR(c->WithRankAtLeast(x, 1, &x));
  ShapeHandle bias;
  if (!c->WithRank(c->input(1), 1, &bias).ok()) {
    return absl::InvalidArgumentError(absl::StrCat("FusedBiasGelu: argument 'bias': must have shape [C] (the last "
                                                   "dim of x ", c->DebugString(x), "), got ",
                                                   c->DebugString(c->input(1))));
  }
  auto last = c->Dim(x, -1);
  if (c->ValueKnown(last) && c->ValueKnown(c->Dim(bias, 0)) && c->Value(last) != c->Value(c->Dim(bias, 0))) {
    return absl::InvalidArgumentError(absl::StrCat("FusedBiasGelu: argument 'bias': must have shape [C]=[",
                                                   c->Value(last), "] (the last dim of x ", c->DebugString(x),
                                                   "), got ", c->DebugString(bias)));
  }
  c->set_output(0, x);
  return absl::OkStatus();
}

}  // namespace

REGISTER_OP("FusedBiasGelu")
    .Input("x: T")
    .Input("bias: T")
    .Output("y: T")
    .Attr("T: {float, half}")
    .SetShapeFn(BiasGeluShape);

namespace {

template <typename T>
class FusedBiasGeluOp : public OpKernel {
 public:
  explicit FusedBiasGeluOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& bias = ctx->input(1);
    OP_REQUIRES(ctx, x.dims() >= 1,
                absl::InvalidArgumentError("FusedBiasGelu: argument 'x': must have rank >= 1, got a scalar"));
    const int64_t c = x.dim_size(x.dims() - 1);
    OP_REQUIRES(ctx, bias.dims() == 1 && bias.dim_size(0) == c,
                absl::InvalidArgumentError(absl::StrCat("FusedBiasGelu: argument 'bias': must have shape [C]=[", c,
                                                        "] (the last dim of x ", x.shape().DebugString(),
                                                        "), got ", bias.shape().DebugString())));
    Tensor* y = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &y));
    if (x.NumElements() == 0) return;
    const T* xp = x.flat<T>().data();
    const T* bp = bias.flat<T>().data();
    T* yp = y->flat<T>().data();
    const int64_t rows = x.NumElements() / c;
    auto work = [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        for (int64_t i = 0; i < c; ++i) {
          const float z = static_cast<float>(xp[r * c + i]) + static_cast<float>(bp[i]);
          yp[r * c + i] = static_cast<T>(0.5f * z * (1.0f + std::erf(z * 0.70710678118654752f)));
        }
      }
    };
    auto* pool = ctx->device()->tensorflow_cpu_worker_threads();
    tensorflow::Shard(pool->num_threads, pool->workers, rows, /*cost_per_unit=*/c * 20, work);
  }
};

}  // namespace

REGISTER_KERNEL_BUILDER(Name("FusedBiasGelu").Device(DEVICE_CPU).TypeConstraint<float>("T"),
                        FusedBiasGeluOp<float>);
REGISTER_KERNEL_BUILDER(Name("FusedBiasGelu").Device(DEVICE_CPU).TypeConstraint<Eigen::half>("T"),
                        FusedBiasGeluOp<Eigen::half>);
