// YoloConvBnLeaky's tensor-core road: an implicit GEMM (the im2col matrix is
// gathered tile by tile into shared memory, never written out) on WMMA tiles,
// with b' and LeakyReLU applied to the accumulators before the one write of y.
// float16 runs 16x16x16 tiles; float32 runs TF32 16x16x8 tiles (only when the
// caller allows TF32). Reads x once per output-channel tile, writes y once: what
// the im2col road (a K-times larger matrix written and read, then a LeakyReLU
// pass over y) cannot.
//
// One block computes a 64-pixel x 64-channel tile of Y[M, Cout] with 4 warps, each
// a 32x32 quarter as 2x2 fragments, stepping through K in slices of 32.
#ifndef BRIDGE_TF_OPS_CUDA_CONV_TENSOR_CORES_CUH_
#define BRIDGE_TF_OPS_CUDA_CONV_TENSOR_CORES_CUH_

#include <mma.h>

#include "common.cuh"

namespace bridge_cuda {
namespace conv {

namespace tc {

constexpr int kTileM = 64, kTileN = 64, kTileK = 32, kThreads = 128;

template <typename T>
struct Mma;

template <>
struct Mma<__half> {
  static constexpr int kStep = 16;
  using A = nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, __half, nvcuda::wmma::row_major>;
  using B = nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, __half, nvcuda::wmma::row_major>;
  using Acc = nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float>;
  template <typename F>
  __device__ static void Round(F&) {}
};

template <>
struct Mma<float> {
  static constexpr int kStep = 8;
  using A = nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 8, nvcuda::wmma::precision::tf32,
                                   nvcuda::wmma::row_major>;
  using B = nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 8, nvcuda::wmma::precision::tf32,
                                   nvcuda::wmma::row_major>;
  using Acc = nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 8, float>;
  template <typename F>
  __device__ static void Round(F& f) {
    for (int i = 0; i < f.num_elements; ++i) f.x[i] = nvcuda::wmma::__float_to_tf32(f.x[i]);
  }
};

// Shared-memory rows padded by 16 bytes: fragment loads stay 32-byte aligned and
// consecutive rows start in different banks.
template <typename T>
constexpr int Pad() {
  return 16 / static_cast<int>(sizeof(T));
}

template <typename T, typename G>
__global__ void __launch_bounds__(kThreads) ImplicitGemmKernel(const T* __restrict__ x, const T* __restrict__ w,
                                                               const float* __restrict__ bias, T* __restrict__ y,
                                                               G g, float alpha) {
  using M = Mma<T>;
  constexpr int lda = kTileK + Pad<T>(), ldb = kTileN + Pad<T>(), ldc = kTileN + 4;
  __shared__ __align__(32) T a_tile[kTileM * lda];
  __shared__ __align__(32) T b_tile[kTileK * ldb];
  __shared__ __align__(32) float c_tile[kTileM * ldc];
  // Per tile row (output pixel): the image's offset and the window's top-left
  // corner in the input; per tile column of the current K slice: the tap's
  // offsets and the input channel (-1 past K).
  __shared__ int64_t row_image[kTileM];
  __shared__ int row_y[kTileM], row_x[kTileM];
  __shared__ int col_dy[kTileK], col_dx[kTileK], col_c[kTileK];

  const int64_t m_total = g.n * g.oh * g.ow, k_total = g.kh * g.kw * g.cin;
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * kTileM;
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * kTileN;
  const int t = threadIdx.x, warp = t / 32, wm = warp / 2, wn = warp % 2;

  for (int r = t; r < kTileM; r += kThreads) {
    const int64_t m = m0 + r;
    if (m < m_total) {
      const int64_t ox = m % g.ow, rest = m / g.ow, oy = rest % g.oh, img = rest / g.oh;
      row_image[r] = img * g.h * g.w * g.cin;
      row_y[r] = static_cast<int>(oy * g.sh - g.pad_top);
      row_x[r] = static_cast<int>(ox * g.sw - g.pad_left);
    } else {
      row_image[r] = -1;
    }
  }

  typename M::Acc acc[2][2];
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 2; ++j) nvcuda::wmma::fill_fragment(acc[i][j], 0.0f);
  }

