// YoloConvBnLeaky on LiteRT: BatchNorm folded into the filter, then one
// convolution with the bias and LeakyReLU fused, on oneDNN through the shared
// core (bridge/kernels/conv_core.h: Winograd F(2x2,3x3) where it pays, oneDNN's
// direct convolution otherwise). The filter and parameters are the node's
// constant tensors in a TFLite file; the folded, packed filter is kept per input
// geometry and rebuilt whenever their contents differ from the kept copy.
// A build without oneDNN does not register the op (--mode lowered runs it).
#include <cmath>
#include <cstring>
#include <map>
#include <tuple>

#include "common.h"
#include "kernels/batchnorm_fold.h"
#include "spec/yolo_conv_bn_leaky.h"
#if BRIDGE_HAVE_DNNL
#include "kernels/conv_core.h"
#include "oneapi/dnnl/dnnl.hpp"
#endif

namespace bridge {
namespace litert {
namespace {

const char* kOp = "YoloConvBnLeaky";
const char* kParams[] = {"conv_bias", "bn_gamma", "bn_beta", "bn_mean", "bn_variance"};

// strides / dilations: 4 values [1,h,w,1], positive.
void check_nhwc4(const char* arg, const std::vector<int64_t>& v) {
  const char c = arg[0];
  if (v.size() != 4)
    throw OpFailure(kOp, arg, std::string("needs 4 values [1,") + c + "h," + c + "w,1], got " + dims(v));
  if (v[0] != 1 || v[3] != 1) throw OpFailure(kOp, arg, "must be 1 at N and C ([1,h,w,1]), got " + dims(v));
  if (v[1] < 1 || v[2] < 1) throw OpFailure(kOp, arg, "must be positive, got " + dims(v));
}

struct Geometry {
  int64_t n, h, w, cin, kh, kw, cout, oh, ow, sh, sw, dh, dw, pt, pl, pb, pr;
};

struct YoloConvBnLeaky : Node {
  std::vector<int64_t> strides, explicit_paddings, dilations;
  std::string padding;
  float epsilon, alpha;

  explicit YoloConvBnLeaky(const Attrs& a) {
    const spec::YoloConvBnLeaky::Attrs d;  // the spec's defaults (its rendered header)
    strides = a.ints("strides");
    padding = a.s("padding");
    explicit_paddings = a.ints("explicit_paddings", &d.explicit_paddings);
    dilations = a.ints("dilations", &d.dilations);
    epsilon = a.f("epsilon", &d.epsilon);
    alpha = a.f("alpha", &d.alpha);
    a.require_float32();
    check_nhwc4("strides", strides);
    check_nhwc4("dilations", dilations);
    if (padding != "SAME" && padding != "VALID" && padding != "EXPLICIT")
      throw OpFailure(kOp, "padding", "'" + padding + "' is not one of ['SAME', 'VALID', 'EXPLICIT']");
    if (padding == "EXPLICIT") {
      const auto& p = explicit_paddings;
      if (p.size() != 8)
        throw OpFailure(kOp, "explicit_paddings",
                        "EXPLICIT padding needs 8 values [0,0,top,bottom,left,right,0,0], got " + dims(p));
      if (p[0] || p[1] || p[6] || p[7]) throw OpFailure(kOp, "explicit_paddings", "must be 0 at N and C, got " + dims(p));
      for (int64_t v : p)
        if (v < 0) throw OpFailure(kOp, "explicit_paddings", "must be non-negative, got " + dims(p));
    } else if (!explicit_paddings.empty()) {
      throw OpFailure(kOp, "explicit_paddings", "must be empty unless padding is EXPLICIT, got " + dims(explicit_paddings));
    }
  }

  // The spec's shape rule (bridge/ops/yolo_conv_bn_leaky.py: output_size).
  Geometry geometry(const std::vector<std::vector<int64_t>>& in) const {
    const auto &x = in[0], &f = in[1];
    if (x.size() != 4) throw OpFailure(kOp, "x", "must have rank 4 [N,H,W,Cin], got " + dims(x));
    if (f.size() != 4) throw OpFailure(kOp, "filter", "must have rank 4 [KH,KW,Cin,Cout], got " + dims(f));
    if (x[3] != f[2])
      throw OpFailure(kOp, "filter", "Cin mismatch: x " + dims(x) + " has Cin=" + std::to_string(x[3]) + ", filter " +
                                         dims(f) + " has Cin=" + std::to_string(f[2]));
    for (int k = 0; k < 5; ++k)
      if (in[2 + k].size() != 1 || in[2 + k][0] != f[3])
        throw OpFailure(kOp, kParams[k], "must have shape [Cout]=[" + std::to_string(f[3]) + "] (filter " + dims(f) +
                                             "), got " + dims(in[2 + k]));
    Geometry g{x[0], x[1], x[2], x[3], f[0], f[1], f[3], 0, 0, strides[1], strides[2], dilations[1], dilations[2],
               0, 0, 0, 0};
    int64_t* out[2] = {&g.oh, &g.ow};
    int64_t* before[2] = {&g.pt, &g.pl};
    int64_t* after[2] = {&g.pb, &g.pr};
    for (int axis = 0; axis < 2; ++axis) {
      const int64_t size = x[1 + axis], k = f[axis], s = strides[1 + axis], d = dilations[1 + axis];
      const int64_t eff = (k - 1) * d + 1;
      int64_t b = 0, e = 0;
      if (padding == "SAME") {
        *out[axis] = (size + s - 1) / s;
        const int64_t total = std::max<int64_t>((*out[axis] - 1) * s + eff - size, 0);
        b = total / 2, e = total - total / 2;
      } else {
        if (padding == "EXPLICIT") b = explicit_paddings[2 + 2 * axis], e = explicit_paddings[3 + 2 * axis];
        const int64_t num = size + b + e - eff + s;
        if (num < 0)
          throw OpFailure(kOp, "x", std::string(1, "HW"[axis]) + " axis of x " + dims(x) + " with filter " + dims(f) +
                                        ": computed output size would be negative: input " + std::to_string(size) +
                                        " + padding " + std::to_string(b) + "+" + std::to_string(e) +
                                        ", effective filter " + std::to_string(eff) + ", stride " + std::to_string(s));
        *out[axis] = num / s;
      }
      *before[axis] = b, *after[axis] = e;
    }
    return g;
  }

