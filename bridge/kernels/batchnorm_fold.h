// YoloConvBnLeaky's one BatchNorm fold, framework-free, for every convolution
// road (the TensorFlow, onnxruntime and LiteRT kernels): per output channel
//   s = gamma / sqrt(var + eps),  b' = (conv_bias - mean) * s + beta
// in double (conv bias and mean combined once), rounded once to float. A road
// then scales either its output (TensorFlow: oneDNN post-ops, the Eigen tile
// pass) or the filter (the GEMM and oneDNN roads of onnxruntime and LiteRT) by s.
#ifndef BRIDGE_KERNELS_BATCHNORM_FOLD_H_
#define BRIDGE_KERNELS_BATCHNORM_FOLD_H_

#include <cmath>
#include <cstdint>

namespace bridge {

// p: conv_bias, bn_gamma, bn_beta, bn_mean, bn_variance as float, [cout] each.
inline void FoldBatchNorm(const float* const p[5], int64_t cout, float eps, float* s, float* b) {
  for (int64_t o = 0; o < cout; ++o) {
    const double scale = static_cast<double>(p[1][o]) / std::sqrt(static_cast<double>(p[4][o]) + eps);
    s[o] = static_cast<float>(scale);
    b[o] = static_cast<float>((static_cast<double>(p[0][o]) - p[3][o]) * scale + p[2][o]);
  }
}

}  // namespace bridge

#endif  // BRIDGE_KERNELS_BATCHNORM_FOLD_H_
