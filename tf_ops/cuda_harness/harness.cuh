// What every op's entry points in this folder share (harness.cu defines it):
// the per-thread error message, running on the device of a pointer, and
// stream-ordered scratch memory. Each op's entry points are its op folder's
// cuda_harness.cu, next to its Python companion cuda_harness.py (bridge/cuda.py).
//
// Every entry point returns 0 on success, else non-zero with the reason in
// bridge_cuda_last_error() (per thread). Pointers are device memory, contiguous,
// row-major; `stream` is a cudaStream_t (null: the legacy default stream). Work is
// queued on that stream and not waited for. Shapes are trusted: callers check
// them against the op's spec first.
#ifndef BRIDGE_TF_OPS_CUDA_HARNESS_HARNESS_CUH_
#define BRIDGE_TF_OPS_CUDA_HARNESS_HARNESS_CUH_

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "common.cuh"

#define BRIDGE_API extern "C" __attribute__((visibility("default")))

namespace bridge_harness {

using bridge_cuda::Status;

// 0 for ok, else 1 with the message kept for bridge_cuda_last_error().
int Report(const Status& s);

// Runs on the device that holds `p`, as the framework that allocated it meant.
Status UseDeviceOf(const void* p);

inline cudaStream_t AsStream(void* stream) { return static_cast<cudaStream_t>(stream); }

// Scratch memory for one call, from the device's default stream-ordered pool
// (cudaMallocAsync; cudaMalloc where the device has no pools), freed in stream
// order when the call's work is queued.
class Scratch {
 public:
  Scratch(size_t bytes, cudaStream_t stream);
  ~Scratch();
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  void* get() const { return p_; }
  const Status& status() const { return status_; }

 private:
  void* p_ = nullptr;
  cudaStream_t stream_;
  bool async_ = false;
  Status status_;
};

}  // namespace bridge_harness

#endif  // BRIDGE_TF_OPS_CUDA_HARNESS_HARNESS_CUH_
