// YoloDecode's entry points: the C side of cuda_harness.py beside it.
#include "harness.cuh"

#include "kernel.cuh"

namespace bridge_harness {
namespace {

template <typename T>
int Decode(const void* raw, void* boxes, void* objectness, void* class_probs, int64_t n, int64_t h, int64_t w,
           const float* anchors, int num_anchors, int num_classes, int64_t stride, float scale_x_y, void* stream) {
  Status s = UseDeviceOf(raw);
  if (s.ok()) {
    s = bridge_cuda::yolo_decode::Decode<T>(static_cast<const T*>(raw), static_cast<T*>(boxes),
                                            static_cast<T*>(objectness), static_cast<T*>(class_probs), n, h, w,
                                            anchors, num_anchors, num_classes, stride, scale_x_y, AsStream(stream));
  }
  return Report(s);
}

}  // namespace
}  // namespace bridge_harness

// anchors: host memory, 2*num_anchors values [w0,h0,w1,h1,...].
BRIDGE_API int bridge_yolo_decode_f32(const float* raw, float* boxes, float* objectness, float* class_probs,
                                      int64_t n, int64_t h, int64_t w, const float* anchors, int num_anchors,
                                      int num_classes, int64_t stride, float scale_x_y, void* stream) {
  return bridge_harness::Decode<float>(raw, boxes, objectness, class_probs, n, h, w, anchors, num_anchors,
                                       num_classes, stride, scale_x_y, stream);
}

BRIDGE_API int bridge_yolo_decode_f16(const void* raw, void* boxes, void* objectness, void* class_probs, int64_t n,
                                      int64_t h, int64_t w, const float* anchors, int num_anchors, int num_classes,
                                      int64_t stride, float scale_x_y, void* stream) {
  return bridge_harness::Decode<__half>(raw, boxes, objectness, class_probs, n, h, w, anchors, num_anchors,
                                        num_classes, stride, scale_x_y, stream);
}
