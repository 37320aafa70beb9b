// YoloConvBnLeaky: NHWC convolution with inference BatchNorm folded into the
// weights, then LeakyReLU, as one GEMM: rows are output pixels, K is
// KH*KW*Cin (HWIO filters are already [K, Cout]), columns are output channels.
//
// The folded weights are packed into 32-column panels; when every parameter is
// a constant initializer this happens once, when the kernel is created
// (onnxruntime's own Conv prepacks its weights the same way). Rows are built by
// im2col in blocks of MC x KC that stay in L2 (a 1x1 stride-1 convolution reads
// x directly), and an MR x 32 register tile accumulates, bias first and
// LeakyReLU on the last K block, straight into the NHWC output.
//
// Where the library is built with oneDNN (bridge.native.onednn_root()) and the
// parameters are constant, float32 runs on oneDNN instead, on the folded filter
// packed once per input geometry: 3x3 stride-1 layers with Cin >= 128 as
// Winograd F(2x2,3x3) (16 batched GEMMs on the transformed filter, 2.25x fewer
// multiplies), the others as oneDNN's direct convolution on its blocked weights
// with bias and LeakyReLU fused. Whole YOLOv3-416 on 2 threads: the GEMM road
// was 0.88x of onnxruntime's own NCHWc convolutions (benchmarks/onnx_models.py).
// oneDNN (the PyPI build) runs on OpenMP threads, and so do the Winograd
// transforms; onnxruntime's intra-op threads spinning after their own work take
// the same cores (2x slower on 2 cores), so bridge.onnx_plugins.session() turns
// that spinning off when this kernel runs on oneDNN.
// BRIDGE_ORT_CONV=gemm keeps the GEMM road; BRIDGE_CONV_WINOGRAD=off turns
// Winograd off (both read when the kernel is created).
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

#include "bridge_ort.h"
#include "kernels/batchnorm_fold.h"
#include "spec/yolo_conv_bn_leaky.h"

#if BRIDGE_HAVE_DNNL
#include "kernels/conv_core.h"
#include "oneapi/dnnl/dnnl.hpp"
#endif

