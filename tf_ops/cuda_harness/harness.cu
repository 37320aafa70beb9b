// The ops' CUDA kernels behind a C ABI, for any framework's device pointers
// (bridge/cuda.py drives it with PyTorch or CuPy through ctypes): what the
// entry points share (harness.cuh), and the ABI's own two. Each op's entry points
// are its op folder's cuda_harness.cu (bridge/ops/<op module>/), found by
// bridge.native.cuda_cores() and handed to CMake.
//
// Scratch memory comes from the device's default stream-ordered pool
// (cudaMallocAsync), which this library tells to keep freed memory for reuse;
// devices without pools use cudaMalloc.
#include "harness.cuh"

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace {

thread_local std::string last_error;

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

}  // namespace

namespace bridge_harness {

int Report(const Status& s) {
  if (s.ok()) return 0;
  last_error = s.message;
  return 1;
}

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

Scratch::Scratch(size_t bytes, cudaStream_t stream) : stream_(stream) {
  if (bytes == 0) return;
  async_ = PoolsSupported();
  status_ = async_ ? bridge_cuda::Check(cudaMallocAsync(&p_, bytes, stream), "cudaMallocAsync (scratch)")
                   : bridge_cuda::Check(cudaMalloc(&p_, bytes), "cudaMalloc (scratch)");
  if (!status_.ok()) p_ = nullptr;
}

Scratch::~Scratch() {
  if (!p_) return;
  if (async_) {
    cudaFreeAsync(p_, stream_);
  } else {
    cudaStreamSynchronize(stream_);  // the kernels may still read it
    cudaFree(p_);
  }
}

}  // namespace bridge_harness

// Bumped whenever an entry point's signature changes; bridge/cuda.py checks it.
BRIDGE_API int bridge_cuda_abi_version(void) { return 1; }

BRIDGE_API const char* bridge_cuda_last_error(void) { return last_error.c_str(); }
