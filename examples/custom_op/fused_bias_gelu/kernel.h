// FusedBiasGelu as one kernel core (bridge's C++ op ABI: bridge/kernels/abi.h):
// y = gelu(x + bias), the exact erf GELU. This one file gives the op a
// TensorFlow, an onnxruntime and a LiteRT kernel, through bridge's generic hosts:
//   --op-library examples/custom_op/fused_bias_gelu      (TensorFlow)
//   --ort-library examples/custom_op/fused_bias_gelu     (onnxruntime)
//   --litert-library examples/custom_op/fused_bias_gelu  (LiteRT)
// with the spec given by --op-spec examples/custom_op/fused_bias_gelu.py (its
// module name is this folder's name). "spec/fused_bias_gelu.h" is rendered from
// that spec when the kernels are built.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/abi.h"
#include "spec/fused_bias_gelu.h"

namespace bridge {
namespace core {

struct FusedBiasGelu {
  using Spec = spec::FusedBiasGelu;
  struct Params {};
  static constexpr int kInplaceInput = 0;  // each element is read before it is written

  static abi::Status Read(const Spec::Attrs&, Params*) { return abi::Ok(); }
  static abi::Status Read(const Spec::OnnxAttrs&, Params*) { return abi::Ok(); }

  // The spec's shape rule: x of rank >= 1, bias [C] with C the last dim of x.
  static abi::Status Shapes(const Params&, const std::vector<abi::Shape>& in, std::vector<abi::Shape>* out) {
    const abi::Shape &x = in[0], &bias = in[1];
    if (x.known && x.rank() == 0) return abi::Bad("x", "must have rank >= 1, got a scalar (shape [])");
    const int64_t c = x.known ? x[x.rank() - 1] : -1;
    if (bias.known && (bias.rank() != 1 || (c >= 0 && bias[0] >= 0 && bias[0] != c)))
      return abi::Bad("bias", "must have shape [C]=[" + (c < 0 ? std::string("?") : std::to_string(c)) +
                                  "] (the last dim of x " + x.str() + "), got " + bias.str());
    *out = {x};
    return abi::Ok();
  }

  static float Gelu(float z) { return 0.5f * z * (1.0f + std::erf(z * 0.70710678118654752f)); }

  static void Compute(const Params&, const std::vector<abi::In>& in, const std::vector<abi::Out>& out,
                      const abi::ParallelFor& parallel_for) {
    const int64_t n = in[0].size(), c = in[0].shape.back();
    if (n == 0) return;
    const bool half = in[0].type == abi::DType::kFloat16;
    std::vector<float> bias(c);
    if (half) abi::ToFloats(in[1].as<uint16_t>(), bias.data(), c);
    else abi::ToFloats(in[1].as<float>(), bias.data(), c);
    const float* b = bias.data();
    const void* x = in[0].data;
    void* y = out[0].data;
    parallel_for(n / c, 20 * c, [=](int64_t begin, int64_t end) {
      std::vector<float> row(c);
      for (int64_t r = begin; r < end; ++r) {
        if (half) abi::ToFloats(static_cast<const uint16_t*>(x) + r * c, row.data(), c);
        else abi::ToFloats(static_cast<const float*>(x) + r * c, row.data(), c);
        for (int64_t i = 0; i < c; ++i) row[i] = Gelu(row[i] + b[i]);
        if (half) abi::FromFloats(row.data(), static_cast<uint16_t*>(y) + r * c, c);
        else abi::FromFloats(row.data(), static_cast<float*>(y) + r * c, c);
      }
    });
  }
};

}  // namespace core
}  // namespace bridge
