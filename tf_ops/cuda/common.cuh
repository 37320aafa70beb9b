// Device helpers shared by the CUDA kernels of every op folder (bridge/ops/<op>/kernel.cuh)
// and every host (their TensorFlow GPU kernels, tf_gpu.cu.cc, and the C-ABI harness).
//
//   bridge_cuda::Status                  an error message, empty when all went well
//   Check(cudaError_t, what)             a CUDA error as a Status naming what failed
//   ToF / FromF<T>                       float <-> T (float or __half) on the device
//   Pack<T, V>, LoadF<T, V>, StoreF<T, V>, LoadVec<T, V>, StoreVec<T, V>
//                                        V values of T as one aligned load/store
//                                        (16 bytes when V * sizeof(T) == 16), as
//                                        floats or as they are
//   GroupSum(v, group, scratch)          sum over a warp (group == 32) or the block
//   Carve                                slices of one workspace, 256-byte aligned
//   LaunchBlocks(n, per_block)           a grid size capped for grid-stride loops
//   BRIDGE_LAUNCH(grid, block, shared, stream, kernel)(args...)
//                                        kernel<<<grid, block, shared, stream>>>(args...),
//                                        spelled so the CPU emulator
//                                        (tf_ops/cuda_emulator) runs the same line
//
// Header-only and included by several translation units of one library, so every
// kernel here is a template or static.
#ifndef BRIDGE_TF_OPS_CUDA_COMMON_CUH_
#define BRIDGE_TF_OPS_CUDA_COMMON_CUH_

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#ifndef BRIDGE_LAUNCH  // the emulator defines its own
#define BRIDGE_LAUNCH(grid, block, shared_bytes, stream, ...) __VA_ARGS__<<<grid, block, shared_bytes, stream>>>
#endif
// A GPU faults on a misaligned vector access; the emulator checks it (and leaves
// the function when it fails); on a GPU it is nothing.
#ifndef BRIDGE_CHECK_ALIGNED
#define BRIDGE_CHECK_ALIGNED(pointer, bytes)
#endif

namespace bridge_cuda {

struct Status {
  std::string message;
  bool ok() const { return message.empty(); }
};

inline Status Ok() { return Status{}; }
inline Status Error(std::string message) { return Status{std::move(message)}; }

inline Status Check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Ok();
  return Error(std::string(what) + ": CUDA error " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

// A kernel launch reports a bad configuration only through the next error query.
inline Status CheckLaunch(const char* kernel) { return Check(cudaGetLastError(), kernel); }

// -- float <-> T ------------------------------------------------------------

__device__ __forceinline__ float ToF(float v) { return v; }
__device__ __forceinline__ float ToF(__half v) { return __half2float(v); }

template <typename T>
__device__ __forceinline__ T FromF(float v);
template <>
__device__ __forceinline__ float FromF<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half FromF<__half>(float v) { return __float2half_rn(v); }

// -- vector loads -----------------------------------------------------------

template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

template <typename T, int V>
__device__ __forceinline__ void LoadF(const T* p, float* out) {
  BRIDGE_CHECK_ALIGNED(p, sizeof(Pack<T, V>));
  const Pack<T, V> pk = *reinterpret_cast<const Pack<T, V>*>(p);
#pragma unroll
  for (int i = 0; i < V; ++i) out[i] = ToF(pk.v[i]);
}

template <typename T, int V>
__device__ __forceinline__ void StoreF(T* p, const float* in) {
  BRIDGE_CHECK_ALIGNED(p, sizeof(Pack<T, V>));
  Pack<T, V> pk;
#pragma unroll
  for (int i = 0; i < V; ++i) pk.v[i] = FromF<T>(in[i]);
  *reinterpret_cast<Pack<T, V>*>(p) = pk;
}

// V values of T copied as one aligned load or store, no conversion.
template <typename T, int V>
__device__ __forceinline__ void LoadVec(const T* p, T* out) {
  BRIDGE_CHECK_ALIGNED(p, sizeof(Pack<T, V>));
  const Pack<T, V> pk = *reinterpret_cast<const Pack<T, V>*>(p);
#pragma unroll
  for (int i = 0; i < V; ++i) out[i] = pk.v[i];
}

template <typename T, int V>
__device__ __forceinline__ void StoreVec(T* p, const T* in) {
  BRIDGE_CHECK_ALIGNED(p, sizeof(Pack<T, V>));
  Pack<T, V> pk;
#pragma unroll
  for (int i = 0; i < V; ++i) pk.v[i] = in[i];
  *reinterpret_cast<Pack<T, V>*>(p) = pk;
}

inline bool Aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// -- reductions -------------------------------------------------------------

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// The sum of `v` over the thread's row group: its warp when group == 32, else the
// whole block (blockDim.x == group, a multiple of 32). Every thread gets the sum.
// `scratch` is __shared__ float[32]; the leading barrier lets a caller reduce
// twice in a row without the second overwriting what the first still reads.
__device__ __forceinline__ float GroupSum(float v, int group, float* scratch) {
  v = WarpSum(v);
  if (group == 32) return v;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  return WarpSum(lane < warps ? scratch[lane] : 0.0f);
}

// -- launch and workspace ---------------------------------------------------

// Blocks for `n` work items at `per_block` each; kernels loop grid-stride, so a cap
// only costs iterations, never coverage.
inline unsigned LaunchBlocks(int64_t n, int64_t per_block, int64_t cap = int64_t(1) << 20) {
  int64_t blocks = (n + per_block - 1) / per_block;
  if (blocks < 1) blocks = 1;
  return static_cast<unsigned>(blocks < cap ? blocks : cap);
}

// Hands out 256-byte aligned slices of one workspace. Run once with base ==
// nullptr to size it (`used`), then again on the real allocation.
struct Carve {
  char* base;
  size_t used = 0;
  explicit Carve(void* b) : base(static_cast<char*>(b)) {}
  template <typename T>
  T* take(size_t count) {
    used = (used + 255) / 256 * 256;
    T* p = base ? reinterpret_cast<T*>(base + used) : nullptr;
    used += count * sizeof(T);
    return p;
  }
};

}  // namespace bridge_cuda

#endif  // BRIDGE_TF_OPS_CUDA_COMMON_CUH_
