// YoloDecode: YOLOv3 head decoding with static output shapes (contract:
// shared/ops.md; Python spec: bridge/ops/yolo_decode.py).
//
// One pass, elementwise: each grid cell's A*(5+C) channels are read once and
// written once to the three outputs, every logistic and exp in a vector loop.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "common.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/util/overflow.h"

namespace bridge {
namespace {

using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;
using tensorflow::shape_inference::DimensionHandle;
using tensorflow::shape_inference::InferenceContext;
using tensorflow::shape_inference::ShapeHandle;

constexpr char kOp[] = "YoloDecode";

struct Attrs {
  std::vector<float> anchors;
  int64_t num_classes = 0;
  int64_t stride = 0;
  float scale_x_y = 1.0f;

  int64_t num_anchors() const { return static_cast<int64_t>(anchors.size()) / 2; }
  int64_t per_anchor() const { return 5 + num_classes; }
  int64_t channels() const { return num_anchors() * per_anchor(); }
};

// Python's repr of a float list, as bridge.ops prints it in the same error.
std::string FloatList(const std::vector<float>& v) {
  std::vector<std::string> parts;
  for (float f : v) parts.push_back(absl::StrCat(f));
  return absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
}

template <typename Source>
absl::Status ReadAttrs(const Source& src, Attrs* a) {
  if (auto s = src.GetAttr("anchors", &a->anchors); !s.ok()) return s;
  if (auto s = src.GetAttr("num_classes", &a->num_classes); !s.ok()) return s;
  if (auto s = src.GetAttr("stride", &a->stride); !s.ok()) return s;
  if (auto s = src.GetAttr("scale_x_y", &a->scale_x_y); !s.ok()) return s;
  if (a->anchors.empty() || a->anchors.size() % 2) {
    return ArgError(kOp, "anchors", absl::StrCat("needs 2*A values [w0,h0,w1,h1,...], got ", a->anchors.size()));
  }
  for (float v : a->anchors) {
    if (!(v > 0.0f)) {  // NaN fails too
      return ArgError(kOp, "anchors", absl::StrCat("must all be positive, got ", v, " in ", FloatList(a->anchors)));
    }
  }
  if (a->num_classes < 1) return ArgError(kOp, "num_classes", absl::StrCat("must be >= 1, got ", a->num_classes));
  if (a->stride < 1) return ArgError(kOp, "stride", absl::StrCat("must be >= 1, got ", a->stride));
  // A*(5+C) must itself be a valid dimension (int64) before anything multiplies it.
  if (tensorflow::MultiplyWithoutOverflow(a->num_anchors(), tensorflow::AddWithoutOverflow(a->num_classes, 5)) < 0) {
    return ArgError(kOp, "num_classes", absl::StrCat("A*(5+C) = ", a->num_anchors(), "*(5+", a->num_classes,
                                                     ") overflows a tensor dimension"));
  }
  return absl::OkStatus();
}

std::string ChannelRule(const Attrs& a) {
  return absl::StrCat("last dim must be A*(5+C) = ", a.num_anchors(), "*(5+", a.num_classes, ") = ", a.channels());
}

absl::Status ShapeFn(InferenceContext* c) {
  Attrs a;
  if (auto s = ReadAttrs(*c, &a); !s.ok()) return s;
  ShapeHandle raw = c->input(0);
  DimensionHandle n = c->UnknownDim(), rows = c->UnknownDim();
  if (c->RankKnown(raw)) {
    if (c->Rank(raw) != 4) {
      return ArgError(kOp, "raw", absl::StrCat("must have rank 4 [N,H,W,A*(5+C)], got ", Dims(c, raw)));
    }
    DimensionHandle ch = c->Dim(raw, 3);
    if (c->ValueKnown(ch) && c->Value(ch) != a.channels()) {
      return ArgError(kOp, "raw", absl::StrCat(ChannelRule(a), ", got ", Dims(c, raw)));
    }
    n = c->Dim(raw, 0);
    DimensionHandle h = c->Dim(raw, 1), w = c->Dim(raw, 2);
    if (c->ValueKnown(h) && c->ValueKnown(w)) {
      int64_t r = tensorflow::MultiplyWithoutOverflow(
          tensorflow::MultiplyWithoutOverflow(c->Value(h), c->Value(w)), a.num_anchors());
      if (r < 0) {
        return ArgError(kOp, "raw", absl::StrCat("H*W*A overflows a tensor dimension, got ", Dims(c, raw)));
      }
      rows = c->MakeDim(r);
    }
  }
  c->set_output(0, c->MakeShape({n, rows, c->MakeDim(4)}));
  c->set_output(1, c->MakeShape({n, rows}));
  c->set_output(2, c->MakeShape({n, rows, c->MakeDim(a.num_classes)}));
  return absl::OkStatus();
}

template <typename T>
class YoloDecodeOp : public OpKernel {
 public:
  explicit YoloDecodeOp(OpKernelConstruction* ctx) : OpKernel(ctx) { OP_REQUIRES_OK(ctx, ReadAttrs(*ctx, &a_)); }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& raw = ctx->input(0);
    OP_REQUIRES(ctx, raw.dims() == 4,
                ArgError(kOp, "raw", absl::StrCat("must have rank 4 [N,H,W,A*(5+C)], got ", Dims(raw.shape()))));
    OP_REQUIRES(ctx, raw.dim_size(3) == a_.channels(),
                ArgError(kOp, "raw", absl::StrCat(ChannelRule(a_), ", got ", Dims(raw.shape()))));
    const int64_t n = raw.dim_size(0), gh = raw.dim_size(1), gw = raw.dim_size(2);
    const int64_t na = a_.num_anchors(), nc = a_.num_classes, per = a_.per_anchor(), ch = a_.channels();
    const int64_t rows = gh * gw * na;
    Tensor *boxes = nullptr, *obj = nullptr, *cls = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({n, rows, 4}), &boxes));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({n, rows}), &obj));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({n, rows, nc}), &cls));
    if (raw.NumElements() == 0) return;

    const T* in = raw.flat<T>().data();
    T* bp = boxes->flat<T>().data();
    T* op = obj->flat<T>().data();
    T* cp = cls->flat<T>().data();
    const float* anchors = a_.anchors.data();
    const float stride = static_cast<float>(a_.stride), sxy = a_.scale_x_y, off = (a_.scale_x_y - 1.0f) * 0.5f;

    ParallelRows(ctx, n * gh * gw, 3 * ch, [=](int64_t begin, int64_t end) {
      // Cells go in blocks; each block's five box channels per anchor are first
      // gathered into columns so that their logistic and exp run as vector loops,
      // as the class channels do in place.
      constexpr int64_t kBlock = 16;
      const int64_t cap = kBlock * na;
      std::vector<float> buf((std::is_same<T, float>::value ? 0 : kBlock * ch + nc) + 5 * cap);
      float* tx = buf.data();
      float* ty = tx + cap;
      float* tw = ty + cap;
      float* th = tw + cap;
      float* to = th + cap;
      float* v = to + cap;  // half only: the block's channels, then one anchor's class probabilities
      float* probs = v + kBlock * ch;
      for (int64_t c0 = begin; c0 < end; c0 += kBlock) {
        const int64_t m = std::min(kBlock, end - c0) * na;  // (cell, anchor) pairs in this block
        const float* x;
        if constexpr (std::is_same<T, float>::value) {
          x = in + c0 * ch;
        } else {
          ToFloats(in + c0 * ch, v, m * per);
          x = v;
        }
        for (int64_t i = 0; i < m; ++i) {  // pair i's channels start at i * per
          const float* xa = x + i * per;
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
          const int64_t row = c0 * na + i, cell = c0 + i / na, a = i % na;
          const float gx = static_cast<float>(cell % gw), gy = static_cast<float>((cell / gw) % gh);
          float box[4] = {(sxy * tx[i] - off + gx) * stride, (sxy * ty[i] - off + gy) * stride,
                          tw[i] * anchors[2 * a], th[i] * anchors[2 * a + 1]};
          const float* logits = x + i * per + 5;
          if constexpr (std::is_same<T, float>::value) {
            float* b = bp + row * 4;
            b[0] = box[0], b[1] = box[1], b[2] = box[2], b[3] = box[3];
            op[row] = to[i];
            float* out = cp + row * nc;
#pragma omp simd
            for (int64_t k = 0; k < nc; ++k) out[k] = SigmoidF(logits[k]);
          } else {
            FromFloats(box, bp + row * 4, 4);
            op[row] = static_cast<T>(to[i]);
#pragma omp simd
            for (int64_t k = 0; k < nc; ++k) probs[k] = SigmoidF(logits[k]);
            FromFloats(probs, cp + row * nc, nc);
          }
        }
      }
    });
  }

 private:
  Attrs a_;
};

}  // namespace
}  // namespace bridge

REGISTER_OP("YoloDecode")
    .Input("raw: T")
    .Output("boxes: T")
    .Output("objectness: T")
    .Output("class_probs: T")
    .Attr("anchors: list(float)")
    .Attr("num_classes: int")
    .Attr("stride: int")
    .Attr("scale_x_y: float = 1.0")
    .Attr("T: {float, half}")
    .SetShapeFn(bridge::ShapeFn)
    .Doc("YOLOv3 head decoding: raw [N,H,W,A*(5+C)] to boxes [N,H*W*A,4] (x, y, w, h in input pixels), "
         "objectness [N,H*W*A] and class probabilities [N,H*W*A,C].");

REGISTER_KERNEL_BUILDER(Name("YoloDecode").Device(tensorflow::DEVICE_CPU).TypeConstraint<float>("T"),
                        bridge::YoloDecodeOp<float>);
REGISTER_KERNEL_BUILDER(Name("YoloDecode").Device(tensorflow::DEVICE_CPU).TypeConstraint<Eigen::half>("T"),
                        bridge::YoloDecodeOp<Eigen::half>);
