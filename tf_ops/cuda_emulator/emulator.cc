// The scheduler behind emulator.h and the CUDA runtime calls the harness makes,
// answered on the CPU. See emulator.h for what is modelled and checked.
#include "emulator.h"

#include <dlfcn.h>
#include <ucontext.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#define BRIDGE_EMU_API extern "C" __attribute__((visibility("default")))

namespace bridge_emu {
namespace {

constexpr size_t kStackBytes = size_t(256) << 10;  // kernels keep whole row slices in locals
constexpr unsigned kWarp = 32;
constexpr unsigned kMaxThreads = 1024;
constexpr int kMaxGather = 32;  // floats per lane in one WarpGather

enum class State { kReady, kAtBlockBarrier, kAtWarpBarrier, kDone };

struct Fiber {
  ucontext_t context;
  std::unique_ptr<char[]> stack;
  State state = State::kReady;
  ThreadPlace place;
  unsigned linear = 0;    // thread index within the block
  unsigned shuffles = 0;  // its parity picks the exchange buffer
  int lane_mask = 0;
};

struct Stats {
  int64_t launches = 0, fiber_blocks = 0, direct_blocks = 0, barriers = 0, shuffles = 0;
};

struct Emulator {
  std::recursive_mutex mu;  // one launch at a time: the fibers share one scheduler
  std::vector<Fiber> fibers;
  ucontext_t scheduler;
  const ThreadPlace* here = nullptr;
  ThreadPlace direct;  // the place of a thread run as a plain call
  Fiber* current = nullptr;
  bool in_fiber = false;
  bool synchronised = false;  // a barrier or shuffle ran in the current block
  const char* kernel = "";
  const std::function<void()>* body = nullptr;
  float exchange[2][kMaxThreads];
  float gather[2][kMaxThreads][kMaxGather];
  std::string launch_error;  // the first error of the running launch
  cudaError_t last = cudaSuccess;
  std::string last_message;
  std::string log;  // every launch error since the last bridge_cuda_emulator_take_errors()
  Stats stats;
  std::map<void*, size_t> allocations;
  uint64_t seed = 0x2545f4914f6cdd1dull;
};

Emulator& E() {
  static Emulator* e = new Emulator;  // never destroyed: fibers may hold frames at exit
  return *e;
}

std::string Coord(const uint3& v) {
  return "(" + std::to_string(v.x) + "," + std::to_string(v.y) + "," + std::to_string(v.z) + ")";
}

// The warp order's generator (xorshift64): seeded, so a failure can be replayed.
uint64_t NextRandom() {
  uint64_t& x = E().seed;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return x;
}

void Trampoline() {
  Emulator& e = E();
  (*e.body)();
  e.current->state = State::kDone;  // then uc_link returns to the scheduler
}

void Yield(State waiting) {
  Emulator& e = E();
  Fiber* f = e.current;
  f->state = waiting;
  swapcontext(&f->context, &e.scheduler);
}

// One block as fibers; false (with launch_error set) on a deadlock.
bool RunBlockAsFibers(const ThreadPlace& place_of_block) {
  Emulator& e = E();
  const dim3 bd = place_of_block.block_dim;
  const unsigned n = bd.x * bd.y * bd.z;
  if (e.fibers.size() < n) e.fibers.resize(n);
  for (unsigned i = 0; i < n; ++i) {
    Fiber& f = e.fibers[i];
    if (!f.stack) f.stack.reset(new char[kStackBytes]);
    getcontext(&f.context);
    f.context.uc_stack.ss_sp = f.stack.get();
    f.context.uc_stack.ss_size = kStackBytes;
    f.context.uc_link = &e.scheduler;
    makecontext(&f.context, Trampoline, 0);
    f.state = State::kReady;
    f.place = place_of_block;
    f.place.thread = make_uint3(i % bd.x, (i / bd.x) % bd.y, i / (bd.x * bd.y));
    f.linear = i;
    f.shuffles = 0;
  }
  e.in_fiber = true;
  const unsigned warps = (n + kWarp - 1) / kWarp;
  std::vector<unsigned> order(warps);
  for (;;) {
    // Each warp in turn (in a shuffled order) runs as far as it can alone: through
    // its shuffles, up to a __syncthreads or its end. One warp racing ahead of the
    // others is a schedule a GPU may pick, and the one that exposes a missing barrier.
    for (unsigned w = 0; w < warps; ++w) order[w] = w;
    for (unsigned w = warps; w > 1; --w) std::swap(order[w - 1], order[NextRandom() % w]);
    bool ran = false;
    for (unsigned w : order) {
      const unsigned first = w * kWarp, end = first + kWarp < n ? first + kWarp : n;
      for (bool again = true; again;) {
        again = false;
        for (unsigned i = first; i < end; ++i) {
          Fiber& f = e.fibers[i];
          if (f.state != State::kReady) continue;
          e.current = &f;
          e.here = &f.place;
          swapcontext(&e.scheduler, &f.context);
          ran = true;
        }
        bool all = true;
        for (unsigned i = first; i < end && all; ++i) all = e.fibers[i].state == State::kAtWarpBarrier;
        if (!all) continue;
        for (unsigned i = first; i < end; ++i) {
          if (e.fibers[i].lane_mask != e.fibers[first].lane_mask) {
            Fail("__shfl_xor_sync in warp " + std::to_string(w) + " of block " + Coord(place_of_block.block) +
                 " with different lane masks (" + std::to_string(e.fibers[first].lane_mask) + " and " +
                 std::to_string(e.fibers[i].lane_mask) + ")");
          }
          e.fibers[i].state = State::kReady;
        }
        again = true;
      }
    }
    if (ran) continue;
    unsigned done = 0, at_block = 0, at_warp = 0;
    for (unsigned i = 0; i < n; ++i) {
      const State s = e.fibers[i].state;
      done += s == State::kDone;
      at_block += s == State::kAtBlockBarrier;
      at_warp += s == State::kAtWarpBarrier;
    }
    if (done == n) break;
    if (at_block == n) {
      for (unsigned i = 0; i < n; ++i) e.fibers[i].state = State::kReady;
      continue;
    }
    std::string why = "block " + Coord(place_of_block.block) + " of " + std::to_string(n) +
                      " threads cannot go on: " + std::to_string(at_block) + " wait at __syncthreads, " +
                      std::to_string(at_warp) + " at a warp shuffle, " + std::to_string(done) + " have exited";
    for (unsigned w = 0; w < warps; ++w) {
      const unsigned first = w * kWarp, end = first + kWarp < n ? first + kWarp : n;
      unsigned shuffling = 0;
      for (unsigned i = first; i < end; ++i) shuffling += e.fibers[i].state == State::kAtWarpBarrier;
      if (shuffling && shuffling != end - first) {
        why += "; warp " + std::to_string(w) + ": " + std::to_string(shuffling) + " of " +
               std::to_string(end - first) + " lanes at a shuffle";
      }
    }
    Fail(why);
    e.in_fiber = false;
    return false;
  }
  e.in_fiber = false;
  return true;
}

void SetLaunchError(cudaError_t code, const std::string& message) {
  Emulator& e = E();
  e.last = code;
  e.last_message = message;
  e.log += message + "\n";
}

}  // namespace

void Fail(const std::string& what) {
  Emulator& e = E();
  if (!e.launch_error.empty()) return;
  e.launch_error = std::string(e.kernel) + ": " + what;
}

const ThreadPlace& Here() { return *E().here; }

// Notes a synchronising call; false (and a failure) when the block runs as plain calls.
static bool CanSynchronise(const char* what) {
  Emulator& e = E();
  e.synchronised = true;
  if (e.in_fiber) return true;
  Fail(std::string(what) + " in block " + Coord(e.here->block) +
       " of a kernel whose first block never synchronised (run without fibers)");
  return false;
}

void SyncThreads() {
  ++E().stats.barriers;
  if (CanSynchronise("__syncthreads")) Yield(State::kAtBlockBarrier);
}

void WarpGather(const float* mine, int count, float* out) {
  Emulator& e = E();
  ++e.stats.shuffles;
  if (!CanSynchronise("a warp matrix operation")) return;
  const dim3 bd = e.here->block_dim;
  if ((bd.x * bd.y * bd.z) % kWarp != 0) Fail("a warp matrix operation in a block with a partial warp");
  if (count < 0 || count > kMaxGather) {
    Fail("WarpGather of " + std::to_string(count) + " values (at most " + std::to_string(kMaxGather) + ")");
    return;
  }
  Fiber* f = e.current;
  const unsigned buffer = f->shuffles++ & 1u;
  std::memcpy(e.gather[buffer][f->linear], mine, sizeof(float) * count);
  f->lane_mask = -count;  // lanes that disagree on the count are reported like different lane masks
  Yield(State::kAtWarpBarrier);
  const unsigned base = f->linear - f->linear % kWarp;
  for (unsigned lane = 0; lane < kWarp; ++lane) {
    std::memcpy(out + lane * count, e.gather[buffer][base + lane], sizeof(float) * count);
  }
}

bool CheckAligned(const void* p, size_t bytes, const char* file, int line) {
  const size_t off = reinterpret_cast<uintptr_t>(p) % bytes;
  if (off == 0) return true;
  const char* base = std::strrchr(file, '/');
  Fail("misaligned " + std::to_string(bytes) + "-byte access at " + (base ? base + 1 : file) + ":" +
       std::to_string(line) + " (address % " + std::to_string(bytes) + " = " + std::to_string(off) + ") in block " +
       Coord(E().here->block) + ", thread " + Coord(E().here->thread));
  return false;
}

float ShflXor(unsigned mask, float value, int lane_mask, int width) {
  Emulator& e = E();
  ++e.stats.shuffles;
  if (!CanSynchronise("__shfl_xor_sync")) return value;
  if (mask != 0xffffffffu || width != static_cast<int>(kWarp)) {
    Fail("__shfl_xor_sync with mask " + std::to_string(mask) + " and width " + std::to_string(width) +
         " (only the full warp is emulated)");
  }
  Fiber* f = e.current;
  const unsigned buffer = f->shuffles++ & 1u;
  e.exchange[buffer][f->linear] = value;
  f->lane_mask = lane_mask;
  Yield(State::kAtWarpBarrier);
  const dim3 bd = e.here->block_dim;
  const unsigned n = bd.x * bd.y * bd.z;
  const unsigned lane = f->linear % kWarp, base = f->linear - lane;
  const unsigned source = base + (lane ^ static_cast<unsigned>(lane_mask));
  // A source lane past the warp's width, or past a partial last warp, returns the caller's own value.
  if ((lane ^ static_cast<unsigned>(lane_mask)) >= kWarp || source >= n) return value;
  return e.exchange[buffer][source];
}

void Run(const char* kernel, dim3 grid, dim3 block, size_t shared_bytes, const std::function<void()>& body) {
  Emulator& e = E();
  std::lock_guard<std::recursive_mutex> lock(e.mu);
  ++e.stats.launches;
  const uint64_t threads = uint64_t(block.x) * block.y * block.z;
  if (threads == 0 || threads > kMaxThreads || block.x > 1024 || block.y > 1024 || block.z > 64 || grid.x == 0 ||
      grid.y == 0 || grid.z == 0 || grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535 ||
      shared_bytes > 48 * 1024) {
    SetLaunchError(cudaErrorInvalidConfiguration,
                   "invalid launch configuration: " + std::string(kernel) + " <<<" +
                       Coord(make_uint3(grid.x, grid.y, grid.z)) + ", " + Coord(make_uint3(block.x, block.y, block.z)) +
                       ", " + std::to_string(shared_bytes) + ">>>");
    return;
  }
  e.kernel = kernel;
  e.body = &body;
  e.launch_error.clear();
  bool fibers = true;
  for (unsigned bz = 0; bz < grid.z && e.launch_error.empty(); ++bz) {
    for (unsigned by = 0; by < grid.y && e.launch_error.empty(); ++by) {
      for (unsigned bx = 0; bx < grid.x && e.launch_error.empty(); ++bx) {
        ThreadPlace place{make_uint3(0, 0, 0), make_uint3(bx, by, bz), block, grid};
        if (fibers) {
          e.synchronised = false;
          ++e.stats.fiber_blocks;
          if (!RunBlockAsFibers(place)) break;
          fibers = e.synchronised;  // a block without barriers: the rest as plain calls
          continue;
        }
        ++e.stats.direct_blocks;
        e.direct = place;
        e.here = &e.direct;
        for (unsigned i = 0; i < threads && e.launch_error.empty(); ++i) {
          e.direct.thread = make_uint3(i % block.x, (i / block.x) % block.y, i / (block.x * block.y));
          body();
        }
      }
    }
  }
  e.here = nullptr;
  if (!e.launch_error.empty()) SetLaunchError(cudaErrorLaunchFailure, "kernel failed: " + e.launch_error);
}

void* SelfHandle() {
  Dl_info info;
  if (!dladdr(reinterpret_cast<void*>(&SelfHandle), &info) || !info.dli_fname) return nullptr;
  return dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
}

}  // namespace bridge_emu