namespace bridge {
namespace {

const char* kOp = spec::YoloConvBnLeaky::kName;
const char* kParams[] = {"conv_bias", "bn_gamma", "bn_beta", "bn_mean", "bn_variance"};

typedef float v16 __attribute__((vector_size(64)));
constexpr int NR = 32;       // columns per panel: two 16-float vectors
constexpr int MR = 8;        // rows per register tile (16 accumulators)
constexpr int64_t KC = 256;  // K block: one panel block (32 KB) stays in L1
constexpr int64_t MC = 64;   // rows per task: the A block (64 KB) stays in L2
constexpr int64_t MC_SMALL = 256;  // up to this many rows, one row block: the weights stream once

struct AlignedFree {
  void operator()(float* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<float[], AlignedFree>;

Buffer aligned(int64_t n) {
  void* p = std::aligned_alloc(64, static_cast<size_t>(((std::max<int64_t>(n, 1) * 4 + 63) / 64) * 64));
  if (!p) throw std::bad_alloc();
  return Buffer(static_cast<float*>(p));
}

struct Packed {
  int64_t k = 0, cout = 0, panels = 0;
  Buffer w, bias;  // w: [panels][k][NR]; bias: [panels*NR]
};

// BatchNorm folded into the weights by the one fold (bridge/kernels/batchnorm_fold.h):
// W' = W*s, and the bias b'. The fold on its own: w [k, cout] (HWIO flattened) and bias [cout].
void fold(const float* filt, const float* const* p, int64_t k, int64_t cout, float eps, std::vector<float>* w,
          std::vector<float>* bias) {
  std::vector<float> s(cout);
  bias->assign(cout, 0.f);
  FoldBatchNorm(p, cout, eps, s.data(), bias->data());
  w->resize(k * cout);
  for (int64_t kk = 0; kk < k; ++kk)
    for (int64_t o = 0; o < cout; ++o) (*w)[kk * cout + o] = filt[kk * cout + o] * s[o];
}

// Folded weights w [k, cout] and bias into 32-column panels.
Packed pack(const float* w, const float* bias, int64_t k, int64_t cout) {
  Packed out;
  out.k = k;
  out.cout = cout;
  out.panels = (cout + NR - 1) / NR;
  out.w = aligned(out.panels * k * NR);
  out.bias = aligned(out.panels * NR);
  for (int64_t o = 0; o < out.panels * NR; ++o) out.bias[o] = o < cout ? bias[o] : 0.f;
  for (int64_t pn = 0; pn < out.panels; ++pn) {
    const int64_t o0 = pn * NR, n = std::min<int64_t>(NR, cout - o0);
    for (int64_t kk = 0; kk < k; ++kk) {
      float* dst = out.w.get() + (pn * k + kk) * NR;
      const float* src = w + kk * cout + o0;
      int64_t j = 0;
      for (; j < n; ++j) dst[j] = src[j];
      for (; j < NR; ++j) dst[j] = 0.f;
    }
  }
  return out;
}

Packed fold_pack(const float* filt, const float* const* p, int64_t k, int64_t cout, float eps) {
  std::vector<float> w, bias;
  fold(filt, p, k, cout, eps, &w, &bias);
  return pack(w.data(), bias.data(), k, cout);
}

inline v16 loadu(const float* p) {
  v16 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void storeu(float* p, v16 v) { std::memcpy(p, &v, sizeof v); }

// C[rows, ncols] (+)= A[rows, kc] * B[kc, NR]; bias != nullptr starts the sum
// from the bias instead of C; `last` applies LeakyReLU.
template <int R>
void tile(const float* a, int64_t lda, const float* b, int64_t kc, float* c, int64_t ldc, int ncols,
          const float* bias, bool last, float alpha) {
  v16 c0[R], c1[R];
  float tmp[NR];
  for (int r = 0; r < R; ++r) {
    if (bias) {
      c0[r] = loadu(bias);
      c1[r] = loadu(bias + 16);
    } else if (ncols == NR) {
      c0[r] = loadu(c + r * ldc);
      c1[r] = loadu(c + r * ldc + 16);
    } else {
      std::memcpy(tmp, c + r * ldc, ncols * sizeof(float));
      c0[r] = loadu(tmp);
      c1[r] = loadu(tmp + 16);
    }
  }
  for (int64_t k = 0; k < kc; ++k) {
    const v16 b0 = *reinterpret_cast<const v16*>(b + k * NR);
    const v16 b1 = *reinterpret_cast<const v16*>(b + k * NR + 16);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const float av = a[r * lda + k];
      c0[r] += av * b0;
      c1[r] += av * b1;
    }
  }
  for (int r = 0; r < R; ++r) {
    if (last) {
      c0[r] = c0[r] > 0 ? c0[r] : c0[r] * alpha;
      c1[r] = c1[r] > 0 ? c1[r] : c1[r] * alpha;
    }
    if (ncols == NR) {
      storeu(c + r * ldc, c0[r]);
      storeu(c + r * ldc + 16, c1[r]);
    } else {
      storeu(tmp, c0[r]);
      storeu(tmp + 16, c1[r]);
      std::memcpy(c + r * ldc, tmp, ncols * sizeof(float));
    }
  }
}

using TileFn = void (*)(const float*, int64_t, const float*, int64_t, float*, int64_t, int, const float*, bool, float);
const TileFn kTiles[MR + 1] = {nullptr, tile<1>, tile<2>, tile<3>, tile<4>, tile<5>, tile<6>, tile<7>, tile<8>};

struct Geometry {
  int64_t n, h, w, cin, kh, kw, oh, ow, cout;
  int64_t sh, sw, dh, dw, pt, pl;
  bool direct() const { return kh == 1 && kw == 1 && sh == 1 && sw == 1 && pt == 0 && pl == 0 && oh == h && ow == w; }
};

// Rows [m0, m0+rows) of the im2col matrix, columns [k0, k0+kc), into buf[rows][kc].
void im2col(const float* x, const Geometry& g, int64_t m0, int64_t rows, int64_t k0, int64_t kc, float* buf) {
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t m = m0 + r, ow = m % g.ow, t = m / g.ow, oh = t % g.oh, n = t / g.oh;
    float* dst = buf + r * kc;
    for (int64_t k = k0; k < k0 + kc;) {
      const int64_t kk = k / g.cin, ci = k % g.cin, fy = kk / g.kw, fx = kk % g.kw;
      const int64_t len = std::min(g.cin - ci, k0 + kc - k);
      const int64_t iy = oh * g.sh - g.pt + fy * g.dh, ix = ow * g.sw - g.pl + fx * g.dw;
      if (iy >= 0 && iy < g.h && ix >= 0 && ix < g.w)
        std::memcpy(dst + (k - k0), x + ((n * g.h + iy) * g.w + ix) * g.cin + ci, len * sizeof(float));
      else
        std::memset(dst + (k - k0), 0, len * sizeof(float));
      k += len;
    }
  }
}

void conv_gemm(Ctx& ctx, const float* x, const Geometry& g, const Packed& p, float alpha, float* y) {
  const int64_t m = g.n * g.oh * g.ow, k = p.k;
  if (m == 0 || g.cout == 0) return;
  // A small image (13x13) is one row block split by output channels only, so
  // the (large) packed weights are read once rather than once per row block.
  const int64_t mc_rows = m <= MC_SMALL ? (m + MR - 1) / MR * MR : MC;
  const int64_t mchunks = (m + mc_rows - 1) / mc_rows;
  // Enough tasks for the thread pool even when the image is small (13x13): split
  // the output channels too.
  const int64_t groups = std::min<int64_t>(p.panels, std::max<int64_t>(1, (16 + mchunks - 1) / mchunks));
  const int64_t per_group = (p.panels + groups - 1) / groups;
  const bool direct = g.direct();
  ctx.parallel_for(static_cast<size_t>(mchunks * groups), [&](size_t task) {
    const int64_t mc = static_cast<int64_t>(task) / groups, grp = static_cast<int64_t>(task) % groups;
    const int64_t m0 = mc * mc_rows, rows = std::min(mc_rows, m - m0);
    const int64_t p0 = grp * per_group, p1 = std::min(p.panels, p0 + per_group);
    if (p0 >= p1) return;
    Buffer buf = direct ? Buffer() : aligned(rows * KC);
    int64_t k0 = 0;
    do {
      const int64_t kc = std::min(KC, k - k0);
      const float* a;
      int64_t lda;
      if (direct) {
        a = x + m0 * g.cin + k0;
        lda = g.cin;
      } else {
        im2col(x, g, m0, rows, k0, kc, buf.get());
        a = buf.get();
        lda = kc;
      }
      const bool last = k0 + kc >= k;
      for (int64_t pn = p0; pn < p1; ++pn) {
        const float* b = p.w.get() + (pn * k + k0) * NR;
        const int ncols = static_cast<int>(std::min<int64_t>(NR, g.cout - pn * NR));
        const float* bias = k0 == 0 ? p.bias.get() + pn * NR : nullptr;
        for (int64_t r = 0; r < rows; r += MR) {
          const int rr = static_cast<int>(std::min<int64_t>(MR, rows - r));
          kTiles[rr](a + r * lda, lda, b, kc, y + (m0 + r) * g.cout + pn * NR, g.cout, ncols, bias, last, alpha);
        }
      }
      k0 += kc;
    } while (k0 < k);
  });
}

#if BRIDGE_HAVE_DNNL
// -- oneDNN -------------------------------------------------------------------------
// The engine, Winograd F(2x2,3x3) and the fast-implementation test:
// bridge/kernels/conv_core.h, shared with the TensorFlow kernel.
using conv_core::DnnlEngine;

conv_core::ConvShape shape(const Geometry& g) {
  return {g.n, g.h, g.w, g.cin, g.kh, g.kw, g.cout, g.oh, g.ow, g.sh, g.sw, g.dh, g.dw, g.pt, g.pl};
}

// One input geometry's primitives and packed weights.
struct DnnlPlan {
  Geometry g;
  std::unique_ptr<conv_core::WinoPlan> wino;  // null: oneDNN's direct convolution (prim)
  dnnl::primitive prim;
  dnnl::memory weights, bias;
};

// Winograd on U = G g G^T of the folded filter, made once.
std::unique_ptr<DnnlPlan> wino_plan(const Geometry& g, const std::vector<float>& w) {
  auto p = std::make_unique<DnnlPlan>();
  p->g = g;
  p->wino = conv_core::MakeWinoPlan(shape(g));
  if (!p->wino) return nullptr;  // no fast GEMM: direct instead
  std::vector<float> u(16 * g.cin * g.cout);
  conv_core::WinoFilter(w.data(), g.cin, g.cout, 0, g.cin, u.data());
  dnnl::memory user(p->wino->user_w_md, DnnlEngine(), u.data());
  p->weights = dnnl::memory(p->wino->pd.weights_desc(), DnnlEngine());
  dnnl::stream st(DnnlEngine());
  p->wino->pack.execute(st, user, p->weights);
  st.wait();
  return p;
}

std::unique_ptr<DnnlPlan> direct_plan(const Geometry& g, const std::vector<float>& w, const std::vector<float>& b,
                                      int64_t pb, int64_t pr, float alpha) {
  using tag = dnnl::memory::format_tag;
  using dt = dnnl::memory::data_type;
  auto p = std::make_unique<DnnlPlan>();
  p->g = g;
  dnnl::memory::desc src({g.n, g.cin, g.h, g.w}, dt::f32, tag::nhwc);
  dnnl::memory::desc dst({g.n, g.cout, g.oh, g.ow}, dt::f32, tag::nhwc);
  dnnl::memory::desc user_w({g.cout, g.cin, g.kh, g.kw}, dt::f32, tag::hwio);
  dnnl::memory::desc any_w({g.cout, g.cin, g.kh, g.kw}, dt::f32, tag::any);
  dnnl::memory::desc bias_md({g.cout}, dt::f32, tag::x);
  dnnl::post_ops ops;
  ops.append_eltwise(dnnl::algorithm::eltwise_relu, alpha, 0.0f);  // relu with a slope is LeakyReLU
  dnnl::primitive_attr attr;
  attr.set_post_ops(ops);
  dnnl::convolution_forward::primitive_desc pd(
      DnnlEngine(), dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src, any_w, bias_md, dst,
      {g.sh, g.sw}, {g.dh - 1, g.dw - 1}, {g.pt, g.pl}, {pb, pr}, attr);
  // a reference implementation: the GEMM road is faster
  if (!conv_core::FastImpl(pd.impl_info_str())) return nullptr;
  p->prim = dnnl::convolution_forward(pd);
  dnnl::memory user(user_w, DnnlEngine(), const_cast<float*>(w.data()));
  p->weights = dnnl::memory(pd.weights_desc(), DnnlEngine());
  p->bias = dnnl::memory(bias_md, DnnlEngine());
  std::memcpy(p->bias.get_data_handle(), b.data(), b.size() * sizeof(float));
  dnnl::stream st(DnnlEngine());
  dnnl::reorder(user, p->weights).execute(st, user, p->weights);
  st.wait();
  return p;
}

// Scratch for V and M, per calling thread (onnxruntime runs one node at a time
// on a thread), kept between calls.
float* scratch(int64_t floats) {
  thread_local Buffer buf;
  thread_local int64_t have = 0;
  if (floats > have) {
    buf = aligned(floats);
    have = floats;
  }
  return buf.get();
}

// The transforms run on OpenMP threads, as oneDNN's own (see the top of this file).
void run_wino(const DnnlPlan& p, const float* x, const float* bias, float alpha, float* y) {
  const Geometry& g = p.g;
  const conv_core::WinoPlan& w = *p.wino;
  const int64_t v_size = 16 * w.chunk * g.cin, m_size = 16 * w.chunk * g.cout;
  float* v = scratch(v_size + m_size + g.cin);
  float* m = v + v_size;
  float* zeros = m + m_size;
  std::memset(zeros, 0, g.cin * sizeof(float));
  conv_core::WinoRun(w, p.weights, x, nullptr, bias, alpha, v, m, zeros, y, [](int64_t count, int64_t, auto&& fn) {
    const int64_t tasks = 16, per = (count + tasks - 1) / tasks;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < tasks; ++i) {
      const int64_t b = i * per, e = std::min(count, b + per);
      if (b < e) fn(b, e);
    }
  });
}

void run_direct(const DnnlPlan& p, const float* x, float* y) {
  const Geometry& g = p.g;
  using tag = dnnl::memory::format_tag;
  using dt = dnnl::memory::data_type;
  dnnl::memory src({{g.n, g.cin, g.h, g.w}, dt::f32, tag::nhwc}, DnnlEngine(), const_cast<float*>(x));
  dnnl::memory dst({{g.n, g.cout, g.oh, g.ow}, dt::f32, tag::nhwc}, DnnlEngine(), y);
  dnnl::stream st(DnnlEngine());
  p.prim.execute(st, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, p.weights}, {DNNL_ARG_BIAS, p.bias},
                      {DNNL_ARG_DST, dst}});
  st.wait();
}

