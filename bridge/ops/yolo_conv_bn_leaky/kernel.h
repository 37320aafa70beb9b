// YoloConvBnLeaky's kernel core (the one C++ op ABI, bridge/kernels/abi.h): its
// attribute checks, shape rule and convolution, served to TensorFlow,
// onnxruntime and LiteRT by their generic hosts. One BatchNorm fold
// (bridge/kernels/batchnorm_fold.h), always applied to the output (z * s + b'),
// so the filter is read as given and a packed copy of it depends on it alone.
// Two roads, chosen per node from BRIDGE_CONV_IMPL when the host builds it:
//   onednn  (default for float32 where the library has oneDNN, e.g. PyPI's
//           onednn-devel-cpu-gomp) bridge/kernels/conv_core.h: oneDNN's
//           convolution with the fold as post-ops, the filter packed once while a
//           node's weights stay the same (BRIDGE_DNNL_WEIGHTS), Winograd
//           F(2x2,3x3) on its 3x3 stride-1 layers with Cin >= 128
//           (BRIDGE_CONV_WINOGRAD=off turns it off), on the host's threads
//           (BRIDGE_DNNL_THREADS=openmp: on oneDNN's own OpenMP team);
//   eigen   (float16, a build without oneDNN, a geometry oneDNN has no fast kernel
//           for) bridge/kernels/conv_gemm.h: im2col tiles, Eigen's GEMM, the fold
//           and LeakyReLU on the tile in cache, on the host's threads.
// BRIDGE_ORT_CONV=gemm, the onnxruntime kernel's old switch, is BRIDGE_CONV_IMPL=eigen.
#ifndef BRIDGE_OPS_YOLO_CONV_BN_LEAKY_KERNEL_H_
#define BRIDGE_OPS_YOLO_CONV_BN_LEAKY_KERNEL_H_

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/abi.h"
#include "kernels/batchnorm_fold.h"
#include "kernels/conv_gemm.h"
#include "spec/yolo_conv_bn_leaky.h"
#if BRIDGE_HAVE_DNNL
#include "kernels/conv_core.h"
#endif

namespace bridge {
namespace yolo_conv {

// Calls per road: tests check which road a node took (bridge_conv_calls below).
enum RoadIndex { kGemm, kOneDnnDirect, kOneDnnWinograd };
inline std::atomic<uint64_t> g_road_calls[3];
inline const char* const kRoads[3] = {"gemm", "onednn-direct", "onednn-winograd"};

inline std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

}  // namespace yolo_conv

namespace core {

struct YoloConvBnLeaky {
  using Spec = spec::YoloConvBnLeaky;
  static constexpr const char* const kParams[5] = {"conv_bias", "bn_gamma", "bn_beta", "bn_mean", "bn_variance"};

  // Pads are the node's own (ONNX, TF EXPLICIT / VALID) unless `same`: TF's SAME,
  // resolved from each input's size.
  struct Params {
    int64_t sh = 1, sw = 1, dh = 1, dw = 1;
    bool same = false;
    int64_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
    float epsilon = 1e-5f, alpha = 0.1f;
  };
  static constexpr int kInplaceInput = -1;
  static constexpr int kWeightsFrom = 1;  // filter and the BatchNorm vectors

  // -- attributes: the spec's check_attrs (TF, LiteRT) and _from_onnx (ONNX) ------
  static abi::Status CheckNhwc4(const char* arg, const std::vector<int64_t>& v) {
    const std::string c(1, arg[0]);
    if (v.size() != 4) return abi::Bad(arg, "needs 4 values [1," + c + "h," + c + "w,1], got " + abi::List(v));
    if (v[0] != 1 || v[3] != 1) return abi::Bad(arg, "must be 1 at N and C ([1,h,w,1]), got " + abi::List(v));
    if (v[1] < 1 || v[2] < 1) return abi::Bad(arg, "must be positive, got " + abi::List(v));
    return abi::Ok();
  }

  static abi::Status Read(const Spec::Attrs& a, Params* p) {
    if (a.padding != "SAME" && a.padding != "VALID" && a.padding != "EXPLICIT")
      return abi::Bad("padding", "'" + a.padding + "' is not one of ['SAME', 'VALID', 'EXPLICIT']");
    abi::Status s = Spec::CheckTfShapes(a, std::vector<abi::Shape>(7, abi::Shape::Unknown()));
    if (!s.ok()) return s;
    const auto& e = a.explicit_paddings;
    p->sh = a.strides[1], p->sw = a.strides[2], p->dh = a.dilations[1], p->dw = a.dilations[2];
    p->same = a.padding == "SAME";
    if (a.padding == "EXPLICIT") p->pad_top = e[2], p->pad_bottom = e[3], p->pad_left = e[4], p->pad_right = e[5];
    p->epsilon = a.epsilon, p->alpha = a.alpha;
    return abi::Ok();
  }

