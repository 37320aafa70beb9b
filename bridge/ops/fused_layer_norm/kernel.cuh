// FusedLayerNorm on CUDA (contract: shared/ops.md), shared by the TensorFlow GPU
// kernel (tf_gpu.cu.cc here) and the C-ABI harness (cuda_harness.cu).
//
// Forward: one row per warp (H up to 256 vectors) or per block (up to 2048
// vectors: H <= 8192 in float32, 16384 in float16), the row held in registers so memory is read once: mean, then the sum
// of squared deviations from that mean (two passes over registers, so a large
// mean cannot cancel the variance away), then y. A "vector" is 16 bytes (4 floats,
// 8 halves) when every pointer is 16-byte aligned and H is a multiple of it,
// else one element. Longer rows take a block-per-row kernel that re-reads x.
// Everything accumulates in float32.
//
// Backward: dx per row (mean and rstd recomputed, saved for the next step), then
// dgamma/dbeta as per-slice column sums into a workspace and a second kernel that
// adds the slices in a fixed order, so the result is the same on every run.
#ifndef BRIDGE_OPS_FUSED_LAYER_NORM_KERNEL_CUH_
#define BRIDGE_OPS_FUSED_LAYER_NORM_KERNEL_CUH_

#include <initializer_list>
#include <string>
#include <type_traits>

#include "common.cuh"

