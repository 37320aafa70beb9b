// YoloConvBnLeaky's entry points: the C side of cuda_harness.py beside it.
#include "harness.cuh"

#include "kernel.cuh"

namespace bridge_harness {
namespace {

template <typename T>
int ConvBnLeaky(const void* x, const void* filter, const void* conv_bias, const void* bn_gamma, const void* bn_beta,
                const void* bn_mean, const void* bn_variance, void* y, const int64_t* geometry, float eps, float alpha,
                int flags, void* stream) {
  if (geometry == nullptr) return Report(bridge_cuda::Error("YoloConvBnLeaky: argument 'geometry': null"));
  const int64_t* v = geometry;
  const bridge_cuda::conv::Geometry g{v[0], v[1], v[2],  v[3],  v[4],  v[5],  v[6], v[7],
                                      v[8], v[9], v[10], v[11], v[12], v[13], v[14]};
  Status s = bridge_cuda::conv::CheckGeometry(g);  // before the scratch is sized from it
  if (s.ok()) s = UseDeviceOf(filter);
  if (!s.ok()) return Report(s);
  const size_t bytes = bridge_cuda::conv::WorkspaceBytes<T>(g, flags);
  Scratch scratch(g.M() > 0 && g.cout > 0 ? bytes : 0, AsStream(stream));
  if (!scratch.status().ok()) return Report(scratch.status());
  return Report(bridge_cuda::conv::ConvBnLeaky<T>(
      static_cast<const T*>(x), static_cast<const T*>(filter), static_cast<const T*>(conv_bias),
      static_cast<const T*>(bn_gamma), static_cast<const T*>(bn_beta), static_cast<const T*>(bn_mean),
      static_cast<const T*>(bn_variance), static_cast<T*>(y), g, eps, alpha, flags, scratch.get(), bytes,
      AsStream(stream)));
}

}  // namespace
}  // namespace bridge_harness

// geometry: 15 values n, h, w, cin, kh, kw, cout, oh, ow, stride_h, stride_w,
// dilation_h, dilation_w, pad_top, pad_left. flags: 1 allows TF32, 2 adds the
// bias in the LeakyReLU pass instead of cuBLASLt's epilogue.
BRIDGE_API int bridge_yolo_conv_bn_leaky_f32(const float* x, const float* filter, const float* conv_bias,
                                             const float* bn_gamma, const float* bn_beta, const float* bn_mean,
                                             const float* bn_variance, float* y, const int64_t* geometry, float eps,
                                             float alpha, int flags, void* stream) {
  return bridge_harness::ConvBnLeaky<float>(x, filter, conv_bias, bn_gamma, bn_beta, bn_mean, bn_variance, y,
                                            geometry, eps, alpha, flags, stream);
}

BRIDGE_API int bridge_yolo_conv_bn_leaky_f16(const void* x, const void* filter, const void* conv_bias,
                                             const void* bn_gamma, const void* bn_beta, const void* bn_mean,
                                             const void* bn_variance, void* y, const int64_t* geometry, float eps,
                                             float alpha, int flags, void* stream) {
  return bridge_harness::ConvBnLeaky<__half>(x, filter, conv_bias, bn_gamma, bn_beta, bn_mean, bn_variance, y,
                                             geometry, eps, alpha, flags, stream);
}
