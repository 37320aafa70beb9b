// FusedLayerNorm's row math, framework-free: the one core the TensorFlow kernel
// (tf_ops/fused_layer_norm.cc) and the onnxruntime kernel
// (onnx_plugins/native/fused_layer_norm.cc) both call, so their numerics cannot
// drift apart. Rows are float (float16 callers widen a row first: ops.md says
// float16 accumulates in float32); threads and buffers are the caller's.
//
// A row is worked on in cache in three sweeps: the first gives an approximate
// mean m0, the second the sums of (x - m0) and (x - m0)^2 -- the shift keeps a
// large mean from cancelling the variance away, and the first sum corrects m0 --
// the third writes y.
#ifndef BRIDGE_KERNELS_FUSED_LAYER_NORM_H_
#define BRIDGE_KERNELS_FUSED_LAYER_NORM_H_

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace bridge {
namespace layer_norm {

// Independent partial sums per sweep: enough vector accumulators that the adds
// are not waiting on each other (one chain is latency-bound at ~1/4 the peak).
constexpr int kLanes = 32;

struct Moments {
  float m0;     // the first sweep's approximate mean
  float delta;  // mean - m0
  float rstd;   // 1 / sqrt(var + epsilon)
};

// Below this many elements, setting up and folding the lanes costs more than
// the row: one vector accumulator per sum instead.
constexpr int64_t kShortRow = 4 * kLanes;

inline Moments FromSums(float m0, float t1, float t2, int64_t n, float epsilon) {
  const float inv_n = 1.0f / static_cast<float>(n);
  const float delta = t1 * inv_n;
  const float var = std::max(t2 * inv_n - delta * delta, 0.0f);
  return Moments{m0, delta, 1.0f / std::sqrt(var + epsilon)};
}

inline Moments ShortRowMoments(const float* x, int64_t n, float epsilon) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < n; ++j) sum += x[j];
  const float m0 = sum / static_cast<float>(n);
  float t1 = 0.0f, t2 = 0.0f;
#pragma omp simd reduction(+ : t1, t2)
  for (int64_t j = 0; j < n; ++j) {
    float d = x[j] - m0;
    t1 += d;
    t2 += d * d;
  }
  return FromSums(m0, t1, t2, n, epsilon);
}

// The first two sweeps over one row of n > 0 floats.
inline Moments RowMoments(const float* x, int64_t n, float epsilon) {
  if (n < kShortRow) return ShortRowMoments(x, n, epsilon);
  float acc[kLanes] = {0};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
#pragma omp simd
    for (int k = 0; k < kLanes; ++k) acc[k] += x[i + k];
  }
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = i; j < n; ++j) sum += x[j];
#pragma omp simd reduction(+ : sum)
  for (int k = 0; k < kLanes; ++k) sum += acc[k];
  const float m0 = sum / static_cast<float>(n);

  float s1[kLanes] = {0}, s2[kLanes] = {0};
  for (i = 0; i + kLanes <= n; i += kLanes) {
#pragma omp simd
    for (int k = 0; k < kLanes; ++k) {
      float d = x[i + k] - m0;
      s1[k] += d;
      s2[k] += d * d;
    }
  }
  float t1 = 0.0f, t2 = 0.0f;
#pragma omp simd reduction(+ : t1, t2)
  for (int64_t j = i; j < n; ++j) {
    float d = x[j] - m0;
    t1 += d;
    t2 += d * d;
  }
#pragma omp simd reduction(+ : t1, t2)
  for (int k = 0; k < kLanes; ++k) {
    t1 += s1[k];
    t2 += s2[k];
  }
  return FromSums(m0, t1, t2, n, epsilon);
}

// y = gamma * (x - mean) * rstd + beta for one row. `y` may be `x` (e.g. the
// widened buffer of a half row): each element is read before it is overwritten.
inline void NormalizeRow(const float* x, int64_t n, const float* gamma, const float* beta, float epsilon,
                         float* y) {
  const Moments m = RowMoments(x, n, epsilon);
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) {
    y[j] = ((x[j] - m.m0) - m.delta) * m.rstd * gamma[j] + beta[j];
  }
}

// One row of the gradient: dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with
// g = dy * gamma, written to `dx` (which may be `dy`'s buffer: each element is
// read before it is written); dy * xhat and dy added into the caller's dgamma /
// dbeta partial sums.
inline void GradRow(const float* dy, const float* x, int64_t n, const float* gamma, float epsilon, float* dx,
                    float* dgamma, float* dbeta) {
  const Moments m = RowMoments(x, n, epsilon);
  float s1 = 0.0f, s2 = 0.0f;
#pragma omp simd reduction(+ : s1, s2)
  for (int64_t j = 0; j < n; ++j) {
    const float xhat = ((x[j] - m.m0) - m.delta) * m.rstd;  // m0 + delta as one float would round the mean
    const float g = dy[j] * gamma[j];
    s1 += g;
    s2 += g * xhat;
    dgamma[j] += dy[j] * xhat;
    dbeta[j] += dy[j];
  }
  const float inv_n = 1.0f / static_cast<float>(n);
  const float mg = s1 * inv_n, mgx = s2 * inv_n;
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) {
    const float xhat = ((x[j] - m.m0) - m.delta) * m.rstd;
    dx[j] = m.rstd * (dy[j] * gamma[j] - mg - xhat * mgx);
  }
}

}  // namespace layer_norm
}  // namespace bridge

#endif  // BRIDGE_KERNELS_FUSED_LAYER_NORM_H_