bool env_is(const char* name, const char* value) {
  const char* v = std::getenv(name);
  return v && std::string(v) == value;
}

// The folded constant filter and its plans, one per input geometry.
struct DnnlRoad {
  std::vector<float> w, bias;
  int64_t pb = 0, pr = 0;
  float alpha = 0.1f;
  bool winograd = true;
  std::mutex mu;
  std::map<std::tuple<int64_t, int64_t, int64_t>, std::shared_ptr<DnnlPlan>> plans;  // null: no oneDNN road

  std::shared_ptr<DnnlPlan> plan(const Geometry& g) {
    std::lock_guard<std::mutex> lock(mu);
    auto key = std::make_tuple(g.n, g.h, g.w);
    auto it = plans.find(key);
    if (it != plans.end()) return it->second;
    std::shared_ptr<DnnlPlan> p;
    try {
      if (winograd && conv_core::WinoEligible(shape(g))) p = wino_plan(g, w);
      if (!p) p = direct_plan(g, w, bias, pb, pr, alpha);
    } catch (const dnnl::error&) {
      p = nullptr;  // no oneDNN implementation for this geometry: the GEMM road serves it
    }
    plans[key] = p;
    return p;
  }

  bool run(const Geometry& g, const float* x, float* y);
};
#endif  // BRIDGE_HAVE_DNNL