// -- the CUDA runtime, as far as the harness uses it ---------------------------------

using bridge_emu::E;

extern "C" {

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    default: return "cudaErrorUnknown";
  }
}

const char* cudaGetErrorString(cudaError_t error) {
  auto& e = E();
  if (error != cudaSuccess && error == e.last && !e.last_message.empty()) return e.last_message.c_str();
  return cudaGetErrorName(error);
}

cudaError_t cudaGetLastError(void) {
  auto& e = E();
  const cudaError_t code = e.last;
  e.last = cudaSuccess;  // the message stays for cudaGetErrorString
  return code;
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes* attributes, const void* ptr) {
  // Every pointer is device memory here: the emulated device is the host.
  std::memset(attributes, 0, sizeof(*attributes));
  attributes->type = cudaMemoryTypeDevice;
  attributes->device = 0;
  attributes->devicePointer = const_cast<void*>(ptr);
  attributes->hostPointer = const_cast<void*>(ptr);
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : cudaErrorInvalidDevice; }

cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, enum cudaDeviceAttr attr, int device) {
  if (device != 0) return cudaErrorInvalidDevice;
  *value = attr == cudaDevAttrMemoryPoolsSupported ? 1 : 0;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device) {
  if (device != 0) return cudaErrorInvalidDevice;
  static int the_pool;
  *pool = reinterpret_cast<cudaMemPool_t>(&the_pool);
  return cudaSuccess;
}

cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t, enum cudaMemPoolAttr, void*) { return cudaSuccess; }

namespace {
constexpr size_t kGuardBytes = 256;
constexpr unsigned char kGuard = 0xa5;
}  // namespace

cudaError_t cudaMalloc(void** ptr, size_t size) {
  auto& e = E();
  std::lock_guard<std::recursive_mutex> lock(e.mu);
  // 256-byte aligned as the driver's, and NaN bytes: a kernel that reads scratch
  // it never wrote sees NaN, not a convenient zero. Guard bytes after the end
  // show a write past it when the memory is freed.
  const size_t padded = (size + 255) / 256 * 256;
  auto* p = static_cast<unsigned char*>(std::aligned_alloc(256, padded + kGuardBytes));
  if (!p) return cudaErrorMemoryAllocation;
  std::memset(p, 0xff, size);
  std::memset(p + size, kGuard, padded + kGuardBytes - size);
  e.allocations[p] = size;
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  if (!ptr) return cudaSuccess;
  auto& e = E();
  std::lock_guard<std::recursive_mutex> lock(e.mu);
  auto it = e.allocations.find(ptr);
  if (it == e.allocations.end()) return cudaErrorInvalidValue;
  const size_t size = it->second, padded = (size + 255) / 256 * 256;
  const auto* p = static_cast<const unsigned char*>(ptr);
  for (size_t i = size; i < padded + kGuardBytes; ++i) {
    if (p[i] != kGuard) {
      e.log += "a kernel wrote past the end of a " + std::to_string(size) + "-byte scratch allocation (byte " +
               std::to_string(i) + ")\n";
      break;
    }
  }
  e.allocations.erase(it);
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMallocAsync(void** ptr, size_t size, cudaStream_t) { return cudaMalloc(ptr, size); }
cudaError_t cudaFreeAsync(void* ptr, cudaStream_t) { return cudaFree(ptr); }
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }

