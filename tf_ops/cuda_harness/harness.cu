// The fused ops' CUDA kernels behind a C ABI, for any framework's device pointers
// (bridge/cuda.py drives it with PyTorch or CuPy through ctypes).
//
// Every entry point returns 0 on success, else non-zero with the reason in
// bridge_cuda_last_error() (per thread). Pointers are device memory, contiguous,
// row-major; `stream` is a cudaStream_t (null: the legacy default stream). Work is
// queued on that stream and not waited for. Scratch memory comes from the
// device's default stream-ordered pool (cudaMallocAsync), which this library
// tells to keep freed memory for reuse; devices without pools use cudaMalloc.
// Shapes are trusted: callers check them against the op's spec first.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "fused_layer_norm.cuh"
#include "yolo_conv_bn_leaky.cuh"
#include "yolo_decode.cuh"

#define BRIDGE_API extern "C" __attribute__((visibility("default")))

namespace {

using bridge_cuda::Status;

thread_local std::string last_error;

int Report(const Status& s) {
  if (s.ok()) return 0;
  last_error = s.message;
  return 1;
}

// Runs on the device that holds `p`, as the framework that allocated it meant.
Status UseDeviceOf(const void* p) {
  if (p == nullptr) return bridge_cuda::Ok();
  cudaPointerAttributes attr;
  Status s = bridge_cuda::Check(cudaPointerGetAttributes(&attr, p), "cudaPointerGetAttributes");
  if (!s.ok()) return s;
  if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged) {
    return bridge_cuda::Error("expected a CUDA device pointer, got host memory");
  }
  return bridge_cuda::Check(cudaSetDevice(attr.device), "cudaSetDevice");
}

bool PoolsSupportedOn(int device) {
  int supported = 0;
  if (cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, device) != cudaSuccess) return false;
  if (supported) {
    // Keep what is freed instead of returning it at each synchronisation, so a
    // call's scratch costs nothing after the first one.
    cudaMemPool_t pool;
    if (cudaDeviceGetDefaultMemPool(&pool, device) == cudaSuccess) {
      uint64_t keep = UINT64_MAX;
      cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
    }
  }
  return supported != 0;
}

// Asked once per device: the answer does not change, and each call's driver
// queries would cost microseconds next to kernels that take a few.
bool PoolsSupported() {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  static std::mutex mu;
  static std::map<int, bool> known;
  std::lock_guard<std::mutex> lock(mu);
  auto it = known.find(device);
  if (it == known.end()) it = known.emplace(device, PoolsSupportedOn(device)).first;
  return it->second;
}

// Scratch memory for one call, freed in stream order when the call's work is queued.
class Scratch {
 public:
  Scratch(size_t bytes, cudaStream_t stream) : stream_(stream) {
    if (bytes == 0) return;
    async_ = PoolsSupported();
    status_ = async_ ? bridge_cuda::Check(cudaMallocAsync(&p_, bytes, stream), "cudaMallocAsync (scratch)")
                     : bridge_cuda::Check(cudaMalloc(&p_, bytes), "cudaMalloc (scratch)");
    if (!status_.ok()) p_ = nullptr;
  }
  ~Scratch() {
    if (!p_) return;
    if (async_) {
      cudaFreeAsync(p_, stream_);
    } else {
      cudaStreamSynchronize(stream_);  // the kernels may still read it
      cudaFree(p_);
    }
  }
  void* get() const { return p_; }
  const Status& status() const { return status_; }

 private:
  void* p_ = nullptr;
  cudaStream_t stream_;
  bool async_ = false;
  Status status_;
};

cudaStream_t AsStream(void* stream) { return static_cast<cudaStream_t>(stream); }

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

// Bumped whenever a signature below changes; bridge/cuda.py checks it.
BRIDGE_API int bridge_cuda_abi_version(void) { return 1; }

BRIDGE_API const char* bridge_cuda_last_error(void) { return last_error.c_str(); }

BRIDGE_API int bridge_fused_layer_norm_f32(const float* x, const float* gamma, const float* beta, float* y,
                                           int64_t rows, int64_t h, float eps, void* stream) {
  return LayerNorm<float>(x, gamma, beta, y, rows, h, eps, stream);
}

BRIDGE_API int bridge_fused_layer_norm_f16(const void* x, const void* gamma, const void* beta, void* y, int64_t rows,
                                           int64_t h, float eps, void* stream) {
  return LayerNorm<__half>(x, gamma, beta, y, rows, h, eps, stream);
}

BRIDGE_API int bridge_fused_layer_norm_backward_f32(const float* dy, const float* x, const float* gamma, float* dx,
                                                    float* dgamma, float* dbeta, int64_t rows, int64_t h, float eps,
                                                    void* stream) {
  return LayerNormBackward<float>(dy, x, gamma, dx, dgamma, dbeta, rows, h, eps, stream);
}

BRIDGE_API int bridge_fused_layer_norm_backward_f16(const void* dy, const void* x, const void* gamma, void* dx,
                                                    void* dgamma, void* dbeta, int64_t rows, int64_t h, float eps,
                                                    void* stream) {
  return LayerNormBackward<__half>(dy, x, gamma, dx, dgamma, dbeta, rows, h, eps, stream);
}

// geometry: 15 values n, h, w, cin, kh, kw, cout, oh, ow, stride_h, stride_w,
// dilation_h, dilation_w, pad_top, pad_left. flags: 1 allows TF32, 2 adds the
// bias in the LeakyReLU pass instead of cuBLASLt's epilogue.
BRIDGE_API int bridge_yolo_conv_bn_leaky_f32(const float* x, const float* filter, const float* conv_bias,
                                             const float* bn_gamma, const float* bn_beta, const float* bn_mean,
                                             const float* bn_variance, float* y, const int64_t* geometry, float eps,
                                             float alpha, int flags, void* stream) {
  return ConvBnLeaky<float>(x, filter, conv_bias, bn_gamma, bn_beta, bn_mean, bn_variance, y, geometry, eps, alpha,
                            flags, stream);
}

BRIDGE_API int bridge_yolo_conv_bn_leaky_f16(const void* x, const void* filter, const void* conv_bias,
                                             const void* bn_gamma, const void* bn_beta, const void* bn_mean,
                                             const void* bn_variance, void* y, const int64_t* geometry, float eps,
                                             float alpha, int flags, void* stream) {
  return ConvBnLeaky<__half>(x, filter, conv_bias, bn_gamma, bn_beta, bn_mean, bn_variance, y, geometry, eps, alpha,
                             flags, stream);
}

// anchors: host memory, 2*num_anchors values [w0,h0,w1,h1,...].
BRIDGE_API int bridge_yolo_decode_f32(const float* raw, float* boxes, float* objectness, float* class_probs,
                                      int64_t n, int64_t h, int64_t w, const float* anchors, int num_anchors,
                                      int num_classes, int64_t stride, float scale_x_y, void* stream) {
  return Decode<float>(raw, boxes, objectness, class_probs, n, h, w, anchors, num_anchors, num_classes, stride,
                       scale_x_y, stream);
}

BRIDGE_API int bridge_yolo_decode_f16(const void* raw, void* boxes, void* objectness, void* class_probs, int64_t n,
                                      int64_t h, int64_t w, const float* anchors, int num_anchors, int num_classes,
                                      int64_t stride, float scale_x_y, void* stream) {
  return Decode<__half>(raw, boxes, objectness, class_probs, n, h, w, anchors, num_anchors, num_classes, stride,
                        scale_x_y, stream);
}