// Calls per road ("gemm", "onednn-direct", "onednn-winograd"): tests check
// which road a session took through bridge_ort_conv_calls().
std::atomic<uint64_t> g_road_calls[3];
const char* const kRoads[3] = {"gemm", "onednn-direct", "onednn-winograd"};

#if BRIDGE_HAVE_DNNL
bool DnnlRoad::run(const Geometry& g, const float* x, float* y) {
  std::shared_ptr<DnnlPlan> p = plan(g);
  if (!p) return false;
  if (p->wino)
    run_wino(*p, x, bias.data(), alpha, y);
  else
    run_direct(*p, x, y);
  g_road_calls[p->wino ? 2 : 1].fetch_add(1, std::memory_order_relaxed);
  return true;
}
#endif

std::vector<float> to_float(const View& v) {
  std::vector<float> out(v.size());
  if (is_half(v))
    half_to_float(v.as<uint16_t>(), out.data(), v.size());
  else if (v.size())
    std::memcpy(out.data(), v.data, v.size() * sizeof(float));
  return out;
}

extern const OpDef kDef;

struct YoloConvBnLeaky : Kernel {
  int64_t sh, sw, dh, dw, pt, pl, pb, pr;
  float eps, alpha;
  std::unique_ptr<Packed> constant;  // folded at creation when all parameters are initializers
  std::vector<int64_t> constant_filter_shape;
#if BRIDGE_HAVE_DNNL
  std::unique_ptr<DnnlRoad> onednn;  // float32 constant parameters, unless BRIDGE_ORT_CONV=gemm
  std::once_flag pack_once;
#endif