  std::vector<std::vector<int64_t>> output_shapes(const std::vector<std::vector<int64_t>>& in) override {
    const Geometry g = geometry(in);
    return {{g.n, g.oh, g.ow, g.cout}};
  }

#if BRIDGE_HAVE_DNNL
  std::vector<float> raw;  // the filter and parameters the plans were folded from
  std::map<std::tuple<int64_t, int64_t, int64_t>, std::unique_ptr<conv_core::FoldedConvPlan>> plans;

  void run(const std::vector<View>& in, const std::vector<View>& out) override {
    std::vector<std::vector<int64_t>> shapes;
    for (const View& v : in) shapes.push_back(v.shape);
    const Geometry g = geometry(shapes);
    if (out[0].size() == 0) return;
    const int64_t kf = g.kh * g.kw * g.cin * g.cout;
    // Same contents as last time? (constant tensors: yes; compared, never assumed)
    bool same = static_cast<int64_t>(raw.size()) == kf + 5 * g.cout &&
                std::memcmp(raw.data(), in[1].data, kf * sizeof(float)) == 0;
    for (int k = 0; k < 5 && same; ++k)
      same = std::memcmp(raw.data() + kf + k * g.cout, in[2 + k].data, g.cout * sizeof(float)) == 0;
    if (!same) {
      plans.clear();
      raw.assign(in[1].as<float>(), in[1].as<float>() + kf);
      for (int k = 0; k < 5; ++k) raw.insert(raw.end(), in[2 + k].as<float>(), in[2 + k].as<float>() + g.cout);
    }
    auto key = std::make_tuple(g.n, g.h, g.w);
    auto it = plans.find(key);
    if (it == plans.end()) it = plans.emplace(key, plan(g)).first;
    conv_core::RunFoldedConv(*it->second, in[0].as<float>(), out[0].mut<float>(),
                             [](int64_t count, int64_t, auto&& fn) {
                               const int64_t tasks = 16, per = (count + tasks - 1) / tasks;
#pragma omp parallel for schedule(static)
                               for (int64_t i = 0; i < tasks; ++i) {
                                 const int64_t b = i * per, e = std::min(count, b + per);
                                 if (b < e) fn(b, e);
                               }
                             });
  }

  // The one fold (bridge/kernels/batchnorm_fold.h): W' = W * s, and the bias b'.
  std::unique_ptr<conv_core::FoldedConvPlan> plan(const Geometry& g) {
    const int64_t kf = g.kh * g.kw * g.cin * g.cout;
    const float* p[5];
    for (int k = 0; k < 5; ++k) p[k] = raw.data() + kf + k * g.cout;
    std::vector<float> w(kf), b(g.cout), s(g.cout);
    FoldBatchNorm(p, g.cout, epsilon, s.data(), b.data());
    for (int64_t i = 0; i < kf; ++i) w[i] = raw[i] * s[i % g.cout];
    const conv_core::ConvShape cs{g.n, g.h, g.w, g.cin, g.kh, g.kw, g.cout, g.oh, g.ow,
                                  g.sh, g.sw, g.dh, g.dw, g.pt, g.pl};
    std::unique_ptr<conv_core::FoldedConvPlan> result;
    try {
      result = conv_core::MakeFoldedConvPlan(cs, w.data(), b.data(), g.pb, g.pr, alpha, true);
      if (!result) result = conv_core::MakeFoldedConvPlan(cs, w.data(), b.data(), g.pb, g.pr, alpha, false);
    } catch (const dnnl::error& e) {
      throw std::runtime_error(std::string(kOp) + ": oneDNN has no convolution for x " +
                               dims({g.n, g.h, g.w, g.cin}) + ": " + e.what());
    }
    if (!result)
      throw std::runtime_error(std::string(kOp) + ": oneDNN has only a reference convolution for x " +
                               dims({g.n, g.h, g.w, g.cin}) + " on this CPU");
    return result;
  }
#else
  void run(const std::vector<View>&, const std::vector<View>&) override {}
#endif
};

std::unique_ptr<Node> create(const Attrs& a) { return std::make_unique<YoloConvBnLeaky>(a); }

const char* unavailable() {
#if BRIDGE_HAVE_DNNL
  return nullptr;
#else
  return "built without oneDNN (bridge.native.onednn_root())";
#endif
}

const OpDef kDef{kOp, 1, 7, 1, create, unavailable};
const int kRegistered = register_op(&kDef);

}  // namespace
}  // namespace litert
}  // namespace bridge
