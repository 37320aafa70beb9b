// YoloConvBnLeaky's TensorFlow GPU kernel (built with `bridge build --cuda`): the
// fold, im2col, cuBLASLt product and LeakyReLU of kernel.cuh (beside it) on
// the op's stream. The op, its shape function and CPU kernel: tf_ops/ (the GPU
// kernel checks inputs with the shape function registered there, tf_gpu.h).
//
// Limits: cuBLASLt is loaded at run time (TensorFlow's own libcublasLt when it has
// one) with a handle of ours per device, not TensorFlow's; products are full
// float32 (TF32 off) unless BRIDGE_ALLOW_TF32=1 is in the environment when the
// kernel is constructed; BRIDGE_CONV_TENSOR_CORES=1 there picks the implicit GEMM
// on tensor cores (tensor_cores.cuh) for float16 and TF32; scratch (folded
// filter, one im2col chunk of <= 64 MiB, 32 MiB for cuBLASLt) comes from
// TensorFlow's allocator per call.
#if GOOGLE_CUDA

#include <algorithm>
#include <cstdlib>
#include <string>

#include "tf_gpu.h"
#include "kernel.cuh"

namespace bridge_gpu {
namespace {

using tensorflow::OpKernelContext;
using tensorflow::Tensor;

template <typename T>
class YoloConvBnLeakyGpuOp : public tensorflow::OpKernel {
 public:
  explicit YoloConvBnLeakyGpuOp(tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, check_.Init(ctx));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("strides", &strides_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("dilations", &dilations_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("padding", &padding_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("explicit_paddings", &explicit_paddings_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("epsilon", &epsilon_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("alpha", &alpha_));
    const char* tf32 = std::getenv("BRIDGE_ALLOW_TF32");
    if (tf32 && std::string(tf32) == "1") flags_ |= bridge_cuda::conv::kAllowTf32;
    const char* tensor_cores = std::getenv("BRIDGE_CONV_TENSOR_CORES");
    if (tensor_cores && std::string(tensor_cores) == "1") flags_ |= bridge_cuda::conv::kTensorCores;
  }

  void Compute(OpKernelContext* ctx) override {
    std::vector<tensorflow::TensorShape> shapes;
    OP_REQUIRES_OK(ctx, check_.Outputs(ctx, def(), &shapes));
    Tensor* y = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, shapes[0], &y));
    if (y->NumElements() == 0) return;
    const Tensor& x = ctx->input(0);
    const Tensor& f = ctx->input(1);
    bridge_cuda::conv::Geometry g{};
    g.n = x.dim_size(0), g.h = x.dim_size(1), g.w = x.dim_size(2), g.cin = x.dim_size(3);
    g.kh = f.dim_size(0), g.kw = f.dim_size(1), g.cout = f.dim_size(3);
    g.oh = shapes[0].dim_size(1), g.ow = shapes[0].dim_size(2);
    g.sh = strides_[1], g.sw = strides_[2], g.dh = dilations_[1], g.dw = dilations_[2];
    // The leading pads as tf.nn.conv2d places them (SAME: the odd pixel at the end).
    if (padding_ == "SAME") {
      g.pad_top = std::max<int64_t>((g.oh - 1) * g.sh + (g.kh - 1) * g.dh + 1 - g.h, 0) / 2;
      g.pad_left = std::max<int64_t>((g.ow - 1) * g.sw + (g.kw - 1) * g.dw + 1 - g.w, 0) / 2;
    } else if (padding_ == "EXPLICIT") {
      g.pad_top = explicit_paddings_[2], g.pad_left = explicit_paddings_[4];
    }
    const size_t bytes = bridge_cuda::conv::WorkspaceBytes<T>(g, flags_);
    Tensor scratch;
    void* ws = nullptr;
    OP_REQUIRES_OK(ctx, Scratch(ctx, bytes, &scratch, &ws));
    const Tensor* in[7];
    for (int i = 0; i < 7; ++i) in[i] = &ctx->input(i);
    OP_REQUIRES_OK(ctx, ToStatus(bridge_cuda::conv::ConvBnLeaky(
                            Dev<T>(*in[0]), Dev<T>(*in[1]), Dev<T>(*in[2]), Dev<T>(*in[3]), Dev<T>(*in[4]),
                            Dev<T>(*in[5]), Dev<T>(*in[6]), Dev<T>(y), g, epsilon_, alpha_, flags_, ws, bytes,
                            Stream(ctx))));
  }

 private:
  ShapeCheck check_;
  std::vector<int32_t> strides_, dilations_, explicit_paddings_;
  std::string padding_;
  float epsilon_ = 1e-5f, alpha_ = 0.1f;
  int flags_ = 0;
};

}  // namespace
}  // namespace bridge_gpu

BRIDGE_REGISTER_GPU_KERNELS("YoloConvBnLeaky", bridge_gpu::YoloConvBnLeakyGpuOp);

#endif  // GOOGLE_CUDA