  YoloConvBnLeaky(const Attrs& a, const OrtKernelInfo* info) {
    auto strides = a.ints("strides"), dil = a.ints("dilations"), pads = a.ints("pads");
    if (strides.size() != 2 || strides[0] < 1 || strides[1] < 1)
      throw OpFailure(kOp, "strides", "needs 2 positive values [sh,sw], got " + dims(strides));
    if (dil.size() != 2 || dil[0] < 1 || dil[1] < 1)
      throw OpFailure(kOp, "dilations", "needs 2 positive values [dh,dw], got " + dims(dil));
    if (pads.size() != 4 || pads[0] < 0 || pads[1] < 0 || pads[2] < 0 || pads[3] < 0)
      throw OpFailure(kOp, "pads", "needs 4 non-negative values [top,left,bottom,right], got " + dims(pads));
    sh = strides[0], sw = strides[1], dh = dil[0], dw = dil[1];
    pt = pads[0], pl = pads[1], pb = pads[2], pr = pads[3];
    eps = a.f("epsilon");
    alpha = a.f("alpha");
    prepack(info);
  }

  void prepack(const OrtKernelInfo* info) {
    std::vector<View> views;
    for (size_t i = 1; i < 7; ++i) {
      int is_constant = 0;
      const OrtValue* value = nullptr;
      OrtStatus* st = g_api->KernelInfoGetConstantInput_tensor(info, i, &is_constant, &value);
      if (st) {
        g_api->ReleaseStatus(st);
        return;
      }
      if (!is_constant || !value) return;
      views.push_back(view_of(value));
    }
    const View& f = views[0];
    if (f.shape.size() != 4) return;  // compute() reports it
    const int64_t cout = f.shape[3];
    for (size_t i = 1; i < views.size(); ++i)
      if (views[i].shape.size() != 1 || views[i].shape[0] != cout) return;
    std::vector<std::vector<float>> fl;
    for (const View& v : views) fl.push_back(to_float(v));
    const float* params[5] = {fl[1].data(), fl[2].data(), fl[3].data(), fl[4].data(), fl[5].data()};
    const int64_t k = f.shape[0] * f.shape[1] * f.shape[2];
    constant_filter_shape = f.shape;
#if BRIDGE_HAVE_DNNL
    if (!is_half(f) && !env_is("BRIDGE_ORT_CONV", "gemm")) {
      onednn.reset(new DnnlRoad());
      fold(fl[0].data(), params, k, cout, eps, &onednn->w, &onednn->bias);
      onednn->pb = pb;
      onednn->pr = pr;
      onednn->alpha = alpha;
      onednn->winograd = !env_is("BRIDGE_CONV_WINOGRAD", "off");
      return;  // the GEMM's panels only if a geometry has no oneDNN road (constant_packed)
    }
#endif
    constant.reset(new Packed(fold_pack(fl[0].data(), params, k, cout, eps)));
  }

