// Helpers shared by the TensorFlow kernels in this folder.
//
//   bridge::ArgError(op, arg, message)      InvalidArgument "Op: argument 'arg': message",
//                                           worded as bridge.ops.OpError words it
//   bridge::Dims(TensorShape) / Dims(ctx, ShapeHandle) / Dims(vector)
//                                           shapes as bridge.ops.spec.dims prints them:
//                                           [1,?,7], <unknown rank>
//   bridge::ToFloats / bridge::FromFloats   bulk T <-> float (F16C when compiled with it)
//   bridge::StreamFloats / bridge::StreamFence
//                                           write-only output that bypasses the cache
//   bridge::Prefetch(ptr, bytes)            asks for memory a loop will read next
//   bridge::ParallelRows(ctx, rows, cost, fn(begin, end))
//                                           shards rows over the op's own CPU thread pool
//   bridge::ExpF / bridge::SigmoidF         exp and logistic that vectorise inside
//                                           `#pragma omp simd` loops (relative error < 3e-7)
//
// Header-only; every kernel file includes it, so keep the names stable.
#ifndef BRIDGE_TF_OPS_COMMON_H_
#define BRIDGE_TF_OPS_COMMON_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/fast_math.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/util/work_sharder.h"

namespace bridge {

// -- errors ------------------------------------------------------------------

// The same text in eager (kernel), at graph-build time (shape function) and in
// Python (OpError), so a user sees one message whichever side caught the input.
inline absl::Status ArgError(const std::string& op, const std::string& arg, const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat(op, ": argument '", arg, "': ", message));
}

inline std::string Dims(const tensorflow::TensorShape& shape) {
  return absl::StrCat("[", absl::StrJoin(shape.dim_sizes(), ","), "]");
}

inline std::string Dims(tensorflow::shape_inference::InferenceContext* c,
                        tensorflow::shape_inference::ShapeHandle s) {
  if (!c->RankKnown(s)) return "<unknown rank>";
  std::vector<std::string> parts;
  for (int i = 0; i < c->Rank(s); ++i) {
    auto d = c->Dim(s, i);
    parts.push_back(c->ValueKnown(d) ? absl::StrCat(c->Value(d)) : "?");
  }
  return absl::StrCat("[", absl::StrJoin(parts, ","), "]");
}

template <typename V>
std::string Dims(const std::vector<V>& values) {
  return absl::StrCat("[", absl::StrJoin(values, ", "), "]");
}

// -- half <-> float ----------------------------------------------------------

inline void ToFloats(const float* src, float* dst, int64_t n) {
  if (src != dst) std::memcpy(dst, src, sizeof(float) * n);
}

inline void ToFloats(const Eigen::half* src, float* dst, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  // Eigen converts one value per call; F16C does eight per instruction.
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
#endif
  for (; i < n; ++i) dst[i] = static_cast<float>(src[i]);
}

inline void FromFloats(const float* src, float* dst, int64_t n) {
  if (src != dst) std::memcpy(dst, src, sizeof(float) * n);
}

inline void FromFloats(const float* src, Eigen::half* dst, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
#endif
  for (; i < n; ++i) dst[i] = static_cast<Eigen::half>(src[i]);
}

// -- streaming stores --------------------------------------------------------

// For outputs far larger than the cache: non-temporal stores skip the read that
// an ordinary store of a cache line costs, a third of the traffic of y = f(x).
// Call StreamFence() before the thread's work is done (they are weakly ordered).
inline void StreamFloats(const float* src, float* dst, int64_t n) {
  int64_t i = 0;
#if defined(__AVX__)
  for (; i < n && (reinterpret_cast<uintptr_t>(dst + i) & 31); ++i) dst[i] = src[i];
  for (; i + 8 <= n; i += 8) _mm256_stream_ps(dst + i, _mm256_loadu_ps(src + i));
#endif
  for (; i < n; ++i) dst[i] = src[i];
}

// Row-by-row kernels stall on each new row's first cache misses; asking for the
// next row while working on this one hides that (1.6x at [32,512,1024]).
inline void Prefetch(const void* p, int64_t bytes) {
#if defined(__x86_64__)
  const char* c = static_cast<const char*>(p);
  for (int64_t i = 0; i < bytes; i += 64) _mm_prefetch(c + i, _MM_HINT_T0);
#endif
}

inline void StreamFence() {
#if defined(__x86_64__)
  _mm_sfence();
#endif
}

// -- threads -----------------------------------------------------------------

// `cost_per_row` is a rough cycle count; the pool uses it to decide how finely to
// split (small tensors stay on the calling thread).
template <typename Fn>
void ParallelRows(tensorflow::OpKernelContext* ctx, int64_t rows, int64_t cost_per_row, Fn&& fn) {
  if (rows <= 0) return;
  auto* workers = ctx->device()->tensorflow_cpu_worker_threads()->workers;
  workers->ParallelFor(rows, cost_per_row, std::function<void(int64_t, int64_t)>(std::forward<Fn>(fn)));
}

// -- vectorisable math -------------------------------------------------------

// ExpF / SigmoidF: bridge/kernels/fast_math.h (shared with the onnxruntime kernels).

}  // namespace bridge

#endif  // BRIDGE_TF_OPS_COMMON_H_
