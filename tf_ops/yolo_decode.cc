// YoloDecode: YOLOv3 head decoding with static output shapes (contract:
// shared/ops.md; Python spec: bridge/ops/yolo_decode.py).
//
// One pass, elementwise: each grid cell's A*(5+C) channels are read once and
// written once to the three outputs, every logistic and exp in a vector loop
// (bridge/kernels/yolo_decode.h, shared with the onnxruntime kernel).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "common.h"
#include "kernels/yolo_decode.h"
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
    const int64_t na = a_.num_anchors(), nc = a_.num_classes, ch = a_.channels();
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
    const yolo_decode::Params p{a_.anchors.data(), na, nc, a_.stride, a_.scale_x_y};

    ParallelRows(ctx, n * gh * gw, 3 * ch, [=](int64_t begin, int64_t end) {
      std::vector<float> scratch(yolo_decode::ScratchSize(p));
      if constexpr (std::is_same<T, float>::value) {
        yolo_decode::DecodeCells(p, in, gh, gw, begin, end, 0, bp, op, cp, scratch.data());
      } else {  // a block of cells widened, decoded as float32, narrowed
        constexpr int64_t kBlock = yolo_decode::kBlock;
        std::vector<float> buf(kBlock * ch + kBlock * na * (5 + nc));
        float* v = buf.data();
        float* fb = v + kBlock * ch;
        float* fo = fb + kBlock * na * 4;
        float* fc = fo + kBlock * na;
        for (int64_t c0 = begin; c0 < end; c0 += kBlock) {
          const int64_t c1 = std::min(end, c0 + kBlock), m = (c1 - c0) * na;
          ToFloats(in + c0 * ch, v, (c1 - c0) * ch);
          yolo_decode::DecodeCells(p, v, gh, gw, c0, c1, c0, fb, fo, fc, scratch.data());
          FromFloats(fb, bp + c0 * na * 4, m * 4);
          FromFloats(fo, op + c0 * na, m);
          FromFloats(fc, cp + c0 * na * nc, m * nc);
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