  // The constant parameters as GEMM panels, or null when they are not constant.
  const Packed* constant_packed() {
#if BRIDGE_HAVE_DNNL
    if (onednn) {
      std::call_once(pack_once, [this] {
        const int64_t cout = static_cast<int64_t>(onednn->bias.size());
        constant.reset(new Packed(pack(onednn->w.data(), onednn->bias.data(),
                                       static_cast<int64_t>(onednn->w.size()) / cout, cout)));
      });
    }
#endif
    return constant.get();
  }

  void compute(Ctx& ctx) override {
    std::vector<View> in;
    for (size_t i = 0; i < 7; ++i) in.push_back(ctx.input(i));
    check_same_type(kOp, in, kDef);
    const View &x = in[0], &f = in[1];
    if (x.shape.size() != 4) throw OpFailure(kOp, "x", "must have rank 4 [N,H,W,Cin], got " + dims(x.shape));
    if (f.shape.size() != 4) throw OpFailure(kOp, "filter", "must have rank 4 [KH,KW,Cin,Cout], got " + dims(f.shape));
    if (x.shape[3] != f.shape[2])
      throw OpFailure(kOp, "filter", "Cin mismatch: x " + dims(x.shape) + " has Cin=" + std::to_string(x.shape[3]) +
                                         ", filter " + dims(f.shape) + " has Cin=" + std::to_string(f.shape[2]));
    Geometry g{x.shape[0], x.shape[1], x.shape[2], x.shape[3], f.shape[0], f.shape[1], 0, 0, f.shape[3],
               sh, sw, dh, dw, pt, pl};
    for (int i = 0; i < 5; ++i)
      if (in[2 + i].shape.size() != 1 || in[2 + i].shape[0] != g.cout)
        throw OpFailure(kOp, kParams[i], "must have shape [Cout]=[" + std::to_string(g.cout) + "] (filter " +
                                             dims(f.shape) + "), got " + dims(in[2 + i].shape));
    g.oh = out_size('H', x, f, g.h, g.kh, sh, dh, pt, pb);
    g.ow = out_size('W', x, f, g.w, g.kw, sw, dw, pl, pr);
    const std::vector<int64_t> out_shape{g.n, g.oh, g.ow, g.cout};
    void* out = ctx.output(0, out_shape);
    if (g.n * g.oh * g.ow * g.cout == 0) return;

#if BRIDGE_HAVE_DNNL
    if (onednn && constant_filter_shape == f.shape && onednn->run(g, x.as<float>(), static_cast<float*>(out)))
      return;
#endif
    Packed folded;
    const Packed* packed = constant_packed();
    if (!packed || constant_filter_shape != f.shape) {
      std::vector<std::vector<float>> fl;
      for (size_t i = 1; i < 7; ++i) fl.push_back(to_float(in[i]));
      const float* params[5] = {fl[1].data(), fl[2].data(), fl[3].data(), fl[4].data(), fl[5].data()};
      folded = fold_pack(fl[0].data(), params, g.kh * g.kw * g.cin, g.cout, eps);
      packed = &folded;
    }
    g_road_calls[0].fetch_add(1, std::memory_order_relaxed);
    if (!is_half(x)) {
      conv_gemm(ctx, x.as<float>(), g, *packed, alpha, static_cast<float*>(out));
      return;
    }
    std::vector<float> xf = to_float(x), yf(static_cast<size_t>(g.n * g.oh * g.ow * g.cout));
    conv_gemm(ctx, xf.data(), g, *packed, alpha, yf.data());
    float_to_half(yf.data(), static_cast<uint16_t*>(out), static_cast<int64_t>(yf.size()));
  }

