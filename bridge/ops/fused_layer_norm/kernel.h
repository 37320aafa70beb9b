// FusedLayerNorm's kernel core (the one C++ op ABI, bridge/kernels/abi.h): its
// spec's rendered shape rule and its row math, served to TensorFlow, onnxruntime and LiteRT by their
// generic hosts; the gradient (tf_ops/fused_layer_norm_grad.cc) reuses both.
// Rows are float (float16 rows are widened first: float16 accumulates in float32).
//
// A row is worked on in cache in three sweeps: the first gives an approximate
// mean m0, the second the sums of (x - m0) and (x - m0)^2 -- the shift keeps a
// large mean from cancelling the variance away, and the first sum corrects m0 --
// the third writes y.
#ifndef BRIDGE_OPS_FUSED_LAYER_NORM_KERNEL_H_
#define BRIDGE_OPS_FUSED_LAYER_NORM_KERNEL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/abi.h"
#include "spec/fused_layer_norm.h"

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

// The spec's shape rule (rendered into spec/fused_layer_norm.h) on (x, gamma, beta).
inline abi::Status ShapeRule(const std::vector<abi::Shape>& in, std::vector<abi::Shape>* out = nullptr) {
  return spec::FusedLayerNorm::CheckShapes(spec::FusedLayerNorm::OnnxAttrs{}, in, out);
}

// Its checks one argument at a time, for FusedLayerNormGrad's gamma: the others unknown.
inline abi::Status XRule(const abi::Shape& x) {
  return ShapeRule({x, abi::Shape::Unknown(), abi::Shape::Unknown()});
}
inline abi::Status ParamRule(const char* arg, const abi::Shape& x, const abi::Shape& p) {
  const bool beta = std::string(arg) == "beta";
  return ShapeRule({x, beta ? abi::Shape::Unknown() : p, beta ? p : abi::Shape::Unknown()});
}

}  // namespace layer_norm

namespace core {

struct FusedLayerNorm {
  using Spec = spec::FusedLayerNorm;
  struct Params {
    float epsilon;
  };
  static constexpr int kInplaceInput = 0;  // each row is read before it is written
  // Above this size y will not stay in cache for the next op anyway: streaming stores.
  static constexpr int64_t kStreamBytes = int64_t{16} << 20;
  static constexpr int64_t kAhead = 2;  // rows prefetched ahead

  static abi::Status Read(const Spec::Attrs& a, Params* p) {
    p->epsilon = a.epsilon;
    return abi::Ok();
  }
  static abi::Status Read(const Spec::OnnxAttrs& a, Params* p) {
    p->epsilon = a.epsilon;
    return abi::Ok();
  }

  static abi::Status Shapes(const Params&, const std::vector<abi::Shape>& in, std::vector<abi::Shape>* out) {
    return layer_norm::ShapeRule(in, out);
  }

  static void Compute(const Params& p, const std::vector<abi::In>& in, const std::vector<abi::Out>& out,
                      const abi::ParallelFor& parallel_for) {
    const abi::In &x = in[0], &gamma = in[1], &beta = in[2];
    const int64_t h = x.shape.back(), n = x.size();
    if (n == 0) return;
    const int64_t rows = n / h;
    const float eps = p.epsilon;
    if (x.type == abi::DType::kFloat32) {
      const float *xf = x.as<float>(), *g = gamma.as<float>(), *b = beta.as<float>();
      float* yf = out[0].as<float>();
      const bool stream = n * 4 >= kStreamBytes;
      parallel_for(rows, 6 * h, [=](int64_t begin, int64_t end) {
        std::vector<float> buf(stream ? h : 0);
        for (int64_t r = begin; r < end; ++r) {
          if (r + kAhead < end) abi::Prefetch(xf + (r + kAhead) * h, h * sizeof(float));
          if (stream) {
            layer_norm::NormalizeRow(xf + r * h, h, g, b, eps, buf.data());
            abi::StreamFloats(buf.data(), yf + r * h, h);
          } else {
            layer_norm::NormalizeRow(xf + r * h, h, g, b, eps, yf + r * h);
          }
        }
        if (stream) abi::StreamFence();
      });
      return;
    }
    // float16: gamma and beta widened once, each row widened, normalised in float, narrowed.
    std::vector<float> gb(2 * h);
    abi::ToFloats(gamma.as<uint16_t>(), gb.data(), h);
    abi::ToFloats(beta.as<uint16_t>(), gb.data() + h, h);
    const float *g = gb.data(), *b = gb.data() + h;
    const uint16_t* xp = x.as<uint16_t>();
    uint16_t* yp = out[0].as<uint16_t>();
    parallel_for(rows, 6 * h, [=](int64_t begin, int64_t end) {
      std::vector<float> buf(h);
      for (int64_t r = begin; r < end; ++r) {
        if (r + kAhead < end) abi::Prefetch(xp + (r + kAhead) * h, h * sizeof(uint16_t));
        abi::ToFloats(xp + r * h, buf.data(), h);
        layer_norm::NormalizeRow(buf.data(), h, g, b, eps, buf.data());
        abi::FromFloats(buf.data(), yp + r * h, h);
      }
    });
  }
};

}  // namespace core
}  // namespace bridge

#endif  // BRIDGE_OPS_FUSED_LAYER_NORM_KERNEL_H_
