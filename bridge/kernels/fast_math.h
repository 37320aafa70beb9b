// Vectorisable float math shared by the TensorFlow kernels (via tf_ops/common.h), the
// onnxruntime kernels (onnx_plugins/native) and the other cores here: framework-free, header-only.
#ifndef BRIDGE_KERNELS_FAST_MATH_H_
#define BRIDGE_KERNELS_FAST_MATH_H_

#include <cstdint>
#include <cstring>

namespace bridge {

// exp(x) by range reduction x = n*ln2 + r, |r| <= ln2/2, and a degree-6 Taylor
// polynomial (truncation error < 1.3e-7 relative). Branch-free, so the compiler
// vectorises it in `#pragma omp simd` loops where std::exp stays a scalar call.
// 2^n is applied as two factors 2^(n/2) so both ends stay in range of the float
// exponent: large x overflows to inf and small x underflows through the
// subnormals to 0, as std::exp does. NaN stays NaN.
#pragma omp declare simd
inline float ExpF(float x) {
  const float kLog2e = 1.44269504088896341f;
  const float kLn2Hi = 0.693145751953125f;  // ln2 split so n*kLn2Hi is exact
  const float kLn2Lo = 1.42860682030941723e-06f;
  // Adding 1.5*2^23 rounds to an integer and leaves it in the low mantissa bits:
  // n without a float-to-int conversion (undefined for NaN, which must pass).
  const float kRound = 12582912.0f;
  const uint32_t kRoundBits = 0x4B400000u;
  float xc = x < -104.0f ? -104.0f : (x > 89.0f ? 89.0f : x);
  float t = xc * kLog2e + kRound;
  float n = t - kRound;
  float r = xc - n * kLn2Hi;
  r = r - n * kLn2Lo;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  uint32_t tb;
  std::memcpy(&tb, &t, sizeof(tb));
  const uint32_t u = tb - kRoundBits + 256u;  // n + 256, in [105, 385] for every non-NaN x
  const uint32_t h1 = u >> 1;                 // floor(n/2) + 128
  const uint32_t b1 = (h1 - 1u) << 23, b2 = (u - h1 - 1u) << 23;  // 2^floor(n/2), 2^(n - floor(n/2))
  float s1, s2;
  std::memcpy(&s1, &b1, sizeof(s1));
  std::memcpy(&s2, &b2, sizeof(s2));
  return (p * s1) * s2;  // NaN in x made r, and so p, NaN
}

#pragma omp declare simd
inline float SigmoidF(float x) {
  return 1.0f / (1.0f + ExpF(-x));
}

}  // namespace bridge

#endif  // BRIDGE_KERNELS_FAST_MATH_H_
