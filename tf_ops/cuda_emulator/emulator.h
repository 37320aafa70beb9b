// The CUDA execution model on the CPU, for the ops' CUDA cores compiled
// as plain C++ (no GPU, no nvcc): included first in each C++ unit of the harness
// (CMakeLists.txt here), so every kernel, launch and runtime call of the C-ABI
// harness runs here, on host memory.
//
// What it models, and checks as a GPU would refuse or misbehave:
//   - a grid of blocks of threads: blocks one at a time, the threads of a block
//     as fibers on one OS thread, switched at __syncthreads and warp shuffles;
//   - __syncthreads: every thread of the block must reach it (an exited thread
//     or a thread waiting at a shuffle instead is reported as a deadlock);
//   - __shfl_xor_sync with a full mask: all 32 lanes, the same lane mask;
//   - __shared__ arrays (one per kernel instantiation, blocks do not overlap);
//   - warp matrix operations (nvcuda::wmma, in this folder's mma.h);
//   - vector loads and stores aligned to their size (BRIDGE_CHECK_ALIGNED);
//   - launch limits (1024 threads a block, grid sizes), sticky launch errors
//     returned by cudaGetLastError, scratch allocations filled with NaN bytes
//     and fenced by guard bytes checked when freed.
// Warps take turns in a seeded shuffled order, each running as far as it can
// alone (the schedule that exposes a missing barrier). Not modelled: timing,
// concurrency between blocks, the memory model beyond barriers, cp.async and
// inline PTX. cuBLASLt is a stand-in (cublaslt.cc). A block whose threads never
// synchronise is run as plain calls after the first block shows it has no
// barrier (much faster); a barrier met later in such a launch is an error.
#ifndef BRIDGE_TF_OPS_CUDA_EMULATOR_EMULATOR_H_
#define BRIDGE_TF_OPS_CUDA_EMULATOR_EMULATOR_H_

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#define BRIDGE_CUDA_EMULATION 1

// Device-code keywords become plain C++.
#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#undef __forceinline__
#define __global__
#define __device__
#define __host__
#define __shared__ static
#define __forceinline__ inline
#define __launch_bounds__(...)

namespace bridge_emu {

struct ThreadPlace {
  uint3 thread;
  uint3 block;
  dim3 block_dim;
  dim3 grid_dim;
};

// Where the running emulated thread is in its grid.
const ThreadPlace& Here();

void SyncThreads();
// Every lane of the warp passes `count` (<= 32) floats; each gets all of them, as
// out[lane * count + i]. A warp collective, checked as a shuffle is.
void WarpGather(const float* mine, int count, float* out);
// Records what went wrong in the running launch (the first failure is kept).
void Fail(const std::string& what);
bool CheckAligned(const void* p, size_t bytes, const char* file, int line);
float ShflXor(unsigned mask, float value, int lane_mask, int width);

// Runs `body` once per thread of the grid; errors become the sticky launch error.
void Run(const char* kernel, dim3 grid, dim3 block, size_t shared_bytes, const std::function<void()>& body);

// The handle of this library, for cuBLASLt's loader (tf_ops/cuda/cublaslt.cuh):
// the stand-in cuBLASLt lives in the same library.
void* SelfHandle();

template <typename... P>
struct Launcher {
  const char* name;
  void (*kernel)(P...);
  dim3 grid, block;
  size_t shared_bytes;
  template <typename... A>
  void operator()(A&&... args) const {
    // Converted once, as the launch copies a kernel's parameters.
    std::tuple<std::decay_t<P>...> params(std::forward<A>(args)...);
    auto k = kernel;
    Run(name, grid, block, shared_bytes, [&] { std::apply(k, params); });
  }
};

template <typename... P>
Launcher<P...> Launch(const char* name, dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t,
                      void (*kernel)(P...)) {
  return Launcher<P...>{name, kernel, grid, block, shared_bytes};
}

}  // namespace bridge_emu

#define BRIDGE_LAUNCH(grid, block, shared_bytes, stream, ...) \
  ::bridge_emu::Launch(#__VA_ARGS__, grid, block, shared_bytes, stream, __VA_ARGS__)

// Reports and skips the access: the host CPU may fault on it too (aligned SSE moves).
#define BRIDGE_CHECK_ALIGNED(pointer, bytes) \
  if (!::bridge_emu::CheckAligned(pointer, bytes, __FILE__, __LINE__)) return

#define threadIdx (::bridge_emu::Here().thread)
#define blockIdx (::bridge_emu::Here().block)
#define blockDim (::bridge_emu::Here().block_dim)
#define gridDim (::bridge_emu::Here().grid_dim)

inline void __syncthreads() { ::bridge_emu::SyncThreads(); }
inline float __shfl_xor_sync(unsigned mask, float value, int lane_mask, int width = 32) {
  return ::bridge_emu::ShflXor(mask, value, lane_mask, width);
}
#define rsqrtf(v) (1.0f / std::sqrt(static_cast<float>(v)))

#endif  // BRIDGE_TF_OPS_CUDA_EMULATOR_EMULATOR_H_