  static abi::Status Read(const Spec::OnnxAttrs& a, Params* p) {
    abi::Status s = Spec::CheckShapes(a, std::vector<abi::Shape>(7, abi::Shape::Unknown()));
    if (!s.ok()) return s;
    const auto& q = a.pads;
    p->sh = a.strides[0], p->sw = a.strides[1], p->dh = a.dilations[0], p->dw = a.dilations[1];
    p->same = false;
    p->pad_top = q[0], p->pad_left = q[1], p->pad_bottom = q[2], p->pad_right = q[3];
    p->epsilon = a.epsilon, p->alpha = a.alpha;
    return abi::Ok();
  }

  // -- the shape rule (the spec's _infer / shape_rule, in its words) ---------------
  // One spatial axis as tf.nn.conv2d computes it (SAME: the odd pixel at the end);
  // out -1 where the size or the filter is unknown.
  static abi::Status OutputSize(const Params& p, int axis, const abi::Shape& x, const abi::Shape& f, int64_t* out,
                                int64_t* before, int64_t* after) {
    const int64_t size = x.known ? x[1 + axis] : -1, k = f.known ? f[axis] : -1;
    const int64_t stride = axis ? p.sw : p.sh, dilation = axis ? p.dw : p.dh;
    *before = axis ? p.pad_left : p.pad_top;
    *after = axis ? p.pad_right : p.pad_bottom;
    if (size < 0 || k < 0) {
      *out = -1;
      return abi::Ok();
    }
    const int64_t eff = (k - 1) * dilation + 1;
    if (p.same) {
      *out = (size + stride - 1) / stride;
      const int64_t total = std::max<int64_t>((*out - 1) * stride + eff - size, 0);
      *before = total / 2;
      *after = total - total / 2;
      return abi::Ok();
    }
    const int64_t num = size + *before + *after - eff + stride;
    if (num < 0)
      return abi::Bad("x", std::string(axis ? "W" : "H") + " axis of x " + x.str() + " with filter " + f.str() +
                               ": computed output size would be negative: input " + std::to_string(size) +
                               " + padding " + std::to_string(*before) + "+" + std::to_string(*after) +
                               ", effective filter " + std::to_string(eff) + ", stride " + std::to_string(stride));
    *out = num / stride;
    return abi::Ok();
  }

  // The spec's one shape rule in the TF attributes (Params written back as them).
  static Spec::Attrs AsTf(const Params& p) {
    Spec::Attrs a;
    a.strides = {1, p.sh, p.sw, 1};
    a.dilations = {1, p.dh, p.dw, 1};
    a.padding = p.same ? "SAME" : "EXPLICIT";
    if (!p.same) a.explicit_paddings = {0, 0, p.pad_top, p.pad_bottom, p.pad_left, p.pad_right, 0, 0};
    return a;
  }
  static abi::Status Shapes(const Params& p, const std::vector<abi::Shape>& in, std::vector<abi::Shape>* out) {
    return Spec::CheckTfShapes(AsTf(p), in, out);
  }

  // -- per node: the road, and the oneDNN primitives and packed filter ------------
  struct State {
    bool onednn = false;  // float32 on oneDNN; else (and for float16) the eigen road
#if BRIDGE_HAVE_DNNL
    conv_core::Road road;
#endif
  };

  static abi::Status Init(const Params& p, State* st) {
    std::string impl = yolo_conv::Env("BRIDGE_CONV_IMPL");
    if (!impl.empty() && impl != "eigen" && impl != "onednn")
      return abi::Fail("BRIDGE_CONV_IMPL must be eigen or onednn, got '" + impl + "'");
    if (impl.empty() && yolo_conv::Env("BRIDGE_ORT_CONV") == "gemm") impl = "eigen";
#if BRIDGE_HAVE_DNNL
    st->onednn = impl != "eigen";
    const std::string w = yolo_conv::Env("BRIDGE_DNNL_WEIGHTS");
    if (!w.empty() && w != "cached" && w != "plain" && w != "blocked")
      return abi::Fail("BRIDGE_DNNL_WEIGHTS must be cached, plain or blocked, got '" + w + "'");
    st->road.weights = w == "plain"     ? conv_core::Weights::kPlain
                       : w == "blocked" ? conv_core::Weights::kBlocked
                                        : conv_core::Weights::kCached;
    const std::string wino = yolo_conv::Env("BRIDGE_CONV_WINOGRAD");
    if (!wino.empty() && wino != "auto" && wino != "off")
      return abi::Fail("BRIDGE_CONV_WINOGRAD must be auto or off, got '" + wino + "'");
    st->road.winograd = wino != "off";
    const std::string threads = yolo_conv::Env("BRIDGE_DNNL_THREADS");
    if (!threads.empty() && threads != "host" && threads != "openmp")
      return abi::Fail("BRIDGE_DNNL_THREADS must be host or openmp, got '" + threads + "'");
    st->road.host_threads = threads != "openmp";
    st->road.alpha = p.alpha;
#else
    (void)p, (void)st;
    if (impl == "onednn")
      return abi::Fail("BRIDGE_CONV_IMPL=onednn, but the op library was built without oneDNN (pip install "
                       "onednn-devel-cpu-gomp, then bridge build --force)");
#endif
    return abi::Ok();
  }

