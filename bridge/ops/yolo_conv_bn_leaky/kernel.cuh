// YoloConvBnLeaky on CUDA (contract: shared/ops.md), shared by the TensorFlow GPU
// kernel (tf_gpu.cu.cc here) and the C-ABI harness (cuda_harness.cu).
//
//   1. fold:   W'[..., o] = filter[..., o] * s[o], b'[o] = (conv_bias[o] - mean[o]) * s[o] + beta[o],
//              s = gamma / sqrt(variance + epsilon); one small kernel, every call
//              (cheap next to the convolution).
//   2. im2col: the NHWC input as an [N*OH*OW, KH*KW*Cin] matrix, in chunks of at
//              most kIm2colBytes; a 1x1 stride-1 unpadded convolution skips it (the
//              NHWC input already is that matrix).
//   3. GEMM:   cuBLASLt, Y[M, Cout] = cols[M, K] * W'[K, Cout] in float32 accumulation
//              (TF32 only when the caller allows it), b' added by the BIAS epilogue.
//   4. LeakyReLU in one elementwise pass over Y (cuBLASLt has ReLU epilogues but no
//              leaky one), per chunk. Where cuBLASLt offers no algorithm with the
//              BIAS epilogue (or kNoEpilogue asks), the product runs without it and
//              this pass adds b' (kept in float32) too.
//
// Layouts: the row-major [K, Cout] filter is a column-major Cout x K matrix and the
// row-major cols a column-major K x M one, so Y^T = W'^T * cols^T needs no transpose.
//
// With kTensorCores (float16, or float32 with TF32 allowed) steps 2-4 are one
// implicit-GEMM kernel on tensor cores instead (tensor_cores.cuh).
#ifndef BRIDGE_OPS_YOLO_CONV_BN_LEAKY_KERNEL_CUH_
#define BRIDGE_OPS_YOLO_CONV_BN_LEAKY_KERNEL_CUH_

#include <string>
#include <type_traits>

#include "common.cuh"
#include "tensor_cores.cuh"
#include "cublaslt.cuh"

namespace bridge_cuda {
namespace conv {

constexpr size_t kIm2colBytes = size_t(64) << 20;
constexpr size_t kGemmWorkspaceBytes = size_t(32) << 20;

enum Flags : int {
  kAllowTf32 = 1,    // float32 products in TF32 (faster, ~1e-3 relative error)
  kNoEpilogue = 2,   // add b' in the LeakyReLU pass instead of cuBLASLt's epilogue
  kTensorCores = 4,  // the implicit GEMM on tensor cores (tensor_cores.cuh) where it
                     // applies: float16, and float32 with kAllowTf32
};

template <typename T>
bool UsesTensorCores(int flags) {
  return (flags & kTensorCores) && (std::is_same<T, __half>::value || (flags & kAllowTf32));
}

// Everything about one call, in elements; pads are the top/left ones (the
// bottom/right ones only shape OH/OW, which the caller has computed).
struct Geometry {
  int64_t n, h, w, cin, kh, kw, cout, oh, ow, sh, sw, dh, dw, pad_top, pad_left;
  __host__ __device__ int64_t M() const { return n * oh * ow; }
  __host__ __device__ int64_t K() const { return kh * kw * cin; }
  bool Pointwise() const {
    return kh == 1 && kw == 1 && sh == 1 && sw == 1 && pad_top == 0 && pad_left == 0 && oh == h && ow == w;
  }
};

inline std::string Describe(const Geometry& g) {
  auto s = [](int64_t v) { return std::to_string(v); };
  return "x [" + s(g.n) + "," + s(g.h) + "," + s(g.w) + "," + s(g.cin) + "], filter [" + s(g.kh) + "," + s(g.kw) +
         "," + s(g.cin) + "," + s(g.cout) + "], y [" + s(g.n) + "," + s(g.oh) + "," + s(g.ow) + "," + s(g.cout) +
         "], strides [" + s(g.sh) + "," + s(g.sw) + "], dilations [" + s(g.dh) + "," + s(g.dw) + "], pads [" +
         s(g.pad_top) + "," + s(g.pad_left) + "]";
}

template <typename T>
__global__ void FoldKernel(const T* __restrict__ filter, const T* __restrict__ conv_bias,
                           const T* __restrict__ gamma, const T* __restrict__ beta, const T* __restrict__ mean,
                           const T* __restrict__ variance, T* __restrict__ w, T* __restrict__ bias_t,
                           float* __restrict__ bias_f, int64_t k, int64_t cout, float eps) {
  const int64_t weights = k * cout;
  const int64_t total = weights > cout ? weights : cout;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t o = i % cout;
    const float s = ToF(gamma[o]) / sqrtf(ToF(variance[o]) + eps);
    if (i < weights) w[i] = FromF<T>(ToF(filter[i]) * s);
    if (i < cout) {  // here o == i
      const float b = (ToF(conv_bias[i]) - ToF(mean[i])) * s + ToF(beta[i]);
      bias_f[i] = b;
      bias_t[i] = FromF<T>(b);
    }
  }
}

// cols[r, (ky*KW + kx)*Cin + ci] for output pixels row0 .. row0+rows-1; zeros where
// the filter tap falls in the padding.
template <typename T>
__global__ void Im2colKernel(const T* __restrict__ x, T* __restrict__ cols, Geometry g, int64_t row0,
                             int64_t rows) {
  const int64_t k = g.K();
  const int64_t total = rows * k;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / k, kk = i - r * k;
    const int64_t ci = kk % g.cin, tap = kk / g.cin;
    const int64_t kx = tap % g.kw, ky = tap / g.kw;
    const int64_t m = row0 + r;
    const int64_t ox = m % g.ow, rest = m / g.ow;
    const int64_t oy = rest % g.oh, img = rest / g.oh;
    const int64_t iy = oy * g.sh - g.pad_top + ky * g.dh;
    const int64_t ix = ox * g.sw - g.pad_left + kx * g.dw;
    cols[i] = (iy >= 0 && iy < g.h && ix >= 0 && ix < g.w) ? x[((img * g.h + iy) * g.w + ix) * g.cin + ci]
                                                          : FromF<T>(0.0f);
  }
}