namespace bridge_cuda {
namespace layer_norm {

constexpr int kMaxVecs = 8;     // vectors per thread kept in registers
// Threads per row in block mode. More would cap each thread's registers (64K per
// SM / threads) below what a row of kMaxVecs vectors needs, and it would spill.
constexpr int kMaxGroup = 256;
constexpr int kRowsPerWarpBlock = 4;
constexpr int kRereadThreads = 512;
constexpr int kParamThreadsY = 8;  // row lanes of the dgamma/dbeta partial kernel
constexpr int kMaxSlices = 256;

// How one call is laid out on the device.
struct Plan {
  int vec = 1;         // elements per load: 16 bytes worth, or 1
  int group = 32;      // threads per row
  int vecs = 1;        // loads per thread, 1..kMaxVecs; 0: the re-reading kernel
  int block = 128;
  unsigned grid = 1;
};

template <typename T>
Plan MakePlan(std::initializer_list<const void*> pointers, int64_t rows, int64_t h) {
  Plan p;
  const int wide = 16 / static_cast<int>(sizeof(T));
  bool aligned = h % wide == 0;
  for (const void* q : pointers) aligned = aligned && Aligned(q, 16);
  p.vec = aligned ? wide : 1;
  const int64_t units = h / p.vec;
  if (units <= 32 * kMaxVecs) {
    p.group = 32;
    p.vecs = static_cast<int>((units + 31) / 32);
    p.block = 32 * kRowsPerWarpBlock;
    p.grid = LaunchBlocks(rows, kRowsPerWarpBlock);
    return p;
  }
  // About four loads per thread: enough in flight per thread, enough threads per row.
  int64_t group = ((units + 3) / 4 + 31) / 32 * 32;
  if (group > kMaxGroup) group = kMaxGroup;
  const int64_t vecs = (units + group - 1) / group;
  p.grid = LaunchBlocks(rows, 1);
  if (vecs > kMaxVecs) {
    p.vecs = 0;
    p.group = p.block = kRereadThreads;
    return p;
  }
  p.group = p.block = static_cast<int>(group);
  p.vecs = static_cast<int>(vecs);
  return p;
}

template <typename F>
void DispatchVecs(int vecs, F&& f) {
  switch (vecs) {
    case 1: f(std::integral_constant<int, 1>{}); break;
    case 2: f(std::integral_constant<int, 2>{}); break;
    case 3: f(std::integral_constant<int, 3>{}); break;
    case 4: f(std::integral_constant<int, 4>{}); break;
    case 5: f(std::integral_constant<int, 5>{}); break;
    case 6: f(std::integral_constant<int, 6>{}); break;
    case 7: f(std::integral_constant<int, 7>{}); break;
    default: f(std::integral_constant<int, 8>{}); break;
  }
}

// Loads this thread's share of a row (vector u = t + j*group) into registers,
// less `shift`, and returns its sum; lanes past the row's end hold 0.
template <typename T, int V, int kVecs>
__device__ __forceinline__ float LoadRow(const T* row, int64_t units, int t, int group, float shift, float* v) {
  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < kVecs; ++j) {
    const int64_t u = t + static_cast<int64_t>(j) * group;
#pragma unroll
    for (int i = 0; i < V; ++i) v[j * V + i] = 0.0f;
    if (u < units) {
      LoadF<T, V>(row + u * V, v + j * V);
#pragma unroll
      for (int i = 0; i < V; ++i) {
        v[j * V + i] -= shift;
        sum += v[j * V + i];
      }
    }
  }
  return sum;
}

template <int V, int kVecs>
__device__ __forceinline__ float SquaredDeviations(const float* v, float mean, int64_t units, int t, int group) {
  float sq = 0.0f;
#pragma unroll
  for (int j = 0; j < kVecs; ++j) {
    if (t + static_cast<int64_t>(j) * group < units) {
#pragma unroll
      for (int i = 0; i < V; ++i) {
        const float d = v[j * V + i] - mean;
        sq += d * d;
      }
    }
  }
  return sq;
}

// The value every row is shifted by before it is summed: its first element. A
// float32 mean of 3e4 + N(0,1) is itself rounded by ~2e-3, which x - mean would
// carry into every output; the shifted row's mean is small and exact enough.
template <typename T>
__device__ __forceinline__ float RowShift(const T* row, int64_t h) {
  return h > 0 ? ToF(row[0]) : 0.0f;
}

// Loads this thread's share of a row, shifted by RowShift, into registers (`v`)
// and gives the shifted row's mean and 1/sqrt(var + eps) to every thread of its group.
template <typename T, int V, int kVecs>
__device__ __forceinline__ void RowMoments(const T* row, int64_t units, int t, int group, float inv_h, float eps,
                                           float* v, float* scratch, float* mean, float* rstd) {
  const float shift = RowShift(row, units * V);
  *mean = GroupSum(LoadRow<T, V, kVecs>(row, units, t, group, shift, v), group, scratch) * inv_h;
  const float var = GroupSum(SquaredDeviations<V, kVecs>(v, *mean, units, t, group), group, scratch) * inv_h;
  *rstd = rsqrtf(var + eps);
}

template <typename T, int V, int kVecs>
__global__ void __launch_bounds__(kMaxGroup) ForwardKernel(const T* __restrict__ x, const T* __restrict__ gamma,
                                                      const T* __restrict__ beta, T* __restrict__ y, int64_t rows,
                                                      int64_t h, float eps, int group) {
  __shared__ float scratch[32];
  const int t = threadIdx.x % group;
  const int per_block = blockDim.x / group;
  const int64_t units = h / V;
  const float inv_h = 1.0f / static_cast<float>(h);
  // The loop bound is uniform over each row group (a warp, or the whole block
  // when GroupSum synchronises), so no thread leaves a reduction early.
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * per_block + threadIdx.x / group; row < rows;
       row += static_cast<int64_t>(gridDim.x) * per_block) {
    const int64_t base = row * h;
    float v[kVecs * V];
    float mean, rstd;
    RowMoments<T, V, kVecs>(x + base, units, t, group, inv_h, eps, v, scratch, &mean, &rstd);
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
      const int64_t u = t + static_cast<int64_t>(j) * group;
      if (u < units) {
        float g[V], b[V], o[V];
        LoadF<T, V>(gamma + u * V, g);
        LoadF<T, V>(beta + u * V, b);
#pragma unroll
        for (int i = 0; i < V; ++i) o[i] = (v[j * V + i] - mean) * rstd * g[i] + b[i];
        StoreF<T, V>(y + base + u * V, o);
      }
    }
  }
}