  static conv_gemm::Geometry Geometry(const Params& p, const abi::In& x, const abi::In& f) {
    const abi::Shape xs(x.shape), fs(f.shape);
    int64_t oh, ow, pt, pb, pl, pr;
    OutputSize(p, 0, xs, fs, &oh, &pt, &pb);  // checked by Shapes before
    OutputSize(p, 1, xs, fs, &ow, &pl, &pr);
    return {x.shape[0], x.shape[1], x.shape[2], x.shape[3], f.shape[0], f.shape[1], f.shape[3], oh, ow,
            p.sh, p.sw, p.dh, p.dw, pt, pl, pb, pr};
  }

  template <typename T>
  static void Run(const Params& p, State& st, bool same, const std::vector<abi::In>& in, const abi::Out& out,
                  const abi::ParallelFor& parallel_for) {
    const conv_gemm::Geometry g = Geometry(p, in[0], in[1]);
    if (out.size() == 0) return;
    // The fold: s and b' in float, widened first for float16.
    const int64_t cout = g.cout;
    std::vector<float> fold(7 * cout);
    float *s = fold.data(), *b = s + cout;
    const float* v[5];
    for (int i = 0; i < 5; ++i) {
      if constexpr (std::is_same_v<T, float>) {
        v[i] = in[2 + i].as<float>();
      } else {
        abi::ToFloats(in[2 + i].as<T>(), s + (2 + i) * cout, cout);
        v[i] = s + (2 + i) * cout;
      }
    }
    FoldBatchNorm(v, cout, p.epsilon, s, b);
    const T* x = in[0].as<T>();
    T* y = out.as<T>();
    const int64_t k = g.kh * g.kw * g.cin;
    if (k == 0) {  // an empty filter convolves to zero: y = leaky(b')
      std::vector<float> zero(cout, 0.0f);
      for (int64_t r = 0; r < g.n * g.oh * g.ow; ++r)
        conv_gemm::ScaleShiftLeaky(zero.data(), 0, s, b, p.alpha, 1, cout, y + r * cout, cout);
      return;
    }
#if BRIDGE_HAVE_DNNL
    if constexpr (std::is_same_v<T, float>) {
      if (st.onednn) {
        const conv_core::ConvShape cs{g.n,  g.h,  g.w,  g.cin,       g.kh,       g.kw,         g.cout,       g.oh,
                                      g.ow, g.sh, g.sw, g.dh,        g.dw,       g.pad_top,    g.pad_left,
                                      g.pad_bottom, g.pad_right};
        const conv_core::Ran ran = st.road.Run(cs, x, in[1].as<float>(), same, s, b, y, parallel_for);
        if (ran != conv_core::Ran::kNone) {
          yolo_conv::g_road_calls[ran == conv_core::Ran::kWinograd ? yolo_conv::kOneDnnWinograd
                                                                   : yolo_conv::kOneDnnDirect]
              .fetch_add(1, std::memory_order_relaxed);
          return;
        }
      }
    }
#else
    (void)st;
    (void)same;
#endif
    const float* filter;
    std::vector<float> wide;
    if constexpr (std::is_same_v<T, float>) {
      filter = in[1].as<float>();
    } else {
      wide.resize(k * cout);
      const T* src = in[1].as<T>();
      float* dst = wide.data();
      parallel_for(k, 4 * cout, [&](int64_t begin, int64_t end) {
        abi::ToFloats(src + begin * cout, dst + begin * cout, (end - begin) * cout);
      });
      filter = dst;
    }
    conv_gemm::Conv<T>(g, x, filter, s, b, p.alpha, y, parallel_for);
    yolo_conv::g_road_calls[yolo_conv::kGemm].fetch_add(1, std::memory_order_relaxed);
  }

  static void Compute(const Params& p, State& st, bool same, const std::vector<abi::In>& in,
                      const std::vector<abi::Out>& out, const abi::ParallelFor& parallel_for) {
    if (in[0].type == abi::DType::kFloat32)
      Run<float>(p, st, same, in, out[0], parallel_for);
    else
      Run<uint16_t>(p, st, same, in, out[0], parallel_for);
  }
};

}  // namespace core
}  // namespace bridge

// How many calls took `road` (gemm, onednn-direct, onednn-winograd) in this process.
extern "C" __attribute__((visibility("default"), used)) inline uint64_t bridge_conv_calls(const char* road) {
  for (int i = 0; i < 3; ++i)
    if (std::strcmp(road, bridge::yolo_conv::kRoads[i]) == 0) return bridge::yolo_conv::g_road_calls[i].load();
  return 0;
}

#endif  // BRIDGE_OPS_YOLO_CONV_BN_LEAKY_KERNEL_H_