  static int64_t out_size(char axis, const View& x, const View& f, int64_t size, int64_t k, int64_t s, int64_t d,
                          int64_t before, int64_t after) {
    const int64_t eff = (k - 1) * d + 1, num = size + before + after - eff + s;
    if (num < 0 || k < 1)
      throw OpFailure(kOp, "x", std::string(1, axis) + " axis of x " + dims(x.shape) + " with filter " +
                                    dims(f.shape) + ": computed output size would be negative: input " +
                                    std::to_string(size) + " + padding " + std::to_string(before) + "+" +
                                    std::to_string(after) + ", effective filter " + std::to_string(eff) +
                                    ", stride " + std::to_string(s));
    return num / s;
  }
};

Kernel* create(const Attrs& a, const OrtKernelInfo* info) { return new YoloConvBnLeaky(a, info); }

using Spec = spec::YoloConvBnLeaky;  // names and attributes: the spec's rendered header
const OpDef kDef{kOp, {Spec::kInputs, Spec::kInputs + Spec::kNumInputs},
                 {Spec::kOutputs, Spec::kOutputs + Spec::kNumOutputs}, attr_defs<Spec>(), create};
const int kRegistered = register_op(&kDef);

}  // namespace
}  // namespace bridge

extern "C" __attribute__((visibility("default"))) uint64_t bridge_ort_conv_calls(const char* road) {
  for (int i = 0; i < 3; ++i)
    if (std::string(road) == bridge::kRoads[i]) return bridge::g_road_calls[i].load();
  return 0;
}
