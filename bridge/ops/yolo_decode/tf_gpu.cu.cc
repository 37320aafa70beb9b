// YoloDecode's TensorFlow GPU kernel (built with `bridge build --cuda`): the
// kernel of kernel.cuh (beside it) on the op's stream. The op, its shape function
// and CPU kernel: the core bridge/ops/yolo_decode/kernel.h through host.cc. The
// CUDA kernel takes at most bridge_cuda::yolo_decode::kMaxAnchors anchors (YOLO
// heads use 3).
#if GOOGLE_CUDA

#include <limits>

#include "absl/strings/str_cat.h"
#include "tf_gpu.h"
#include "kernel.cuh"

namespace bridge_gpu {
namespace {

using tensorflow::OpKernelContext;
using tensorflow::Tensor;

template <typename T>
class YoloDecodeGpuOp : public tensorflow::OpKernel {
 public:
  explicit YoloDecodeGpuOp(tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, check_.Init(ctx));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("anchors", &anchors_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("num_classes", &num_classes_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("stride", &stride_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("scale_x_y", &scale_x_y_));
    OP_REQUIRES(ctx, num_classes_ <= std::numeric_limits<int>::max(),
                absl::InvalidArgumentError(absl::StrCat("YoloDecode: argument 'num_classes': the CUDA kernel takes at "
                                                        "most 2^31-1 classes, got ", num_classes_)));
  }

  void Compute(OpKernelContext* ctx) override {
    std::vector<tensorflow::TensorShape> shapes;
    OP_REQUIRES_OK(ctx, check_.Outputs(ctx, def(), &shapes));
    Tensor* out[3] = {nullptr, nullptr, nullptr};
    for (int i = 0; i < 3; ++i) OP_REQUIRES_OK(ctx, ctx->allocate_output(i, shapes[i], &out[i]));
    const Tensor& raw = ctx->input(0);
    if (raw.NumElements() == 0) return;
    OP_REQUIRES_OK(ctx, ToStatus(bridge_cuda::yolo_decode::Decode(
                            Dev<T>(raw), Dev<T>(out[0]), Dev<T>(out[1]), Dev<T>(out[2]), raw.dim_size(0),
                            raw.dim_size(1), raw.dim_size(2), anchors_.data(), static_cast<int>(anchors_.size() / 2),
                            static_cast<int>(num_classes_), stride_, scale_x_y_, Stream(ctx))));
  }

 private:
  ShapeCheck check_;
  std::vector<float> anchors_;
  int64_t num_classes_ = 0, stride_ = 0;
  float scale_x_y_ = 1.0f;
};

}  // namespace
}  // namespace bridge_gpu

BRIDGE_REGISTER_GPU_KERNELS("YoloDecode", bridge_gpu::YoloDecodeGpuOp);

#endif  // GOOGLE_CUDA
