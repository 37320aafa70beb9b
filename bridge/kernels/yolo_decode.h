// YoloDecode's math, framework-free: the one core the TensorFlow kernel
// (tf_ops/yolo_decode.cc) and the onnxruntime kernel
// (onnx_plugins/native/yolo_decode.cc) both call. float in, float out; float16
// callers widen a block of cells first. Threads are the caller's.
#ifndef BRIDGE_KERNELS_YOLO_DECODE_H_
#define BRIDGE_KERNELS_YOLO_DECODE_H_

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/fast_math.h"

namespace bridge {
namespace yolo_decode {

struct Params {
  const float* anchors;  // [w0, h0, w1, h1, ...], 2 * num_anchors
  int64_t num_anchors, num_classes, stride;
  float scale_x_y;

  int64_t per_anchor() const { return 5 + num_classes; }
  int64_t channels() const { return num_anchors * per_anchor(); }
};

// The attribute checks of the spec (bridge/ops/yolo_decode.py), for the adapters
// whose attributes arrive unchecked (onnxruntime, LiteRT): the bad argument and
// why, or arg == nullptr.
struct AttrProblem {
  const char* arg;
  std::string message;
};

inline AttrProblem CheckAttrs(const std::vector<float>& anchors, int64_t num_classes, int64_t stride) {
  if (anchors.empty() || anchors.size() % 2)
    return {"anchors", "needs 2*A values [w0,h0,w1,h1,...], got " + std::to_string(anchors.size())};
  for (float v : anchors)
    if (!(v > 0)) return {"anchors", "must all be positive, got " + std::to_string(v)};
  if (num_classes < 1) return {"num_classes", "must be >= 1, got " + std::to_string(num_classes)};
  if (stride < 1) return {"stride", "must be >= 1, got " + std::to_string(stride)};
  return {nullptr, ""};
}

// Cells per block: each block's five box channels per anchor are first gathered
// into columns so that their logistic and exp run as vector loops, as the class
// channels do in place.
constexpr int64_t kBlock = 16;

// Floats of scratch DecodeCells needs.
inline int64_t ScratchSize(const Params& p) { return 5 * kBlock * p.num_anchors; }

// Decodes grid cells [c0, c1) of a [N, gh, gw] grid (n, h, w flattened). `x`
// holds the cells' channels from cell `base` on; boxes [., 4], obj [.] and cls
// [., C] are written from (cell - base) * A on.
inline void DecodeCells(const Params& p, const float* x, int64_t gh, int64_t gw, int64_t c0, int64_t c1,
                        int64_t base, float* boxes, float* obj, float* cls, float* scratch) {
  const int64_t na = p.num_anchors, nc = p.num_classes, per = p.per_anchor(), ch = p.channels();
  const int64_t cap = kBlock * na;
  const float stride = static_cast<float>(p.stride), sxy = p.scale_x_y, off = (p.scale_x_y - 1.0f) * 0.5f;
  float* tx = scratch;
  float* ty = tx + cap;
  float* tw = ty + cap;
  float* th = tw + cap;
  float* to = th + cap;
  for (int64_t b0 = c0; b0 < c1; b0 += kBlock) {
    const int64_t m = std::min(kBlock, c1 - b0) * na;  // (cell, anchor) pairs in this block
    const float* xb = x + (b0 - base) * ch;             // pair i's channels start at i * per
    for (int64_t i = 0; i < m; ++i) {
      const float* xa = xb + i * per;
      tx[i] = xa[0], ty[i] = xa[1], tw[i] = xa[2], th[i] = xa[3], to[i] = xa[4];
    }
#pragma omp simd
    for (int64_t i = 0; i < m; ++i) {
      tx[i] = SigmoidF(tx[i]);
      ty[i] = SigmoidF(ty[i]);
      tw[i] = ExpF(tw[i]);
      th[i] = ExpF(th[i]);
      to[i] = SigmoidF(to[i]);
    }
    for (int64_t i = 0; i < m; ++i) {
      const int64_t row = (b0 - base) * na + i, cell = b0 + i / na, a = i % na;
      const float gx = static_cast<float>(cell % gw), gy = static_cast<float>((cell / gw) % gh);
      float* box = boxes + row * 4;
      box[0] = (sxy * tx[i] - off + gx) * stride;
      box[1] = (sxy * ty[i] - off + gy) * stride;
      box[2] = tw[i] * p.anchors[2 * a];
      box[3] = th[i] * p.anchors[2 * a + 1];
      obj[row] = to[i];
      const float* logits = xb + i * per + 5;
      float* out = cls + row * nc;
#pragma omp simd
      for (int64_t k = 0; k < nc; ++k) out[k] = SigmoidF(logits[k]);
    }
  }
}

}  // namespace yolo_decode
}  // namespace bridge

#endif  // BRIDGE_KERNELS_YOLO_DECODE_H_