// Rows too long for registers: one block per row, x read three times (L2 keeps
// much of it between the sweeps).
template <typename T>
__global__ void __launch_bounds__(kRereadThreads) ForwardRereadKernel(const T* __restrict__ x,
                                                                      const T* __restrict__ gamma,
                                                                      const T* __restrict__ beta, T* __restrict__ y,
                                                                      int64_t rows, int64_t h, float eps) {
  __shared__ float scratch[32];
  const float inv_h = 1.0f / static_cast<float>(h);
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * h;
    const float shift = RowShift(xr, h);
    float sum = 0.0f;
    for (int64_t i = threadIdx.x; i < h; i += blockDim.x) sum += ToF(xr[i]) - shift;
    const float mean = GroupSum(sum, blockDim.x, scratch) * inv_h;
    float sq = 0.0f;
    for (int64_t i = threadIdx.x; i < h; i += blockDim.x) {
      const float d = ToF(xr[i]) - shift - mean;
      sq += d * d;
    }
    const float rstd = rsqrtf(GroupSum(sq, blockDim.x, scratch) * inv_h + eps);
    for (int64_t i = threadIdx.x; i < h; i += blockDim.x) {
      y[row * h + i] = FromF<T>((ToF(xr[i]) - shift - mean) * rstd * ToF(gamma[i]) + ToF(beta[i]));
    }
  }
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * gamma; also
// saves each row's mean (of the row less RowShift) and rstd for the dgamma/dbeta kernel.
template <typename T, int V, int kVecs>
__global__ void __launch_bounds__(kMaxGroup) BackwardDxKernel(const T* __restrict__ dy, const T* __restrict__ x,
                                                         const T* __restrict__ gamma, T* __restrict__ dx,
                                                         float* __restrict__ mean_out, float* __restrict__ rstd_out,
                                                         int64_t rows, int64_t h, float eps, int group) {
  __shared__ float scratch[32];
  const int t = threadIdx.x % group;
  const int per_block = blockDim.x / group;
  const int64_t units = h / V;
  const float inv_h = 1.0f / static_cast<float>(h);
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * per_block + threadIdx.x / group; row < rows;
       row += static_cast<int64_t>(gridDim.x) * per_block) {
    const int64_t base = row * h;
    float v[kVecs * V], g[kVecs * V];
    float mean, rstd;
    RowMoments<T, V, kVecs>(x + base, units, t, group, inv_h, eps, v, scratch, &mean, &rstd);
    float s1 = 0.0f, s2 = 0.0f;
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
      const int64_t u = t + static_cast<int64_t>(j) * group;
      if (u < units) {
        float d[V], gm[V];
        LoadF<T, V>(dy + base + u * V, d);
        LoadF<T, V>(gamma + u * V, gm);
#pragma unroll
        for (int i = 0; i < V; ++i) {
          const float xhat = (v[j * V + i] - mean) * rstd;
          g[j * V + i] = d[i] * gm[i];
          v[j * V + i] = xhat;
          s1 += g[j * V + i];
          s2 += g[j * V + i] * xhat;
        }
      }
    }
    const float mg = GroupSum(s1, group, scratch) * inv_h;
    const float mgx = GroupSum(s2, group, scratch) * inv_h;
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
      const int64_t u = t + static_cast<int64_t>(j) * group;
      if (u < units) {
        float o[V];
#pragma unroll
        for (int i = 0; i < V; ++i) o[i] = rstd * (g[j * V + i] - mg - v[j * V + i] * mgx);
        StoreF<T, V>(dx + base + u * V, o);
      }
    }
    if (t == 0) {
      mean_out[row] = mean;
      rstd_out[row] = rstd;
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kRereadThreads) BackwardDxRereadKernel(
    const T* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ gamma, T* __restrict__ dx,
    float* __restrict__ mean_out, float* __restrict__ rstd_out, int64_t rows, int64_t h, float eps) {
  __shared__ float scratch[32];
  const float inv_h = 1.0f / static_cast<float>(h);
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * h;
    const T* dr = dy + row * h;
    const float shift = RowShift(xr, h);
    float sum = 0.0f;
    for (int64_t i = threadIdx.x; i < h; i += blockDim.x) sum += ToF(xr[i]) - shift;
    const float mean = GroupSum(sum, blockDim.x, scratch) * inv_h;
    float sq = 0.0f;
    for (int64_t i = threadIdx.x; i < h; i += blockDim.x) {
      const float d = ToF(xr[i]) - shift - mean;
      sq += d * d;
    }
    const float rstd = rsqrtf(GroupSum(sq, blockDim.x, scratch) * inv_h + eps);
    float s1 = 0.0f, s2 = 0.0f;
    for (int64_t i = threadIdx.x; i < h; i += blockDim.x) {
      const float g = ToF(dr[i]) * ToF(gamma[i]);
      s1 += g;
      s2 += g * (ToF(xr[i]) - shift - mean) * rstd;
    }
    const float mg = GroupSum(s1, blockDim.x, scratch) * inv_h;
    const float mgx = GroupSum(s2, blockDim.x, scratch) * inv_h;
    for (int64_t i = threadIdx.x; i < h; i += blockDim.x) {
      const float g = ToF(dr[i]) * ToF(gamma[i]);
      const float xhat = (ToF(xr[i]) - shift - mean) * rstd;
      dx[row * h + i] = FromF<T>(rstd * (g - mg - xhat * mgx));
    }
    if (threadIdx.x == 0) {
      mean_out[row] = mean;
      rstd_out[row] = rstd;
    }
  }
}