// y = leaky(y + bias[channel]) in place; bias may be null (already added).
template <typename T, int V>
__global__ void BiasLeakyKernel(T* __restrict__ y, const float* __restrict__ bias, int64_t units, int64_t cout,
                                float alpha) {
  for (int64_t u = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; u < units;
       u += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float z[V];
    LoadF<T, V>(y + u * V, z);
#pragma unroll
    for (int i = 0; i < V; ++i) {
      if (bias) z[i] += bias[(u * V + i) % cout];
      z[i] = z[i] > 0.0f ? z[i] : alpha * z[i];
    }
    StoreF<T, V>(y + u * V, z);
  }
}

// `total` values of y from a chunk that starts at a pixel boundary, so value i
// belongs to channel i % cout.
template <typename T>
Status BiasLeaky(T* y, const float* bias, int64_t total, int64_t cout, float alpha, cudaStream_t stream) {
  const int wide = 16 / static_cast<int>(sizeof(T));
  if (total % wide == 0 && Aligned(y, 16)) {
    BRIDGE_LAUNCH(LaunchBlocks(total / wide, 256), 256, 0, stream, BiasLeakyKernel<T, 16 / sizeof(T)>)
        (y, bias, total / wide, cout, alpha);
  } else {
    BRIDGE_LAUNCH(LaunchBlocks(total, 256), 256, 0, stream, BiasLeakyKernel<T, 1>)(y, bias, total, cout, alpha);
  }
  return CheckLaunch("YoloConvBnLeaky LeakyReLU kernel");
}

// The workspace's slices; sized by a run with base == nullptr.
template <typename T>
struct Scratch {
  T* w;
  T* bias_t;
  float* bias_f;
  T* cols;
  void* gemm;
  int64_t chunk;  // output pixels per im2col chunk (0: pointwise, no im2col)
  size_t bytes;
  Scratch(void* base, const Geometry& g, int flags) {
    Carve c(base);
    const int64_t k = g.K(), m = g.M();
    w = c.take<T>(static_cast<size_t>(k * g.cout));
    bias_t = c.take<T>(static_cast<size_t>(g.cout));
    bias_f = c.take<float>(static_cast<size_t>(g.cout));
    chunk = 0;
    if (UsesTensorCores<T>(flags)) {  // no im2col matrix, no cuBLASLt
      cols = nullptr;
      gemm = nullptr;
      bytes = c.used;
      return;
    }
    if (!g.Pointwise() && k > 0 && m > 0) {
      chunk = static_cast<int64_t>(kIm2colBytes / (sizeof(T) * k));
      chunk = chunk < 1 ? 1 : (chunk > m ? m : chunk);
    }
    cols = c.take<T>(static_cast<size_t>(chunk * k));
    gemm = c.take<char>(kGemmWorkspaceBytes);
    bytes = c.used;
  }
};

template <typename T>
size_t WorkspaceBytes(const Geometry& g, int flags) {
  return Scratch<T>(nullptr, g, flags).bytes;
}

