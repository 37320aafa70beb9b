// FusedLayerNorm's entry points (forward and backward): the C side of cuda_harness.py beside it.
#include "harness.cuh"

#include "kernel.cuh"

namespace bridge_harness {
namespace {

template <typename T>
int LayerNorm(const void* x, const void* gamma, const void* beta, void* y, int64_t rows, int64_t h, float eps,
              void* stream) {
  Status s = UseDeviceOf(x);
  if (s.ok()) {
    s = bridge_cuda::layer_norm::Forward<T>(static_cast<const T*>(x), static_cast<const T*>(gamma),
                                            static_cast<const T*>(beta), static_cast<T*>(y), rows, h, eps,
                                            AsStream(stream));
  }
  return Report(s);
}

template <typename T>
int LayerNormBackward(const void* dy, const void* x, const void* gamma, void* dx, void* dgamma, void* dbeta,
                      int64_t rows, int64_t h, float eps, void* stream) {
  Status s = UseDeviceOf(gamma);
  if (!s.ok()) return Report(s);
  const size_t bytes = bridge_cuda::layer_norm::BackwardWorkspaceBytes(rows, h);
  Scratch scratch(bytes, AsStream(stream));
  if (!scratch.status().ok()) return Report(scratch.status());
  return Report(bridge_cuda::layer_norm::Backward<T>(
      static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<const T*>(gamma), static_cast<T*>(dx),
      static_cast<T*>(dgamma), static_cast<T*>(dbeta), rows, h, eps, scratch.get(), bytes, AsStream(stream)));
}

}  // namespace
}  // namespace bridge_harness

BRIDGE_API int bridge_fused_layer_norm_f32(const float* x, const float* gamma, const float* beta, float* y,
                                           int64_t rows, int64_t h, float eps, void* stream) {
  return bridge_harness::LayerNorm<float>(x, gamma, beta, y, rows, h, eps, stream);
}

BRIDGE_API int bridge_fused_layer_norm_f16(const void* x, const void* gamma, const void* beta, void* y, int64_t rows,
                                           int64_t h, float eps, void* stream) {
  return bridge_harness::LayerNorm<__half>(x, gamma, beta, y, rows, h, eps, stream);
}

BRIDGE_API int bridge_fused_layer_norm_backward_f32(const float* dy, const float* x, const float* gamma, float* dx,
                                                    float* dgamma, float* dbeta, int64_t rows, int64_t h, float eps,
                                                    void* stream) {
  return bridge_harness::LayerNormBackward<float>(dy, x, gamma, dx, dgamma, dbeta, rows, h, eps, stream);
}

BRIDGE_API int bridge_fused_layer_norm_backward_f16(const void* dy, const void* x, const void* gamma, void* dx,
                                                    void* dgamma, void* dbeta, int64_t rows, int64_t h, float eps,
                                                    void* stream) {
  return bridge_harness::LayerNormBackward<__half>(dy, x, gamma, dx, dgamma, dbeta, rows, h, eps, stream);
}
