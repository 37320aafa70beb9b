// YoloDecode: raw head [N,H,W,A*(5+C)] -> boxes, objectness, class probabilities,
// one grid row per task.
#include <algorithm>
#include <cmath>

#include "bridge_ort.h"
#include "cpu/fast_math.h"

namespace bridge {
namespace {

const char* kOp = "YoloDecode";

// ExpF / SigmoidF: tf_ops/cpu/fast_math.h, the same as the TensorFlow kernel uses.

struct YoloDecode : Kernel {
  std::vector<float> anchors;
  int64_t classes, stride;
  float scale;

  explicit YoloDecode(const Attrs& a)
      : anchors(a.floats("anchors")), classes(a.i("num_classes")), stride(a.i("stride")), scale(a.f("scale_x_y")) {
    if (anchors.empty() || anchors.size() % 2)
      throw OpFailure(kOp, "anchors", "needs 2*A values [w0,h0,w1,h1,...], got " + std::to_string(anchors.size()));
    for (float v : anchors)
      if (!(v > 0)) throw OpFailure(kOp, "anchors", "must all be positive, got " + std::to_string(v));
    if (classes < 1) throw OpFailure(kOp, "num_classes", "must be >= 1, got " + std::to_string(classes));
    if (stride < 1) throw OpFailure(kOp, "stride", "must be >= 1, got " + std::to_string(stride));
  }

  // Grid cells [c0, c1) (n,h,w flattened), float32 in and out; the arrays start
  // at cell `base`.
  void decode(const float* in, float* boxes, float* obj, float* cls, int64_t h, int64_t w, int64_t c0,
              int64_t c1, int64_t base) const {
    const int64_t a_count = static_cast<int64_t>(anchors.size() / 2), per = 5 + classes, ch = a_count * per;
    const float off = (scale - 1.f) / 2.f, s = static_cast<float>(stride);
    for (int64_t cell = c0; cell < c1; ++cell) {
      const float gx = static_cast<float>(cell % w), gy = static_cast<float>((cell / w) % h);
      for (int64_t a = 0; a < a_count; ++a) {
        const float* v = in + (cell - base) * ch + a * per;
        const int64_t row = (cell - base) * a_count + a;
        float* box = boxes + row * 4;
        box[0] = (scale * SigmoidF(v[0]) - off + gx) * s;
        box[1] = (scale * SigmoidF(v[1]) - off + gy) * s;
        box[2] = ExpF(v[2]) * anchors[2 * a];
        box[3] = ExpF(v[3]) * anchors[2 * a + 1];
        obj[row] = SigmoidF(v[4]);
        float* out = cls + row * classes;
#pragma omp simd
        for (int64_t c = 0; c < classes; ++c) out[c] = SigmoidF(v[5 + c]);
      }
    }
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
    const int64_t cells = n * h * w, per_task = std::max<int64_t>(1, 16384 / ch);
    const size_t tasks = static_cast<size_t>((cells + per_task - 1) / per_task);
    if (!is_half(raw)) {
      ctx.parallel_for(tasks, [&](size_t t) {
        const int64_t c0 = t * per_task, c1 = std::min(cells, c0 + per_task);
        decode(raw.as<float>(), static_cast<float*>(out[0]), static_cast<float*>(out[1]),
               static_cast<float*>(out[2]), h, w, c0, c1, 0);
      });
      return;
    }
    // float16: widen a block of cells, decode it as float32 into a scratch block, narrow.
    ctx.parallel_for(tasks, [&](size_t t) {
      const int64_t c0 = t * per_task, c1 = std::min(cells, c0 + per_task), m = c1 - c0;
      const int64_t rows = m * a_count;
      std::vector<float> buf(m * ch + rows * (5 + classes));
      float *in = buf.data(), *bx = in + m * ch, *ob = bx + rows * 4, *cl = ob + rows;
      half_to_float(raw.as<uint16_t>() + c0 * ch, in, m * ch);
      decode(in, bx, ob, cl, h, w, c0, c1, c0);
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
