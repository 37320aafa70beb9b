// FusedLayerNorm's TensorFlow GPU kernel (built with `bridge build --cuda`): the
// kernels of cuda/fused_layer_norm.cuh on the op's stream. The op itself, its
// shape function and CPU kernel are in fused_layer_norm.cc; the gradient (Python)
// runs as standard TF ops on whichever device.
#if GOOGLE_CUDA

#include "cuda/fused_layer_norm.cuh"
#include "cuda/tf_gpu.h"

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

}  // namespace
}  // namespace bridge_gpu

REGISTER_KERNEL_BUILDER(Name("FusedLayerNorm").Device(tensorflow::DEVICE_GPU).TypeConstraint<float>("T"),
                        bridge_gpu::FusedLayerNormGpuOp<float>);
REGISTER_KERNEL_BUILDER(Name("FusedLayerNorm").Device(tensorflow::DEVICE_GPU).TypeConstraint<Eigen::half>("T"),
                        bridge_gpu::FusedLayerNormGpuOp<Eigen::half>);

#endif  // GOOGLE_CUDA
