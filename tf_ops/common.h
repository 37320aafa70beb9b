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

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/abi.h"
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

// -- half <-> float, streaming stores, prefetch: the op ABI's (bridge/kernels/abi.h)

using abi::FromFloats;
using abi::Prefetch;
using abi::StreamFence;
using abi::StreamFloats;
using abi::ToFloats;

// Eigen::half is float16's bits: the ABI's uint16_t conversions serve it.
inline void ToFloats(const Eigen::half* src, float* dst, int64_t n) {
  abi::ToFloats(reinterpret_cast<const uint16_t*>(src), dst, n);
}

inline void FromFloats(const float* src, Eigen::half* dst, int64_t n) {
  abi::FromFloats(src, reinterpret_cast<uint16_t*>(dst), n);
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
