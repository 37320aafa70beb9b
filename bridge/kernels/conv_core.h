// The framework-free core of YoloConvBnLeaky's oneDNN road, shared by the
// TensorFlow kernel (tf_ops/yolo_conv_bn_leaky.cc) and the onnxruntime kernel
// (onnx_plugins/native/yolo_conv_bn_leaky.cc): Winograd F(2x2,3x3) -- when it
// applies, its tiling, its three transforms and the batched oneDNN matmul
// between them -- plus the oneDNN engine and the test for a fast implementation.
// Plain pointers, sizes and dnnl objects only; each kernel brings its own
// buffers and threads (ParallelFor below). Everything is inline: one header,
// included by one file per library.
//
// Winograd F(2x2,3x3) (Lavin & Gray): each 2x2 output tile comes from a 4x4
// input tile through 16 independent channel GEMMs, 16 multiplies per tile and
// channel pair instead of 36 (2.25x fewer):
//   V = B^T d B, U = G g G^T, y = A^T (V .* U summed over Cin) A, with
//   B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1], G = [1 0 0; .5 .5 .5; .5 -.5 .5; 0 0 1],
//   A^T = [1 1 1 0; 0 1 -1 -1].
// Their coefficients are 0, +-1 and +-1/2, so rounding stays at a few ulps of
// the GEMM's inputs. The GEMMs are one batched oneDNN matmul
// [16, tiles, Cin] x [16, Cin, Cout] over chunks of tiles small enough for V
// and M to stay in cache.
#ifndef BRIDGE_KERNELS_CONV_CORE_H_
#define BRIDGE_KERNELS_CONV_CORE_H_

#if BRIDGE_HAVE_DNNL
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "oneapi/dnnl/dnnl.hpp"