inline Status CheckGeometry(const Geometry& g) {
  const int64_t v[] = {g.n, g.h, g.w, g.cin, g.kh, g.kw, g.cout, g.oh, g.ow};
  for (int64_t d : v) {
    if (d < 0) return Error("YoloConvBnLeaky: argument 'x': negative size in " + Describe(g));
  }
  if (g.sh < 1 || g.sw < 1 || g.dh < 1 || g.dw < 1) {
    return Error("YoloConvBnLeaky: argument 'strides': strides and dilations must be positive, got " + Describe(g));
  }
  if (g.pad_top < 0 || g.pad_left < 0) {
    return Error("YoloConvBnLeaky: argument 'explicit_paddings': pads must be non-negative, got " + Describe(g));
  }
  return Ok();
}

template <typename T>
Status ConvBnLeaky(const T* x, const T* filter, const T* conv_bias, const T* bn_gamma, const T* bn_beta,
                   const T* bn_mean, const T* bn_variance, T* y, const Geometry& g, float eps, float alpha,
                   int flags, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  Status s = CheckGeometry(g);
  if (!s.ok()) return s;
  const int64_t m = g.M(), k = g.K();
  if (m == 0 || g.cout == 0) return Ok();  // empty output
  Scratch<T> w(workspace, g, flags);
  if (workspace == nullptr || workspace_bytes < w.bytes) {
    return Error("YoloConvBnLeaky: workspace of " + std::to_string(workspace_bytes) + " bytes, needs " +
                 std::to_string(w.bytes));
  }
  const int64_t fold_total = k * g.cout > g.cout ? k * g.cout : g.cout;
  BRIDGE_LAUNCH(LaunchBlocks(fold_total, 256), 256, 0, stream, FoldKernel<T>)
      (filter, conv_bias, bn_gamma, bn_beta, bn_mean, bn_variance, w.w, w.bias_t, w.bias_f, k, g.cout, eps);
  s = CheckLaunch("YoloConvBnLeaky fold kernel");
  if (!s.ok()) return s;

  if (k == 0) {  // no input channels: the convolution is all zeros, y = leaky(b')
    s = Check(cudaMemsetAsync(y, 0, sizeof(T) * m * g.cout, stream), "YoloConvBnLeaky: zeroing y");
    return s.ok() ? BiasLeaky(y, w.bias_f, m * g.cout, g.cout, alpha, stream) : s;
  }
  if (UsesTensorCores<T>(flags)) return tc::ImplicitGemm<T>(x, w.w, w.bias_f, y, g, alpha, stream);
  const cudaDataType_t type = std::is_same<T, float>::value ? CUDA_R_32F : CUDA_R_16F;
  const bool tf32 = (flags & kAllowTf32) != 0;
  const int64_t step = w.chunk > 0 ? w.chunk : m;
  for (int64_t row0 = 0; row0 < m; row0 += step) {
    const int64_t rows = m - row0 < step ? m - row0 : step;
    const T* cols = x + row0 * k;  // pointwise: the input rows are the cols rows
    if (w.chunk > 0) {
      BRIDGE_LAUNCH(LaunchBlocks(rows * k, 256), 256, 0, stream, Im2colKernel<T>)(x, w.cols, g, row0, rows);
      s = CheckLaunch("YoloConvBnLeaky im2col kernel");
      if (!s.ok()) return s;
      cols = w.cols;
    }
    T* out = y + row0 * g.cout;
    bool bias_in_pass = (flags & kNoEpilogue) != 0, no_algorithm = false;
    s = lt::Matmul(w.w, cols, out, bias_in_pass ? nullptr : w.bias_t, g.cout, rows, k, type, tf32, w.gemm,
                   kGemmWorkspaceBytes, stream, &no_algorithm);
    if (!s.ok() && no_algorithm && !bias_in_pass) {
      bias_in_pass = true;
      s = lt::Matmul(w.w, cols, out, nullptr, g.cout, rows, k, type, tf32, w.gemm, kGemmWorkspaceBytes, stream,
                     &no_algorithm);
    }
    if (!s.ok()) return Error("YoloConvBnLeaky: " + s.message + " for " + Describe(g));
    s = BiasLeaky(out, bias_in_pass ? w.bias_f : nullptr, rows * g.cout, g.cout, alpha, stream);
    if (!s.ok()) return s;
  }
  return Ok();
}

}  // namespace conv
}  // namespace bridge_cuda

#endif  // BRIDGE_OPS_YOLO_CONV_BN_LEAKY_KERNEL_CUH_
