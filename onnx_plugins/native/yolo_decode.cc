// YoloDecode: raw head [N,H,W,A*(5+C)] -> boxes, objectness, class probabilities,
// a block of grid cells per task, by the math the TensorFlow kernel uses
// (bridge/kernels/yolo_decode.h).
#include <algorithm>
#include <cmath>

#include "bridge_ort.h"
#include "kernels/yolo_decode.h"

namespace bridge {
namespace {

const char* kOp = "YoloDecode";

struct YoloDecode : Kernel {
  std::vector<float> anchors;
  int64_t classes, stride;
  float scale;

  explicit YoloDecode(const Attrs& a)
      : anchors(a.floats("anchors")), classes(a.i("num_classes")), stride(a.i("stride")), scale(a.f("scale_x_y")) {
    const auto bad = yolo_decode::CheckAttrs(anchors, classes, stride);
    if (bad.arg) throw OpFailure(kOp, bad.arg, bad.message);
  }

  yolo_decode::Params params() const {
    return {anchors.data(), static_cast<int64_t>(anchors.size() / 2), classes, stride, scale};
  }

  void compute(Ctx& ctx) override {
    View raw = ctx.input(0);
    const int64_t a_count = static_cast<int64_t>(anchors.size() / 2), ch = a_count * (5 + classes);
    if (raw.shape.size() != 4) throw OpFailure(kOp, "raw", "must have rank 4 [N,H,W,A*(5+C)], got " + dims(raw.shape));
    if (raw.shape[3] != ch)
      throw OpFailure(kOp, "raw", "last dim must be A*(5+C) = " + std::to_string(a_count) + "*(5+" +
                                      std::to_string(classes) + ") = " + std::to_string(ch) + ", got " + dims(raw.shape));
    const int64_t n = raw.shape[0], h = raw.shape[1], w = raw.shape[2], rows = h * w * a_count;
    void* out[3] = {ctx.output(0, {n, rows, 4}), ctx.output(1, {n, rows}), ctx.output(2, {n, rows, classes})};
    if (raw.size() == 0) return;
    const yolo_decode::Params p = params();
    const int64_t cells = n * h * w, per_task = std::max<int64_t>(1, 16384 / ch);
    const size_t tasks = static_cast<size_t>((cells + per_task - 1) / per_task);
    if (!is_half(raw)) {
      ctx.parallel_for(tasks, [&](size_t t) {
        const int64_t c0 = t * per_task, c1 = std::min(cells, c0 + per_task);
        std::vector<float> scratch(yolo_decode::ScratchSize(p));
        yolo_decode::DecodeCells(p, raw.as<float>(), h, w, c0, c1, 0, static_cast<float*>(out[0]),
                                 static_cast<float*>(out[1]), static_cast<float*>(out[2]), scratch.data());
      });
      return;
    }
    // float16: widen a block of cells, decode it as float32 into a scratch block, narrow.
    ctx.parallel_for(tasks, [&](size_t t) {
      const int64_t c0 = t * per_task, c1 = std::min(cells, c0 + per_task), m = c1 - c0;
      const int64_t rows = m * a_count;
      std::vector<float> buf(m * ch + rows * (5 + classes) + yolo_decode::ScratchSize(p));
      float *in = buf.data(), *bx = in + m * ch, *ob = bx + rows * 4, *cl = ob + rows, *scratch = cl + rows * classes;
      half_to_float(raw.as<uint16_t>() + c0 * ch, in, m * ch);
      yolo_decode::DecodeCells(p, in, h, w, c0, c1, c0, bx, ob, cl, scratch);
      float_to_half(bx, static_cast<uint16_t*>(out[0]) + c0 * a_count * 4, rows * 4);
      float_to_half(ob, static_cast<uint16_t*>(out[1]) + c0 * a_count, rows);
      float_to_half(cl, static_cast<uint16_t*>(out[2]) + c0 * a_count * classes, rows * classes);
    });
  }
};

Kernel* create(const Attrs& a, const OrtKernelInfo*) { return new YoloDecode(a); }

const OpDef kDef{kOp,
                 {"raw"},
                 {"boxes", "objectness", "class_probs"},
                 {{"anchors", "list(float)", nullptr},
                  {"num_classes", "int", nullptr},
                  {"stride", "int", nullptr},
                  {"scale_x_y", "float", "1.0"}},
                 create};
const int kRegistered = register_op(&kDef);

}  // namespace
}  // namespace bridge
