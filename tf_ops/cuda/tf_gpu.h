// What the TensorFlow GPU kernels (bridge/ops/<op>/tf_gpu.cu.cc) share: the op's own shape
// function as the input checker, the op's CUDA stream, scratch memory, and the
// CUDA side's Status as TensorFlow's.
//
// The checker runs the shape function that the op's CPU file registered, on the
// call's concrete shapes, so the GPU kernel rejects exactly what the CPU kernel
// and the Python spec reject, in the same words (the CPU files own those checks;
// this keeps a second copy from drifting). It costs a few microseconds per call.
#ifndef BRIDGE_TF_OPS_CUDA_TF_GPU_H_
#define BRIDGE_TF_OPS_CUDA_TF_GPU_H_

#include <cuda_runtime.h>

#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "common.cuh"
#include "tensorflow/core/framework/node_def_util.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/public/version.h"
#include "xla/stream_executor/stream.h"

namespace bridge_gpu {

class ShapeCheck {
 public:
  // Finds the op's shape function and checks the attributes (it reads and
  // validates them before it looks at any shape).
  absl::Status Init(tensorflow::OpKernelConstruction* ctx) {
    TF_RETURN_IF_ERROR(tensorflow::OpRegistry::Global()->LookUp(ctx->def().op(), &reg_));
    std::vector<tensorflow::PartialTensorShape> unknown(ctx->num_inputs());
    return Run(ctx->def(), unknown, nullptr);
  }

  // Checks the inputs of one call; `outputs` gets the output shapes.
  absl::Status Outputs(tensorflow::OpKernelContext* ctx, const tensorflow::NodeDef& def,
                       std::vector<tensorflow::TensorShape>* outputs) const {
    std::vector<tensorflow::PartialTensorShape> shapes;
    for (int i = 0; i < ctx->num_inputs(); ++i) shapes.emplace_back(ctx->input(i).shape());
    return Run(def, shapes, outputs);
  }

 private:
  absl::Status Run(const tensorflow::NodeDef& def, const std::vector<tensorflow::PartialTensorShape>& inputs,
                   std::vector<tensorflow::TensorShape>* outputs) const {
    std::vector<const tensorflow::Tensor*> no_values(inputs.size(), nullptr);
    std::vector<std::unique_ptr<std::vector<std::pair<tensorflow::PartialTensorShape, tensorflow::DataType>>>>
        no_handles;
    tensorflow::shape_inference::InferenceContext c(TF_GRAPH_DEF_VERSION, tensorflow::AttrSlice(def), reg_->op_def,
                                                    inputs, no_values, {}, no_handles);
    TF_RETURN_IF_ERROR(c.construction_status());
    // Called directly rather than through c.Run(), which appends the node's
    // description to the message: the words stay those of the CPU kernel.
    TF_RETURN_IF_ERROR(reg_->shape_inference_fn(&c));
    if (outputs) {
      outputs->clear();
      for (int i = 0; i < c.num_outputs(); ++i) {
        auto out = c.output(i);
        tensorflow::TensorShape shape;
        for (int d = 0; d < c.Rank(out); ++d) {
          TF_RETURN_IF_ERROR(shape.AddDimWithStatus(c.Value(c.Dim(out, d))));
        }
        outputs->push_back(shape);
      }
    }
    return absl::OkStatus();
  }

  const tensorflow::OpRegistrationData* reg_ = nullptr;
};

inline cudaStream_t Stream(tensorflow::OpKernelContext* ctx) {
  return static_cast<cudaStream_t>(ctx->op_device_context()->stream()->platform_specific_handle().stream);
}

inline absl::Status ToStatus(const bridge_cuda::Status& s) {
  return s.ok() ? absl::OkStatus() : absl::InternalError(s.message);
}

// `bytes` of device scratch for this call, from TensorFlow's allocator (stream
// ordered: freed when the tensor goes, reusable by later work on the stream).
inline absl::Status Scratch(tensorflow::OpKernelContext* ctx, size_t bytes, tensorflow::Tensor* t, void** p) {
  *p = nullptr;
  if (bytes == 0) return absl::OkStatus();
  TF_RETURN_IF_ERROR(ctx->allocate_temp(tensorflow::DT_INT8, tensorflow::TensorShape({static_cast<int64_t>(bytes)}), t));
  *p = t->flat<int8_t>().data();
  return absl::OkStatus();
}

// TensorFlow's half and CUDA's have the same 16 bits.
template <typename T>
struct DeviceType {
  using type = T;
};
template <>
struct DeviceType<Eigen::half> {
  using type = __half;
};

template <typename T>
const typename DeviceType<T>::type* Dev(const tensorflow::Tensor& t) {
  return reinterpret_cast<const typename DeviceType<T>::type*>(t.flat<T>().data());
}

template <typename T>
typename DeviceType<T>::type* Dev(tensorflow::Tensor* t) {
  return reinterpret_cast<typename DeviceType<T>::type*>(t->flat<T>().data());
}

}  // namespace bridge_gpu

// Registers Kernel<float> and Kernel<Eigen::half> as op `name`'s GPU kernels: T is
// float32 or float16 for every bridge op.
#define BRIDGE_REGISTER_GPU_KERNELS(name, Kernel)                                                          \
  REGISTER_KERNEL_BUILDER(Name(name).Device(tensorflow::DEVICE_GPU).TypeConstraint<float>("T"), Kernel<float>); \
  REGISTER_KERNEL_BUILDER(Name(name).Device(tensorflow::DEVICE_GPU).TypeConstraint<Eigen::half>("T"),         \
                          Kernel<Eigen::half>)

#endif  // BRIDGE_TF_OPS_CUDA_TF_GPU_H_
