// nvcuda::wmma for the CPU emulator (emulator.h), found before the toolkit's
// mma.h: the warp matrix operations the kernels use, on 16x16 tiles of float16
// (16x16x16) and TF32 (16x16x8) with float accumulators.
//
// A fragment's elements are spread over the warp's 32 lanes in an order the
// program cannot see (as on a GPU): lane l holds elements l, l+32, ... of the
// tile in row-major order. Loads and stores are each lane's own; mma_sync is a
// warp collective (every lane of the warp must call it: checked as a shuffle is).
// Checked as the hardware requires: pointers 32-byte aligned, ldm a multiple of
// 16 bytes. TF32 operands are truncated to TF32 in mma_sync, as the tensor cores
// read them (what __float_to_tf32 rounded stays as it is).
#ifndef BRIDGE_TF_OPS_CUDA_EMULATOR_MMA_H_
#define BRIDGE_TF_OPS_CUDA_EMULATOR_MMA_H_

#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "emulator.h"

namespace nvcuda {
namespace wmma {

struct row_major;
struct col_major;
struct matrix_a;
struct matrix_b;
struct accumulator;
namespace precision {
struct tf32;
}

enum layout_t { mem_row_major, mem_col_major };

inline float __float_to_tf32(float v) {  // round to nearest, ties away (cvt.rna)
  uint32_t u;
  std::memcpy(&u, &v, 4);
  if ((u & 0x7f800000u) != 0x7f800000u) {
    u += 0x1000u;
    u &= ~0x1fffu;
  }
  std::memcpy(&v, &u, 4);
  return v;
}

namespace detail {

template <typename T>
struct Storage {
  using type = T;
};
template <>
struct Storage<precision::tf32> {
  using type = float;
};

// Rows and columns of the tile a fragment holds.
template <typename Use, int M, int N, int K>
struct Dims;
template <int M, int N, int K>
struct Dims<matrix_a, M, N, K> {
  static constexpr int rows = M, cols = K;
};
template <int M, int N, int K>
struct Dims<matrix_b, M, N, K> {
  static constexpr int rows = K, cols = N;
};
template <int M, int N, int K>
struct Dims<accumulator, M, N, K> {
  static constexpr int rows = M, cols = N;
};

inline float ToFloat(float v) { return v; }
inline float ToFloat(__half v) { return __half2float(v); }
template <typename S>
S FromFloat(float v);
template <>
inline float FromFloat<float>(float v) { return v; }
template <>
inline __half FromFloat<__half>(float v) { return __float2half_rn(v); }

inline float TruncateTf32(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  u &= ~0x1fffu;
  std::memcpy(&v, &u, 4);
  return v;
}

inline unsigned Lane() {
  const auto& h = ::bridge_emu::Here();
  const unsigned linear = h.thread.x + h.thread.y * h.block_dim.x + h.thread.z * h.block_dim.x * h.block_dim.y;
  return linear % 32;
}

inline void CheckPointer(const void* p, unsigned ldm, size_t element_bytes, const char* what) {
  if (reinterpret_cast<uintptr_t>(p) % 32 != 0) {
    ::bridge_emu::Fail(std::string(what) + ": pointer not 32-byte aligned (address % 32 = " +
                       std::to_string(reinterpret_cast<uintptr_t>(p) % 32) + ")");
  }
  if ((ldm * element_bytes) % 16 != 0) {
    ::bridge_emu::Fail(std::string(what) + ": ldm " + std::to_string(ldm) + " is not a multiple of 16 bytes");
  }
}

}  // namespace detail

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
  using storage = typename detail::Storage<T>::type;
  static constexpr int rows = detail::Dims<Use, M, N, K>::rows, cols = detail::Dims<Use, M, N, K>::cols;
  static constexpr int num_elements = rows * cols / 32;
  storage x[num_elements];
};

template <typename Use, int M, int N, int K, typename T, typename L>
void fill_fragment(fragment<Use, M, N, K, T, L>& f, typename fragment<Use, M, N, K, T, L>::storage v) {
  for (auto& e : f.x) e = v;
}

// The tile index of element e of this lane, and its (row, col).
template <typename F>
void Place(int e, int* r, int* c) {
  const int idx = e * 32 + static_cast<int>(detail::Lane());
  *r = idx / F::cols;
  *c = idx % F::cols;
}

// A warp-wide memory operation (every lane must be here: checked as a shuffle
// is): fn(element, offset in memory) for each of this lane's elements.
template <typename F, typename P, typename Fn>
void ForEachInMemory(const P* p, unsigned ldm, bool row_major_memory, const char* what, Fn fn) {
  detail::CheckPointer(p, ldm, sizeof(P), what);
  ::bridge_emu::ShflXor(0xffffffffu, 0.0f, 0, 32);
  for (int e = 0; e < F::num_elements; ++e) {
    int r, c;
    Place<F>(e, &r, &c);
    fn(e, row_major_memory ? r * ldm + c : c * ldm + r);
  }
}

template <typename Use, int M, int N, int K, typename T, typename L, typename P>
void load_matrix_sync(fragment<Use, M, N, K, T, L>& f, const P* p, unsigned ldm) {
  using F = fragment<Use, M, N, K, T, L>;
  static_assert(!std::is_same<Use, accumulator>::value, "an accumulator load takes a layout");
  ForEachInMemory<F>(p, ldm, std::is_same<L, row_major>::value, "wmma::load_matrix_sync",
                     [&](int e, unsigned at) { f.x[e] = p[at]; });
}

template <int M, int N, int K, typename T, typename P>
void load_matrix_sync(fragment<accumulator, M, N, K, T>& f, const P* p, unsigned ldm, layout_t layout) {
  using F = fragment<accumulator, M, N, K, T>;
  ForEachInMemory<F>(p, ldm, layout == mem_row_major, "wmma::load_matrix_sync",
                     [&](int e, unsigned at) { f.x[e] = detail::ToFloat(p[at]); });
}

template <int M, int N, int K, typename T, typename P>
void store_matrix_sync(P* p, const fragment<accumulator, M, N, K, T>& f, unsigned ldm, layout_t layout) {
  using F = fragment<accumulator, M, N, K, T>;
  ForEachInMemory<F>(p, ldm, layout == mem_row_major, "wmma::store_matrix_sync",
                     [&](int e, unsigned at) { p[at] = detail::FromFloat<P>(f.x[e]); });
}

// d = a * b + c over the warp: every lane's elements of a, b and c are gathered,
// then each lane computes its own elements of d (float accumulation).
template <int M, int N, int K, typename TA, typename LA, typename TB, typename LB>
void mma_sync(fragment<accumulator, M, N, K, float>& d, const fragment<matrix_a, M, N, K, TA, LA>& a,
              const fragment<matrix_b, M, N, K, TB, LB>& b, const fragment<accumulator, M, N, K, float>& c) {
  using FA = fragment<matrix_a, M, N, K, TA, LA>;
  using FB = fragment<matrix_b, M, N, K, TB, LB>;
  using FC = fragment<accumulator, M, N, K, float>;
  constexpr int na = FA::num_elements, nb = FB::num_elements, nc = FC::num_elements, total = na + nb + nc;
  constexpr bool tf32 = std::is_same<TA, precision::tf32>::value;
  float mine[total];
  for (int e = 0; e < na; ++e) mine[e] = detail::ToFloat(a.x[e]);
  for (int e = 0; e < nb; ++e) mine[na + e] = detail::ToFloat(b.x[e]);
  for (int e = 0; e < nc; ++e) mine[na + nb + e] = c.x[e];
  float all[32 * total];
  ::bridge_emu::WarpGather(mine, total, all);
  float A[M * K], B[K * N], C[M * N];
  for (int lane = 0; lane < 32; ++lane) {
    for (int e = 0; e < na; ++e) A[e * 32 + lane] = all[lane * total + e];
    for (int e = 0; e < nb; ++e) B[e * 32 + lane] = all[lane * total + na + e];
    for (int e = 0; e < nc; ++e) C[e * 32 + lane] = all[lane * total + na + nb + e];
  }
  if (tf32) {
    for (float& v : A) v = detail::TruncateTf32(v);
    for (float& v : B) v = detail::TruncateTf32(v);
  }
  for (int e = 0; e < nc; ++e) {
    int r, col;
    Place<FC>(e, &r, &col);
    float s = C[r * N + col];
    for (int k = 0; k < K; ++k) s += A[r * K + k] * B[k * N + col];
    d.x[e] = s;
  }
}

}  // namespace wmma
}  // namespace nvcuda

#endif  // BRIDGE_TF_OPS_CUDA_EMULATOR_MMA_H_
