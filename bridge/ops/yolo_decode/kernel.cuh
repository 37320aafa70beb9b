// YoloDecode on CUDA (contract: shared/ops.md), shared by the TensorFlow GPU
// kernel (tf_gpu.cu.cc here) and the C-ABI harness (cuda_harness.cu).
//
// Elementwise and one pass: one thread per input value (cell, anchor, channel),
// so the reads of `raw` are coalesced; each thread writes its value to the one
// output it belongs to (box coordinate, objectness or class probability).
// The anchors travel in the kernel's parameters, which caps A at kMaxAnchors.
#ifndef BRIDGE_OPS_YOLO_DECODE_KERNEL_CUH_
#define BRIDGE_OPS_YOLO_DECODE_KERNEL_CUH_

#include <string>

#include "common.cuh"

namespace bridge_cuda {
namespace yolo_decode {

constexpr int kMaxAnchors = 32;

struct Params {
  float anchors[2 * kMaxAnchors];
  int64_t grid_h, grid_w;
  int num_anchors, num_classes;
  float stride, scale_x_y, offset;  // offset = (scale_x_y - 1) / 2
};

__device__ __forceinline__ float Sigmoid(float v) { return 1.0f / (1.0f + expf(-v)); }

template <typename T>
__global__ void DecodeKernel(const T* __restrict__ raw, T* __restrict__ boxes, T* __restrict__ objectness,
                             T* __restrict__ class_probs, int64_t total, Params p) {
  const int64_t per = 5 + p.num_classes;
  const int64_t channels = p.num_anchors * per;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t cell = i / channels;  // (n*H + h)*W + w
    const int64_t within = i - cell * channels;
    const int a = static_cast<int>(within / per);
    const int k = static_cast<int>(within - a * per);
    const int64_t row = cell * p.num_anchors + a;  // (n*H*W + h*W + w)*A + a
    const float v = ToF(raw[i]);
    switch (k) {
      case 0:
        boxes[row * 4] = FromF<T>((p.scale_x_y * Sigmoid(v) - p.offset + static_cast<float>(cell % p.grid_w)) *
                                  p.stride);
        break;
      case 1:
        boxes[row * 4 + 1] = FromF<T>(
            (p.scale_x_y * Sigmoid(v) - p.offset + static_cast<float>((cell / p.grid_w) % p.grid_h)) * p.stride);
        break;
      case 2: boxes[row * 4 + 2] = FromF<T>(expf(v) * p.anchors[2 * a]); break;
      case 3: boxes[row * 4 + 3] = FromF<T>(expf(v) * p.anchors[2 * a + 1]); break;
      case 4: objectness[row] = FromF<T>(Sigmoid(v)); break;
      default: class_probs[row * p.num_classes + (k - 5)] = FromF<T>(Sigmoid(v)); break;
    }
  }
}

// `anchors` is host memory, 2*num_anchors values. The caller has checked the
// attributes against the spec; this guards only what the kernel itself assumes.
template <typename T>
Status Decode(const T* raw, T* boxes, T* objectness, T* class_probs, int64_t n, int64_t grid_h, int64_t grid_w,
              const float* anchors, int num_anchors, int num_classes, int64_t stride, float scale_x_y,
              cudaStream_t stream) {
  if (num_anchors < 1 || num_anchors > kMaxAnchors) {
    return Error("YoloDecode: argument 'anchors': the CUDA kernel takes 1.." + std::to_string(kMaxAnchors) +
                 " anchors (2..." + std::to_string(2 * kMaxAnchors) + " values), got " +
                 std::to_string(2 * num_anchors) + " values");
  }
  if (num_classes < 1) return Error("YoloDecode: argument 'num_classes': must be >= 1, got " + std::to_string(num_classes));
  if (stride < 1) return Error("YoloDecode: argument 'stride': must be >= 1, got " + std::to_string(stride));
  if (n < 0 || grid_h < 0 || grid_w < 0) {
    return Error("YoloDecode: argument 'raw': negative dimension in [" + std::to_string(n) + "," +
                 std::to_string(grid_h) + "," + std::to_string(grid_w) + ",...]");
  }
  const int64_t total = n * grid_h * grid_w * num_anchors * (5 + static_cast<int64_t>(num_classes));
  if (total == 0) return Ok();
  Params p{};
  for (int i = 0; i < 2 * num_anchors; ++i) p.anchors[i] = anchors[i];
  p.grid_h = grid_h;
  p.grid_w = grid_w;
  p.num_anchors = num_anchors;
  p.num_classes = num_classes;
  p.stride = static_cast<float>(stride);
  p.scale_x_y = scale_x_y;
  p.offset = (scale_x_y - 1.0f) * 0.5f;
  BRIDGE_LAUNCH(LaunchBlocks(total, 256), 256, 0, stream, DecodeKernel<T>)
      (raw, boxes, objectness, class_probs, total, p);
  return CheckLaunch("YoloDecode kernel");
}

}  // namespace yolo_decode
}  // namespace bridge_cuda

#endif  // BRIDGE_OPS_YOLO_DECODE_KERNEL_CUH_
