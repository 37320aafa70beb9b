// YoloDecode's kernel core (the one C++ op ABI, bridge/kernels/abi.h): its
// spec's rendered shape rule (attribute checks included) and its decode math, served to TensorFlow,
// onnxruntime and LiteRT by their generic hosts. float in, float out; float16
// blocks of cells are widened first.
#ifndef BRIDGE_OPS_YOLO_DECODE_KERNEL_H_
#define BRIDGE_OPS_YOLO_DECODE_KERNEL_H_

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/abi.h"
#include "kernels/fast_math.h"
#include "spec/yolo_decode.h"

namespace bridge {
namespace yolo_decode {

struct Params {
  const float* anchors;  // [w0, h0, w1, h1, ...], 2 * num_anchors
  int64_t num_anchors, num_classes, stride;
  float scale_x_y;

  int64_t per_anchor() const { return 5 + num_classes; }
  int64_t channels() const { return num_anchors * per_anchor(); }
};

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

namespace core {

struct YoloDecode {
  using Spec = spec::YoloDecode;
  struct Params {
    std::vector<float> anchors;
    int64_t num_classes = 0, stride = 0;
    float scale_x_y = 1.0f;
    int64_t num_anchors() const { return static_cast<int64_t>(anchors.size()) / 2; }
    int64_t channels() const { return num_anchors() * (5 + num_classes); }
    yolo_decode::Params view() const { return {anchors.data(), num_anchors(), num_classes, stride, scale_x_y}; }
  };
  static constexpr int kInplaceInput = -1;

  // The spec's shape rule (rendered into spec/yolo_decode.h; Params has the node's
  // attribute names). Its attribute checks need no shapes: Read runs them on
  // inputs of unknown rank, so a bad attribute fails where the node is built.
  static abi::Status Rule(const Params& a, const std::vector<abi::Shape>& in, std::vector<abi::Shape>* out) {
    abi::Status s = Spec::CheckShapes(a, in, out);
    if (!s.ok()) return s;
    // What only int64 needs (the rule's Python ints never overflow): A*(5+C) and
    // H*W*A must each be a valid dimension before anything multiplies them.
    int64_t c5, ch, hw, rows;
    if (__builtin_add_overflow(a.num_classes, int64_t{5}, &c5) || __builtin_mul_overflow(a.num_anchors(), c5, &ch))
      return abi::Bad("num_classes", "A*(5+C) = " + std::to_string(a.num_anchors()) + "*(5+" +
                                         std::to_string(a.num_classes) + ") overflows a tensor dimension");
    const abi::Shape& raw = in[0];
    if (raw.known && raw[1] >= 0 && raw[2] >= 0 &&
        (__builtin_mul_overflow(raw[1], raw[2], &hw) || __builtin_mul_overflow(hw, a.num_anchors(), &rows)))
      return abi::Bad("raw", "H*W*A overflows a tensor dimension, got " + raw.str());
    return abi::Ok();
  }
  template <typename A>
  static abi::Status Read(const A& a, Params* p) {  // the TF and the ONNX attributes are the same four
    p->anchors = a.anchors;
    p->num_classes = a.num_classes;
    p->stride = a.stride;
    p->scale_x_y = a.scale_x_y;
    return Rule(*p, {abi::Shape::Unknown()}, nullptr);
  }

  static abi::Status Shapes(const Params& a, const std::vector<abi::Shape>& in, std::vector<abi::Shape>* out) {
    return Rule(a, in, out);
  }

  static void Compute(const Params& a, const std::vector<abi::In>& in, const std::vector<abi::Out>& out,
                      const abi::ParallelFor& parallel_for) {
    const abi::In& raw = in[0];
    if (raw.size() == 0) return;
    const int64_t gh = raw.shape[1], gw = raw.shape[2], cells = raw.shape[0] * gh * gw;
    const int64_t na = a.num_anchors(), nc = a.num_classes, ch = a.channels();
    const yolo_decode::Params p = a.view();
    if (raw.type == abi::DType::kFloat32) {
      const float* x = raw.as<float>();
      float *bp = out[0].as<float>(), *op = out[1].as<float>(), *cp = out[2].as<float>();
      parallel_for(cells, 3 * ch, [=](int64_t begin, int64_t end) {
        std::vector<float> scratch(yolo_decode::ScratchSize(p));
        yolo_decode::DecodeCells(p, x, gh, gw, begin, end, 0, bp, op, cp, scratch.data());
      });
      return;
    }
    // float16: a block of cells widened, decoded as float32, narrowed.
    const uint16_t* x = raw.as<uint16_t>();
    uint16_t *bp = out[0].as<uint16_t>(), *op = out[1].as<uint16_t>(), *cp = out[2].as<uint16_t>();
    parallel_for(cells, 3 * ch, [=](int64_t begin, int64_t end) {
      constexpr int64_t kBlock = yolo_decode::kBlock;
      std::vector<float> scratch(yolo_decode::ScratchSize(p));
      std::vector<float> buf(kBlock * ch + kBlock * na * (5 + nc));
      float* v = buf.data();
      float* fb = v + kBlock * ch;
      float* fo = fb + kBlock * na * 4;
      float* fc = fo + kBlock * na;
      for (int64_t c0 = begin; c0 < end; c0 += kBlock) {
        const int64_t c1 = std::min(end, c0 + kBlock), m = (c1 - c0) * na;
        abi::ToFloats(x + c0 * ch, v, (c1 - c0) * ch);
        yolo_decode::DecodeCells(p, v, gh, gw, c0, c1, c0, fb, fo, fc, scratch.data());
        abi::FromFloats(fb, bp + c0 * na * 4, m * 4);
        abi::FromFloats(fo, op + c0 * na, m);
        abi::FromFloats(fc, cp + c0 * na * nc, m * nc);
      }
    });
  }
};

}  // namespace core
}  // namespace bridge

#endif  // BRIDGE_OPS_YOLO_DECODE_KERNEL_H_