  for (int64_t k0 = 0; k0 < k_total; k0 += kTileK) {
    for (int c = t; c < kTileK; c += kThreads) {
      const int64_t k = k0 + c;
      if (k < k_total) {
        const int64_t tap = k / g.cin;
        col_c[c] = static_cast<int>(k - tap * g.cin);
        col_dy[c] = static_cast<int>((tap / g.kw) * g.dh);
        col_dx[c] = static_cast<int>((tap % g.kw) * g.dw);
      } else {
        col_c[c] = -1;
      }
    }
    __syncthreads();  // the column table, and the previous slice's reads of the tiles done
    for (int i = t; i < kTileM * kTileK; i += kThreads) {
      const int r = i / kTileK, c = i % kTileK;
      T v = FromF<T>(0.0f);
      if (row_image[r] >= 0 && col_c[c] >= 0) {
        const int iy = row_y[r] + col_dy[c], ix = row_x[r] + col_dx[c];
        if (iy >= 0 && iy < g.h && ix >= 0 && ix < g.w) {
          v = x[row_image[r] + (static_cast<int64_t>(iy) * g.w + ix) * g.cin + col_c[c]];
        }
      }
      a_tile[r * lda + c] = v;
    }
    for (int i = t; i < kTileK * kTileN; i += kThreads) {
      const int c = i / kTileN, n = i % kTileN;
      const int64_t k = k0 + c, col = n0 + n;
      b_tile[c * ldb + n] = (k < k_total && col < g.cout) ? w[k * g.cout + col] : FromF<T>(0.0f);
    }
    __syncthreads();
    for (int kk = 0; kk < kTileK; kk += M::kStep) {
      typename M::A a[2];
      typename M::B b[2];
      for (int i = 0; i < 2; ++i) {
        nvcuda::wmma::load_matrix_sync(a[i], a_tile + (wm * 32 + i * 16) * lda + kk, lda);
        M::Round(a[i]);
      }
      for (int j = 0; j < 2; ++j) {
        nvcuda::wmma::load_matrix_sync(b[j], b_tile + kk * ldb + wn * 32 + j * 16, ldb);
        M::Round(b[j]);
      }
      for (int i = 0; i < 2; ++i) {
        for (int j = 0; j < 2; ++j) nvcuda::wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
      }
    }
    __syncthreads();  // before the next slice's column table and tiles overwrite them
  }

  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 2; ++j) {
      nvcuda::wmma::store_matrix_sync(c_tile + (wm * 32 + i * 16) * ldc + wn * 32 + j * 16, acc[i][j], ldc,
                                      nvcuda::wmma::mem_row_major);
    }
  }
  __syncthreads();
  for (int i = t; i < kTileM * kTileN; i += kThreads) {
    const int r = i / kTileN, n = i % kTileN;
    const int64_t m = m0 + r, col = n0 + n;
    if (m < m_total && col < g.cout) {
      const float z = c_tile[r * ldc + n] + bias[col];
      y[m * g.cout + col] = FromF<T>(z > 0.0f ? z : alpha * z);
    }
  }
}

// Queues the kernel; `w` and `bias` are the folded filter [K, Cout] and b'.
template <typename T, typename G>
Status ImplicitGemm(const T* x, const T* w, const float* bias, T* y, const G& g, float alpha, cudaStream_t stream) {
  const int64_t m = g.n * g.oh * g.ow;
  const int64_t tiles_m = (m + kTileM - 1) / kTileM, tiles_n = (g.cout + kTileN - 1) / kTileN;
  if (tiles_m > 0x7fffffff || tiles_n > 65535) {
    return Error("YoloConvBnLeaky: too large for the tensor-core road's grid (" + std::to_string(tiles_m) + " x " +
                 std::to_string(tiles_n) + " tiles)");
  }
  const dim3 grid(static_cast<unsigned>(tiles_m), static_cast<unsigned>(tiles_n));
  BRIDGE_LAUNCH(grid, kThreads, 0, stream, ImplicitGemmKernel<T, G>)(x, w, bias, y, g, alpha);
  return CheckLaunch("YoloConvBnLeaky tensor-core kernel");
}

}  // namespace tc
}  // namespace conv
}  // namespace bridge_cuda

#endif  // BRIDGE_TF_OPS_CUDA_CONV_TENSOR_CORES_CUH_
