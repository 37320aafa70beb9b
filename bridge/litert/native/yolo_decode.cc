// YoloDecode on LiteRT: blocks of grid cells through the shared decode core
// (bridge/kernels/yolo_decode.h), spread over OpenMP threads.
#include <algorithm>

#include "common.h"
#include "kernels/yolo_decode.h"

namespace bridge {
namespace litert {
namespace {

const char* kOp = "YoloDecode";

struct YoloDecode : Node {
  std::vector<float> anchors;
  int64_t classes, stride;
  float scale;

  explicit YoloDecode(const Attrs& a)
      : anchors(a.floats("anchors")), classes(a.i("num_classes")), stride(a.i("stride")) {
    const float one = 1.0f;
    scale = a.f("scale_x_y", &one);
    const auto bad = yolo_decode::CheckAttrs(anchors, classes, stride);
    if (bad.arg) throw OpFailure(kOp, bad.arg, bad.message);
    a.require_float32();
  }

  int64_t num_anchors() const { return static_cast<int64_t>(anchors.size() / 2); }

  std::vector<std::vector<int64_t>> output_shapes(const std::vector<std::vector<int64_t>>& in) override {
    const auto& raw = in[0];
    const int64_t a = num_anchors(), ch = a * (5 + classes);
    if (raw.size() != 4) throw OpFailure(kOp, "raw", "must have rank 4 [N,H,W,A*(5+C)], got " + dims(raw));
    if (raw[3] != ch)
      throw OpFailure(kOp, "raw", "last dim must be A*(5+C) = " + std::to_string(a) + "*(5+" + std::to_string(classes) +
                                      ") = " + std::to_string(ch) + ", got " + dims(raw));
    const int64_t rows = raw[1] * raw[2] * a;
    return {{raw[0], rows, 4}, {raw[0], rows}, {raw[0], rows, classes}};
  }

  void run(const std::vector<View>& in, const std::vector<View>& out) override {
    const View& raw = in[0];
    if (raw.size() == 0) return;
    const yolo_decode::Params p{anchors.data(), num_anchors(), classes, stride, scale};
    const int64_t h = raw.shape[1], w = raw.shape[2], cells = raw.shape[0] * h * w;
    const int64_t per_task = std::max<int64_t>(yolo_decode::kBlock, 16384 / p.channels());
    const int64_t tasks = (cells + per_task - 1) / per_task;
    float *boxes = out[0].mut<float>(), *obj = out[1].mut<float>(), *cls = out[2].mut<float>();
    const float* x = raw.as<float>();
#pragma omp parallel for schedule(static) if (tasks > 1)
    for (int64_t t = 0; t < tasks; ++t) {
      std::vector<float> scratch(yolo_decode::ScratchSize(p));
      const int64_t c0 = t * per_task, c1 = std::min(cells, c0 + per_task);
      yolo_decode::DecodeCells(p, x, h, w, c0, c1, 0, boxes, obj, cls, scratch.data());
    }
  }
};

std::unique_ptr<Node> create(const Attrs& a) { return std::make_unique<YoloDecode>(a); }

const OpDef kDef{kOp, 1, 1, 3, create, nullptr};
const int kRegistered = register_op(&kDef);

}  // namespace
}  // namespace litert
}  // namespace bridge