// Column sums of dy * xhat and dy over one slice of rows (blockIdx.y), 32 columns
// per block; the 8 row lanes are added in a fixed order.
template <typename T>
__global__ void __launch_bounds__(32 * kParamThreadsY) ParamPartialsKernel(
    const T* __restrict__ dy, const T* __restrict__ x, const float* __restrict__ mean,
    const float* __restrict__ rstd, float* __restrict__ part_g, float* __restrict__ part_b, int64_t rows, int64_t h,
    int64_t rows_per_slice) {
  __shared__ float sg[kParamThreadsY][33], sb[kParamThreadsY][33];
  const int64_t col = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  const int64_t slice = blockIdx.y;
  const int64_t r0 = slice * rows_per_slice;
  const int64_t r1 = r0 + rows_per_slice < rows ? r0 + rows_per_slice : rows;
  float ag = 0.0f, ab = 0.0f;
  if (col < h) {
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kParamThreadsY) {
      const float d = ToF(dy[r * h + col]);
      ag += d * ((ToF(x[r * h + col]) - ToF(x[r * h]) - mean[r]) * rstd[r]);  // mean[r] is of the shifted row
      ab += d;
    }
  }
  sg[threadIdx.y][threadIdx.x] = ag;
  sb[threadIdx.y][threadIdx.x] = ab;
  __syncthreads();
  if (threadIdx.y == 0 && col < h) {
    float g = 0.0f, b = 0.0f;
#pragma unroll
    for (int k = 0; k < kParamThreadsY; ++k) {
      g += sg[k][threadIdx.x];
      b += sb[k][threadIdx.x];
    }
    part_g[slice * h + col] = g;
    part_b[slice * h + col] = b;
  }
}

template <typename T>
__global__ void ParamFinalKernel(const float* __restrict__ part_g, const float* __restrict__ part_b, int slices,
                                 int64_t h, T* __restrict__ dgamma, T* __restrict__ dbeta) {
  for (int64_t col = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; col < h;
       col += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float g = 0.0f, b = 0.0f;
    for (int s = 0; s < slices; ++s) {
      g += part_g[s * h + col];
      b += part_b[s * h + col];
    }
    dgamma[col] = FromF<T>(g);
    dbeta[col] = FromF<T>(b);
  }
}

// The slice count depends on the shape alone, so the sums' order (and so the
// result) is the same on every device.
inline int Slices(int64_t rows) {
  int64_t s = (rows + 63) / 64;
  return static_cast<int>(s < 1 ? 1 : (s > kMaxSlices ? kMaxSlices : s));
}

inline Status CheckSizes(int64_t rows, int64_t h) {
  if (rows < 0 || h < 0) {
    return Error("FusedLayerNorm: argument 'x': rows and H must be >= 0, got rows=" + std::to_string(rows) +
                 ", H=" + std::to_string(h));
  }
  if (rows > 0 && h == 0) {
    return Error("FusedLayerNorm: argument 'x': H must be >= 1 when there are rows, got rows=" +
                 std::to_string(rows) + ", H=0");
  }
  return Ok();
}

template <typename T>
Status Forward(const T* x, const T* gamma, const T* beta, T* y, int64_t rows, int64_t h, float eps,
               cudaStream_t stream) {
  Status s = CheckSizes(rows, h);
  if (!s.ok() || rows == 0) return s;
  const Plan p = MakePlan<T>({x, gamma, beta, y}, rows, h);
  if (p.vecs == 0) {
    BRIDGE_LAUNCH(p.grid, p.block, 0, stream, ForwardRereadKernel<T>)(x, gamma, beta, y, rows, h, eps);
  } else if (p.vec == 1) {
    DispatchVecs(p.vecs, [&](auto k) {
      BRIDGE_LAUNCH(p.grid, p.block, 0, stream, ForwardKernel<T, 1, decltype(k)::value>)
          (x, gamma, beta, y, rows, h, eps, p.group);
    });
  } else {
    DispatchVecs(p.vecs, [&](auto k) {
      BRIDGE_LAUNCH(p.grid, p.block, 0, stream, ForwardKernel<T, 16 / sizeof(T), decltype(k)::value>)
          (x, gamma, beta, y, rows, h, eps, p.group);
    });
  }
  return CheckLaunch("FusedLayerNorm forward kernel");
}