namespace bridge {
namespace conv_core {
// Internal linkage: the TensorFlow library exports its symbols by default, and
// each library keeps its own copy (its own engine) as before this was shared.
namespace {

// One NHWC x HWIO convolution's sizes (each kernel maps its own geometry here).
struct ConvShape {
  int64_t n, h, w, cin, kh, kw, cout, oh, ow;
  int64_t sh, sw, dh, dw, pad_top, pad_left;
};

inline dnnl::engine& DnnlEngine() {
  static dnnl::engine* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

// brgemm or jit: anything else is a reference implementation, slower than the
// kernels' own roads.
inline bool FastImpl(const std::string& impl) { return impl.rfind("brg", 0) == 0 || impl.rfind("jit", 0) == 0; }
inline bool Brgemm(const std::string& impl) { return impl.rfind("brg", 0) == 0; }

// Measured on YOLOv3's layers (2 cores, AVX-512): Cin=64 at 104x104 ran 0.75x of
// direct (too little work per transform); down to 13x13 with Cin >= 128 it still
// won (1.1-1.4x), in the whole model too, although U is 16/9 of the filter.
inline bool WinoEligible(const ConvShape& g) {
  return g.kh == 3 && g.kw == 3 && g.sh == 1 && g.sw == 1 && g.dh == 1 && g.dw == 1 && g.cin >= 128 &&
         g.cout >= 64 && g.oh * g.ow >= 100;
}

constexpr int64_t kWinoChunkBytes = 6 << 20;  // V and M of one chunk of tiles stay in cache

struct WinoPlan {
  ConvShape g;
  int64_t th = 0, tw = 0, tiles = 0, chunk = 0;  // tiles per GEMM chunk (the last one padded)
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul mm;
  dnnl::memory::desc src_md, dst_md, user_w_md;
  dnnl::reorder pack;  // U [16, Cin, Cout] -> pd.weights_desc()
};

// Null where oneDNN has no brgemm matmul for it (then Winograd is not worth it).
// Throws dnnl::error where oneDNN has no implementation at all.
inline std::unique_ptr<WinoPlan> MakeWinoPlan(const ConvShape& g) {
  using tag = dnnl::memory::format_tag;
  using dt = dnnl::memory::data_type;
  auto p = std::make_unique<WinoPlan>();
  p->g = g;
  p->th = (g.oh + 1) / 2;
  p->tw = (g.ow + 1) / 2;
  p->tiles = g.n * p->th * p->tw;
  const int64_t per_tile = 16 * (g.cin + g.cout) * 4;
  // Equal chunks: the last one is padded up to the chunk size, and padding is work.
  const int64_t chunks = std::max<int64_t>(1, (p->tiles * per_tile + kWinoChunkBytes - 1) / kWinoChunkBytes);
  p->chunk = (p->tiles + chunks - 1) / chunks;
  p->src_md = dnnl::memory::desc({16, p->chunk, g.cin}, dt::f32, tag::abc);
  p->dst_md = dnnl::memory::desc({16, p->chunk, g.cout}, dt::f32, tag::abc);
  p->user_w_md = dnnl::memory::desc({16, g.cin, g.cout}, dt::f32, tag::abc);
  dnnl::memory::desc w_any({16, g.cin, g.cout}, dt::f32, tag::any);
  p->pd = dnnl::matmul::primitive_desc(DnnlEngine(), p->src_md, w_any, p->dst_md);
  if (!Brgemm(p->pd.impl_info_str())) return nullptr;
  p->mm = dnnl::matmul(p->pd);
  p->pack = dnnl::reorder(dnnl::reorder::primitive_desc(DnnlEngine(), p->user_w_md, DnnlEngine(),
                                                        p->pd.weights_desc()));
  return p;
}

// U[k][c][o] = (G g G^T)[k] for the HWIO filter's (c, o) pairs with c in
// [c0, c1), k = 4*row + col; u holds 16 * cin * cout floats.
inline void WinoFilter(const float* f, int64_t cin, int64_t cout, int64_t c0, int64_t c1, float* u) {
  const int64_t plane = cin * cout;
  for (int64_t c = c0; c < c1; ++c) {
    const float* g = f + c * cout;  // g[(ky*3 + kx) * plane + o]
    float* dst = u + c * cout;
#pragma omp simd
    for (int64_t o = 0; o < cout; ++o) {
      float gr[3][3], r[4][3];
      for (int i = 0; i < 9; ++i) gr[i / 3][i % 3] = g[i * plane + o];
      for (int j = 0; j < 3; ++j) {
        r[0][j] = gr[0][j];
        r[1][j] = 0.5f * (gr[0][j] + gr[1][j] + gr[2][j]);
        r[2][j] = 0.5f * (gr[0][j] - gr[1][j] + gr[2][j]);
        r[3][j] = gr[2][j];
      }
      for (int i = 0; i < 4; ++i) {
        dst[(4 * i + 0) * plane + o] = r[i][0];
        dst[(4 * i + 1) * plane + o] = 0.5f * (r[i][0] + r[i][1] + r[i][2]);
        dst[(4 * i + 2) * plane + o] = 0.5f * (r[i][0] - r[i][1] + r[i][2]);
        dst[(4 * i + 3) * plane + o] = r[i][2];
      }
    }
  }
}

// V[k][t - t0][c] = (B^T d B)[k] for tiles t in [t_begin, t_end); tiles past the
// last one (padding of the final chunk) read zeros (cin floats).
inline void WinoInput(const float* x, const WinoPlan& w, int64_t t0, int64_t t_begin, int64_t t_end,
                      const float* zeros, float* v) {
  const ConvShape& g = w.g;
  const int64_t ld = w.chunk * g.cin;
  for (int64_t t = t_begin; t < t_end; ++t) {
    const float* d[4][4];
    const int64_t n = t / (w.th * w.tw), r = t % (w.th * w.tw);
    const int64_t iy0 = 2 * (r / w.tw) - g.pad_top, ix0 = 2 * (r % w.tw) - g.pad_left;
    for (int i = 0; i < 4; ++i) {
      for (int j = 0; j < 4; ++j) {
        const int64_t iy = iy0 + i, ix = ix0 + j;
        const bool inside = t < w.tiles && iy >= 0 && iy < g.h && ix >= 0 && ix < g.w;
        d[i][j] = inside ? x + ((n * g.h + iy) * g.w + ix) * g.cin : zeros;
      }
    }
    float* out = v + (t - t0) * g.cin;
#pragma omp simd
    for (int64_t c = 0; c < g.cin; ++c) {
      float b[4][4];
      for (int j = 0; j < 4; ++j) {
        const float d0 = d[0][j][c], d1 = d[1][j][c], d2 = d[2][j][c], d3 = d[3][j][c];
        b[0][j] = d0 - d2;
        b[1][j] = d1 + d2;
        b[2][j] = d2 - d1;
        b[3][j] = d1 - d3;
      }
      for (int i = 0; i < 4; ++i) {
        out[(4 * i + 0) * ld + c] = b[i][0] - b[i][2];
        out[(4 * i + 1) * ld + c] = b[i][1] + b[i][2];
        out[(4 * i + 2) * ld + c] = b[i][2] - b[i][1];
        out[(4 * i + 3) * ld + c] = b[i][1] - b[i][3];
      }
    }
  }
}

// y = leaky((A^T M A) * s + b) (kScaled) or leaky(A^T M A + b) for tiles
// [t_begin, t_end) within the real tiles. A template, not a branch per value:
// the two kernels fold BatchNorm differently (TF scales here, onnxruntime
// folded s into the filter).
template <bool kScaled>
void WinoOutputAs(const float* m, const WinoPlan& w, int64_t t0, int64_t t_begin, int64_t t_end, const float* s,
                  const float* b, float alpha, float* y) {
  const ConvShape& g = w.g;
  const int64_t ld = w.chunk * g.cout;
  for (int64_t t = t_begin; t < t_end; ++t) {
    const int64_t n = t / (w.th * w.tw), r = t % (w.th * w.tw);
    const int64_t oy = 2 * (r / w.tw), ox = 2 * (r % w.tw);
    const float* src = m + (t - t0) * g.cout;
    float* dst[2][2];
    for (int a = 0; a < 2; ++a) {
      for (int c = 0; c < 2; ++c) {
        const bool inside = oy + a < g.oh && ox + c < g.ow;
        dst[a][c] = inside ? y + ((n * g.oh + oy + a) * g.ow + ox + c) * g.cout : nullptr;
      }
    }
    float tmp[2][2][64];
    for (int64_t o0 = 0; o0 < g.cout; o0 += 64) {
      const int64_t cols = std::min<int64_t>(64, g.cout - o0);
#pragma omp simd
      for (int64_t o = 0; o < cols; ++o) {
        float mm[4][4], r0[4], r1[4];
        for (int k = 0; k < 16; ++k) mm[k / 4][k % 4] = src[k * ld + o0 + o];
        for (int j = 0; j < 4; ++j) {
          r0[j] = mm[0][j] + mm[1][j] + mm[2][j];
          r1[j] = mm[1][j] - mm[2][j] - mm[3][j];
        }
        const float z[2][2] = {{r0[0] + r0[1] + r0[2], r0[1] - r0[2] - r0[3]},
                               {r1[0] + r1[1] + r1[2], r1[1] - r1[2] - r1[3]}};
        for (int a = 0; a < 2; ++a) {
          for (int c = 0; c < 2; ++c) {
            const float v = kScaled ? z[a][c] * s[o0 + o] + b[o0 + o] : z[a][c] + b[o0 + o];
            tmp[a][c][o] = v > 0.0f ? v : v * alpha;
          }
        }
      }
      for (int a = 0; a < 2; ++a) {
        for (int c = 0; c < 2; ++c) {
          if (dst[a][c]) std::memcpy(dst[a][c] + o0, tmp[a][c], sizeof(float) * cols);
        }
      }
    }
  }
}

// The whole Winograd convolution for x -> y on the packed U (`weights`).
// v and m hold 16 * chunk * cin and 16 * chunk * cout floats, zeros cin zeros;
// s may be null (scale already in the filter). parallel(count, cost_per_item,
// fn(begin, end)) spreads [0, count) over the caller's threads.
template <typename ParallelFor>
void WinoRun(const WinoPlan& w, const dnnl::memory& weights, const float* x, const float* s, const float* b,
             float alpha, float* v, float* m, const float* zeros, float* y, ParallelFor&& parallel) {
  const ConvShape& g = w.g;
  auto& engine = DnnlEngine();
  dnnl::stream stream(engine);
  dnnl::memory src(w.src_md, engine, v), dst(w.dst_md, engine, m);
  for (int64_t t0 = 0; t0 < w.tiles; t0 += w.chunk) {
    parallel(w.chunk, 40 * g.cin,
             [&](int64_t begin, int64_t end) { WinoInput(x, w, t0, t0 + begin, t0 + end, zeros, v); });
    w.mm.execute(stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, dst}});
    stream.wait();
    parallel(std::min(w.chunk, w.tiles - t0), 60 * g.cout, [&](int64_t begin, int64_t end) {
      if (s)
        WinoOutputAs<true>(m, w, t0, t0 + begin, t0 + end, s, b, alpha, y);
      else
        WinoOutputAs<false>(m, w, t0, t0 + begin, t0 + end, s, b, alpha, y);
    });
  }
}

// -- a whole convolution on the BN-folded filter, planned once per geometry ----
// Winograd where WinoEligible and oneDNN has a brgemm matmul for it, else
// oneDNN's direct convolution with the bias and LeakyReLU fused; null where
// oneDNN has only a reference implementation (the caller's own road is faster).
// w: the folded HWIO filter, b: the folded bias; pad_bottom/pad_right complete
// ConvShape's top/left pads.
struct FoldedConvPlan {
  ConvShape g;
  float alpha = 0.1f;
  std::unique_ptr<WinoPlan> wino;  // null: `direct`
  dnnl::primitive direct;
  dnnl::memory weights, bias;
};

inline std::unique_ptr<FoldedConvPlan> MakeFoldedConvPlan(const ConvShape& g, const float* w, const float* b,
                                                          int64_t pad_bottom, int64_t pad_right, float alpha,
                                                          bool winograd) {
  using tag = dnnl::memory::format_tag;
  using dt = dnnl::memory::data_type;
  auto p = std::make_unique<FoldedConvPlan>();
  p->g = g;
  p->alpha = alpha;
  auto& engine = DnnlEngine();
  dnnl::stream st(engine);
  p->bias = dnnl::memory(dnnl::memory::desc({g.cout}, dt::f32, tag::x), engine);
  std::memcpy(p->bias.get_data_handle(), b, sizeof(float) * g.cout);
  if (winograd && WinoEligible(g)) {
    p->wino = MakeWinoPlan(g);
    if (p->wino) {
      std::unique_ptr<float[]> u(new float[16 * g.cin * g.cout]);
      WinoFilter(w, g.cin, g.cout, 0, g.cin, u.get());
      dnnl::memory user(p->wino->user_w_md, engine, u.get());
      p->weights = dnnl::memory(p->wino->pd.weights_desc(), engine);
      p->wino->pack.execute(st, user, p->weights);
      st.wait();
      return p;
    }
  }
  dnnl::memory::desc src({g.n, g.cin, g.h, g.w}, dt::f32, tag::nhwc);
  dnnl::memory::desc dst({g.n, g.cout, g.oh, g.ow}, dt::f32, tag::nhwc);
  dnnl::memory::desc user_w({g.cout, g.cin, g.kh, g.kw}, dt::f32, tag::hwio);
  dnnl::memory::desc any_w({g.cout, g.cin, g.kh, g.kw}, dt::f32, tag::any);
  dnnl::post_ops ops;
  ops.append_eltwise(dnnl::algorithm::eltwise_relu, alpha, 0.0f);  // relu with a slope: LeakyReLU
  dnnl::primitive_attr attr;
  attr.set_post_ops(ops);
  dnnl::convolution_forward::primitive_desc pd(
      engine, dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src, any_w,
      p->bias.get_desc(), dst, {g.sh, g.sw}, {g.dh - 1, g.dw - 1}, {g.pad_top, g.pad_left}, {pad_bottom, pad_right},
      attr);
  if (!FastImpl(pd.impl_info_str())) return nullptr;
  p->direct = dnnl::convolution_forward(pd);
  dnnl::memory user(user_w, engine, const_cast<float*>(w));
  p->weights = dnnl::memory(pd.weights_desc(), engine);
  dnnl::reorder(user, p->weights).execute(st, user, p->weights);
  st.wait();
  return p;
}

// y = leaky(conv(x, w) + b) on the plan; scratch for Winograd's V and M is per
// calling thread and kept. parallel: as WinoRun's.
template <typename ParallelFor>
void RunFoldedConv(const FoldedConvPlan& p, const float* x, float* y, ParallelFor&& parallel) {
  using tag = dnnl::memory::format_tag;
  using dt = dnnl::memory::data_type;
  const ConvShape& g = p.g;
  auto& engine = DnnlEngine();
  if (p.wino) {
    const WinoPlan& w = *p.wino;
    const int64_t v_size = 16 * w.chunk * g.cin, m_size = 16 * w.chunk * g.cout, need = v_size + m_size + g.cin;
    thread_local std::unique_ptr<float[]> buf;
    thread_local int64_t have = 0;
    if (need > have) {
      buf.reset(new float[need]);
      have = need;
    }
    float *v = buf.get(), *m = v + v_size, *zeros = m + m_size;
    std::memset(zeros, 0, sizeof(float) * g.cin);
    WinoRun(w, p.weights, x, nullptr, static_cast<const float*>(p.bias.get_data_handle()), p.alpha, v, m, zeros, y,
            parallel);
    return;
  }
  dnnl::memory src({{g.n, g.cin, g.h, g.w}, dt::f32, tag::nhwc}, engine, const_cast<float*>(x));
  dnnl::memory dst({{g.n, g.cout, g.oh, g.ow}, dt::f32, tag::nhwc}, engine, y);
  dnnl::stream st(engine);
  p.direct.execute(st, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, p.weights}, {DNNL_ARG_BIAS, p.bias},
                        {DNNL_ARG_DST, dst}});
  st.wait();
}

}  // namespace
}  // namespace conv_core
}  // namespace bridge

#endif  // BRIDGE_HAVE_DNNL
#endif  // BRIDGE_KERNELS_CONV_CORE_H_
