// YoloConvBnLeaky's tensor-core road: an implicit GEMM (the im2col matrix is
// gathered tile by tile into shared memory, never written out) on WMMA tiles,
// with b' and LeakyReLU applied to the accumulators before the one write of y.
// float16 runs 16x16x16 tiles; float32 runs TF32 16x16x8 tiles (only when the
// caller allows TF32). Reads x once per output-channel tile, writes y once: what
// the im2col road (a K-times larger matrix written and read, then a LeakyReLU
// pass over y) cannot.
//
// One block computes a 128-pixel x 64-channel tile of Y[M, Cout] with 8 warps,
// stepping through K in slices of 32: the next slice is gathered into registers
// (16-byte loads where Cin and Cout allow) while the current one is multiplied.
#ifndef BRIDGE_OPS_YOLO_CONV_BN_LEAKY_TENSOR_CORES_CUH_
#define BRIDGE_OPS_YOLO_CONV_BN_LEAKY_TENSOR_CORES_CUH_

#include <mma.h>

#include "common.cuh"

namespace bridge_cuda {
namespace conv {

namespace tc {

constexpr int kTileM = 128, kTileN = 64, kTileK = 32, kThreads = 256;

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

// Shared-memory rows padded by 16 bytes: fragment loads stay 32-byte aligned,
// 16-byte vector stores stay aligned, and consecutive rows start in other banks.
template <typename T>
constexpr int Pad() {
  return 16 / static_cast<int>(sizeof(T));
}

// Elements of T in 16 bytes: one vector load or store.
template <typename T>
constexpr int Vec() {
  return 16 / static_cast<int>(sizeof(T));
}

// Per thread and K slice: 16 values of the A tile (128 x 32) and 8 of the B tile
// (32 x 64), as 16-byte vectors when the layout allows, else one by one.
constexpr int kRegsA = kTileM * kTileK / kThreads, kRegsB = kTileK * kTileN / kThreads;

// One K slice of the gathered input (rows: output pixels; columns: k = (ky*KW + kx)*Cin
// + ci) into registers. `vector`: Cin is a multiple of the vector and x is
// 16-byte aligned, so each vector lies in one tap's contiguous channels.
template <typename T, typename G>
__device__ __forceinline__ void GatherA(const T* __restrict__ x, const G& g, int64_t k0, int64_t k_total,
                                        const int64_t* row_image, const int* row_y, const int* row_x, bool vector,
                                        int t, T* regs) {
  constexpr int V = Vec<T>();
  const int per_row = vector ? kTileK / V : kTileK;  // loads per tile row
  const int loads = vector ? kRegsA / V : kRegsA;    // loads per thread
  for (int j = 0; j < loads; ++j) {
    const int i = t + j * kThreads;
    const int r = i / per_row, c = (i % per_row) * (vector ? V : 1);
    const int64_t k = k0 + c;
    T* out = regs + j * (vector ? V : 1);
    bool inside = row_image[r] >= 0 && k < k_total;
    int64_t at = 0;
    if (inside) {
      const int64_t tap = k / g.cin, ci = k - tap * g.cin;
      const int64_t iy = row_y[r] + (tap / g.kw) * g.dh, ix = row_x[r] + (tap % g.kw) * g.dw;
      inside = iy >= 0 && iy < g.h && ix >= 0 && ix < g.w;
      at = row_image[r] + (iy * g.w + ix) * g.cin + ci;
    }
    if (vector) {
      if (inside) {
        LoadVec<T, V>(x + at, out);
      } else {
        for (int e = 0; e < V; ++e) out[e] = FromF<T>(0.0f);
      }
    } else {
      out[0] = inside ? x[at] : FromF<T>(0.0f);
    }
  }
}

// One K slice of the folded filter W'[K, Cout] (rows k, columns n) into registers;
// `vector`: Cout is a multiple of the vector (W' is 256-byte aligned scratch).
template <typename T, typename G>
__device__ __forceinline__ void GatherB(const T* __restrict__ w, const G& g, int64_t k0, int64_t n0, int64_t k_total,
                                        bool vector, int t, T* regs) {
  constexpr int V = Vec<T>();
  const int per_row = vector ? kTileN / V : kTileN;
  const int loads = vector ? kRegsB / V : kRegsB;
  for (int j = 0; j < loads; ++j) {
    const int i = t + j * kThreads;
    const int64_t k = k0 + i / per_row, col = n0 + (i % per_row) * (vector ? V : 1);
    T* out = regs + j * (vector ? V : 1);
    if (vector) {
      if (k < k_total && col < g.cout) {
        LoadVec<T, V>(w + k * g.cout + col, out);
      } else {
        for (int e = 0; e < V; ++e) out[e] = FromF<T>(0.0f);
      }
    } else {
      out[0] = (k < k_total && col < g.cout) ? w[k * g.cout + col] : FromF<T>(0.0f);
    }
  }
}

// Registers gathered by GatherA / GatherB (`width` columns, `count` values per
// thread) into a shared tile, in the order they were read.
template <typename T>
__device__ __forceinline__ void StoreTile(const T* regs, bool vector, int width, int count, int t, T* tile,
                                          int ld) {
  constexpr int V = Vec<T>();
  const int per_row = vector ? width / V : width, stores = vector ? count / V : count;
  for (int j = 0; j < stores; ++j) {
    const int i = t + j * kThreads;
    T* at = tile + (i / per_row) * ld + (i % per_row) * (vector ? V : 1);
    if (vector) {
      StoreVec<T, V>(at, regs + j * V);
    } else {
      *at = regs[j];
    }
  }
}

template <typename T>
__device__ __forceinline__ void StoreTiles(const T* regs_a, const T* regs_b, bool vector_a, bool vector_b, int t,
                                           T* a_tile, int lda, T* b_tile, int ldb) {
  StoreTile(regs_a, vector_a, kTileK, kRegsA, t, a_tile, lda);
  StoreTile(regs_b, vector_b, kTileN, kRegsB, t, b_tile, ldb);
}

// One block: a 128-pixel x 64-channel tile of Y with 8 warps (4 x 2), each warp a
// 32x32 piece as 2x2 fragments. The next K slice is fetched into registers while
// the tensor cores work on the current one from shared memory.
template <typename T, typename G>
__global__ void __launch_bounds__(kThreads) ImplicitGemmKernel(const T* __restrict__ x, const T* __restrict__ w,
                                                               const float* __restrict__ bias, T* __restrict__ y,
                                                               G g, float alpha, bool vector_a, bool vector_b) {
  using M = Mma<T>;
  constexpr int lda = kTileK + Pad<T>(), ldb = kTileN + Pad<T>(), ldc = kTileN + 4;
  constexpr int kTileBytes = (kTileM * lda + kTileK * ldb) * static_cast<int>(sizeof(T));
  constexpr int kOutBytes = kTileM * ldc * static_cast<int>(sizeof(float));
  // The A and B tiles while multiplying; the float output tile after.
  __shared__ __align__(32) unsigned char smem[kTileBytes > kOutBytes ? kTileBytes : kOutBytes];
  // Per tile row (output pixel): the image's offset in x and the window's top-left
  // corner in the input (-1: past the last pixel).
  __shared__ int64_t row_image[kTileM];
  __shared__ int row_y[kTileM], row_x[kTileM];
  T* a_tile = reinterpret_cast<T*>(smem);
  T* b_tile = a_tile + kTileM * lda;
  float* c_tile = reinterpret_cast<float*>(smem);

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
  __syncthreads();

  typename M::Acc acc[2][2];
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 2; ++j) nvcuda::wmma::fill_fragment(acc[i][j], 0.0f);
  }
  T regs_a[kRegsA], regs_b[kRegsB];
  GatherA(x, g, 0, k_total, row_image, row_y, row_x, vector_a, t, regs_a);
  GatherB(w, g, 0, n0, k_total, vector_b, t, regs_b);
  StoreTiles(regs_a, regs_b, vector_a, vector_b, t, a_tile, lda, b_tile, ldb);
  __syncthreads();