// Workspace: mean and rstd per row, then the dgamma/dbeta partial sums per slice.
struct BackwardScratch {
  float *mean, *rstd, *part_g, *part_b;
  size_t bytes;
  BackwardScratch(void* base, int64_t rows, int64_t h) {
    Carve c(base);
    const size_t slices = static_cast<size_t>(Slices(rows));
    mean = c.take<float>(rows);
    rstd = c.take<float>(rows);
    part_g = c.take<float>(slices * h);
    part_b = c.take<float>(slices * h);
    bytes = c.used;
  }
};

inline size_t BackwardWorkspaceBytes(int64_t rows, int64_t h) {
  return rows > 0 && h > 0 ? BackwardScratch(nullptr, rows, h).bytes : 0;
}

template <typename T>
Status Backward(const T* dy, const T* x, const T* gamma, T* dx, T* dgamma, T* dbeta, int64_t rows, int64_t h,
                float eps, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  Status s = CheckSizes(rows, h);
  if (!s.ok()) return s;
  if (rows == 0) {  // no rows: the parameter gradients are sums of nothing
    if (h == 0) return Ok();
    s = Check(cudaMemsetAsync(dgamma, 0, sizeof(T) * h, stream), "FusedLayerNorm backward: zeroing dgamma");
    if (s.ok()) s = Check(cudaMemsetAsync(dbeta, 0, sizeof(T) * h, stream), "FusedLayerNorm backward: zeroing dbeta");
    return s;
  }
  BackwardScratch w(workspace, rows, h);
  if (workspace == nullptr || workspace_bytes < w.bytes) {
    return Error("FusedLayerNorm backward: workspace of " + std::to_string(workspace_bytes) + " bytes, needs " +
                 std::to_string(w.bytes));
  }
  const Plan p = MakePlan<T>({dy, x, gamma, dx}, rows, h);
  if (p.vecs == 0) {
    BRIDGE_LAUNCH(p.grid, p.block, 0, stream, BackwardDxRereadKernel<T>)
        (dy, x, gamma, dx, w.mean, w.rstd, rows, h, eps);
  } else if (p.vec == 1) {
    DispatchVecs(p.vecs, [&](auto k) {
      BRIDGE_LAUNCH(p.grid, p.block, 0, stream, BackwardDxKernel<T, 1, decltype(k)::value>)
          (dy, x, gamma, dx, w.mean, w.rstd, rows, h, eps, p.group);
    });
  } else {
    DispatchVecs(p.vecs, [&](auto k) {
      BRIDGE_LAUNCH(p.grid, p.block, 0, stream, BackwardDxKernel<T, 16 / sizeof(T), decltype(k)::value>)
          (dy, x, gamma, dx, w.mean, w.rstd, rows, h, eps, p.group);
    });
  }
  s = CheckLaunch("FusedLayerNorm backward dx kernel");
  if (!s.ok()) return s;
  const int slices = Slices(rows);
  const int64_t rows_per_slice = (rows + slices - 1) / slices;
  const dim3 grid(static_cast<unsigned>((h + 31) / 32), static_cast<unsigned>(slices));
  BRIDGE_LAUNCH(grid, dim3(32, kParamThreadsY), 0, stream, ParamPartialsKernel<T>)
      (dy, x, w.mean, w.rstd, w.part_g, w.part_b, rows, h, rows_per_slice);
  s = CheckLaunch("FusedLayerNorm backward dgamma/dbeta partial kernel");
  if (!s.ok()) return s;
  BRIDGE_LAUNCH(LaunchBlocks(h, 256), 256, 0, stream, ParamFinalKernel<T>)
      (w.part_g, w.part_b, slices, h, dgamma, dbeta);
  return CheckLaunch("FusedLayerNorm backward dgamma/dbeta final kernel");
}

}  // namespace layer_norm
}  // namespace bridge_cuda

#endif  // BRIDGE_OPS_FUSED_LAYER_NORM_KERNEL_CUH_