cudaError_t cudaMemsetAsync(void* ptr, int value, size_t count, cudaStream_t) {
  std::memset(ptr, value, count);
  return cudaSuccess;
}

// -- for the tests ------------------------------------------------------------------

// Seeds the order in which warps take turns (any non-zero value).
BRIDGE_EMU_API void bridge_cuda_emulator_seed(uint64_t seed) {
  auto& e = E();
  std::lock_guard<std::recursive_mutex> lock(e.mu);
  e.seed = seed ? seed : 1;
}

// The launch errors since the last call ("" when none), then forgets them.
BRIDGE_EMU_API const char* bridge_cuda_emulator_take_errors(void) {
  static thread_local std::string taken;
  auto& e = E();
  std::lock_guard<std::recursive_mutex> lock(e.mu);
  taken.swap(e.log);
  e.log.clear();
  return taken.c_str();
}

// Counters since the last reset: launches, blocks run as fibers, blocks run as plain
// calls, __syncthreads, shuffles, scratch allocations still live.
BRIDGE_EMU_API void bridge_cuda_emulator_stats(int64_t* out, int reset) {
  auto& e = E();
  std::lock_guard<std::recursive_mutex> lock(e.mu);
  const auto& s = e.stats;
  out[0] = s.launches;
  out[1] = s.fiber_blocks;
  out[2] = s.direct_blocks;
  out[3] = s.barriers;
  out[4] = s.shuffles;
  out[5] = static_cast<int64_t>(e.allocations.size());
  if (reset) e.stats = bridge_emu::Stats{};
}

}  // extern "C"