  for (int64_t k0 = 0; k0 < k_total; k0 += kTileK) {
    const bool more = k0 + kTileK < k_total;
    if (more) {  // in flight while the tensor cores work
      GatherA(x, g, k0 + kTileK, k_total, row_image, row_y, row_x, vector_a, t, regs_a);
      GatherB(w, g, k0 + kTileK, n0, k_total, vector_b, t, regs_b);
    }
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
    __syncthreads();  // every warp is done reading the tiles
    if (more) {
      StoreTiles(regs_a, regs_b, vector_a, vector_b, t, a_tile, lda, b_tile, ldb);
      __syncthreads();
    }
  }

  // The tiles' memory becomes the output tile (the loop's last barrier is passed).
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
  constexpr int V = Vec<T>();
  const bool vector_a = g.cin % V == 0 && Aligned(x, 16), vector_b = g.cout % V == 0 && Aligned(w, 16);
  BRIDGE_LAUNCH(grid, kThreads, 0, stream, ImplicitGemmKernel<T, G>)(x, w, bias, y, g, alpha, vector_a, vector_b);
  return CheckLaunch("YoloConvBnLeaky tensor-core kernel");
}

}  // namespace tc
}  // namespace conv
}  // namespace bridge_cuda

#endif  // BRIDGE_OPS_YOLO_CONV_BN_LEAKY_TENSOR_CORES_CUH_
