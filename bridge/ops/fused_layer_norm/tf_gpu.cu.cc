// FusedLayerNorm's TensorFlow GPU kernels (built with `bridge build --cuda`): the
// forward and backward kernels of kernel.cuh (beside it) on the op's stream.
// The ops (FusedLayerNorm, FusedLayerNormGrad), their shape functions and CPU
// kernels: the core bridge/ops/fused_layer_norm/kernel.h through host.cc, and
// tf_ops/fused_layer_norm_grad.cc; bridge/ops/fused_layer_norm/tf_op.py wires the gradient.
#if GOOGLE_CUDA

#include "kernel.cuh"
#include "tf_gpu.h"

namespace bridge_gpu {
namespace {

using tensorflow::OpKernelContext;
using tensorflow::Tensor;

template <typename T>
class FusedLayerNormGpuOp : public tensorflow::OpKernel {
 public:
  explicit FusedLayerNormGpuOp(tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, check_.Init(ctx));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("epsilon", &epsilon_));
  }

  void Compute(OpKernelContext* ctx) override {
    std::vector<tensorflow::TensorShape> shapes;
    OP_REQUIRES_OK(ctx, check_.Outputs(ctx, def(), &shapes));
    const Tensor& x = ctx->input(0);
    Tensor* y = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &y));
    if (x.NumElements() == 0) return;
    const int64_t h = x.dim_size(x.dims() - 1);
    OP_REQUIRES_OK(ctx, ToStatus(bridge_cuda::layer_norm::Forward(Dev<T>(x), Dev<T>(ctx->input(1)),
                                                                  Dev<T>(ctx->input(2)), Dev<T>(y),
                                                                  x.NumElements() / h, h, epsilon_, Stream(ctx))));
  }

 private:
  ShapeCheck check_;
  float epsilon_ = 0.0f;
};

// FusedLayerNormGrad: the backward kernels of kernel.cuh (dx per
// row; dgamma/dbeta in a fixed order, so every run gives the same sums).
template <typename T>
class FusedLayerNormGradGpuOp : public tensorflow::OpKernel {
 public:
  explicit FusedLayerNormGradGpuOp(tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, check_.Init(ctx));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("epsilon", &epsilon_));
  }

  void Compute(OpKernelContext* ctx) override {
    std::vector<tensorflow::TensorShape> shapes;
    OP_REQUIRES_OK(ctx, check_.Outputs(ctx, def(), &shapes));
    const Tensor& x = ctx->input(1);
    Tensor *dx = nullptr, *dgamma = nullptr, *dbeta = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &dx));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, ctx->input(2).shape(), &dgamma));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, ctx->input(2).shape(), &dbeta));
    const int64_t h = x.dim_size(x.dims() - 1);
    if (h == 0) return;
    const int64_t rows = x.NumElements() / h;
    const size_t bytes = bridge_cuda::layer_norm::BackwardWorkspaceBytes(rows, h);
    Tensor scratch;
    void* ws = nullptr;
    OP_REQUIRES_OK(ctx, Scratch(ctx, bytes, &scratch, &ws));
    OP_REQUIRES_OK(ctx, ToStatus(bridge_cuda::layer_norm::Backward(
                            Dev<T>(ctx->input(0)), Dev<T>(x), Dev<T>(ctx->input(2)), Dev<T>(dx), Dev<T>(dgamma),
                            Dev<T>(dbeta), rows, h, epsilon_, ws, bytes, Stream(ctx))));
  }

 private:
  ShapeCheck check_;
  float epsilon_ = 0.0f;
};

}  // namespace
}  // namespace bridge_gpu

BRIDGE_REGISTER_GPU_KERNELS("FusedLayerNormGrad", bridge_gpu::FusedLayerNormGradGpuOp);
BRIDGE_REGISTER_GPU_KERNELS("FusedLayerNorm", bridge_gpu::FusedLayerNormGpuOp);

#endif  // GOOGLE_CUDA
