// YoloConvBnLeaky's oneDNN road, framework-free, for every host (the kernel
// core bridge/ops/yolo_conv_bn_leaky/kernel.h): oneDNN's convolution with the
// BatchNorm fold as post-ops (z * s + b', then LeakyReLU) on the filter as given,
// its weights read in place or packed once into oneDNN's blocked layout, and
// Winograd F(2x2,3x3) -- its tiling, its three transforms and the batched oneDNN
// matmul between them -- where it applies. Plain pointers, sizes and dnnl
// objects only; threads come from the caller (ParallelFor below).
//
// Threads: by default (BRIDGE_DNNL_THREADS=host) every primitive is made and run
// with one OpenMP thread, and the work is spread over the host runtime's own pool:
// bands of output rows for the direct convolution (one geometry for all bands,
// the edge bands read a zero-padded copy of their rows), the 16 GEMMs for
// Winograd. oneDNN's own OpenMP team (BRIDGE_DNNL_THREADS=openmp, the old road)
// spins beside the runtime's threads: with one core busy elsewhere it ran 3x
// slower where onnxruntime's own convolution ran 1.6x slower (facts.md).
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
#include <atomic>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <omp.h>
#include <sched.h>

#include "oneapi/dnnl/dnnl.hpp"

namespace bridge {
namespace conv_core {
// Internal linkage: the TensorFlow library exports its symbols by default, and
// each library keeps its own copy (its own engine) as before this was shared.
namespace {

// One NHWC x HWIO convolution's sizes, pads resolved.
struct ConvShape {
  int64_t n, h, w, cin, kh, kw, cout, oh, ow;
  int64_t sh, sw, dh, dw, pad_top, pad_left, pad_bottom, pad_right;
};

inline dnnl::engine& DnnlEngine() {
  static dnnl::engine* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

// brgemm or jit: anything else is a reference implementation, slower than the
// kernels' own roads.
inline bool FastImpl(const std::string& impl) { return impl.rfind("brg", 0) == 0 || impl.rfind("jit", 0) == 0; }
inline bool Brgemm(const std::string& impl) { return impl.rfind("brg", 0) == 0; }

// While alive, oneDNN sees one OpenMP thread on this thread: primitives made then
// are single-threaded, and so are their runs (oneDNN reads the count per thread).
struct OneThread {
  int prev;
  OneThread() : prev(omp_get_max_threads()) { omp_set_num_threads(1); }
  ~OneThread() { omp_set_num_threads(prev); }
  OneThread(const OneThread&) = delete;
  OneThread& operator=(const OneThread&) = delete;
};

// While alive, this thread's OpenMP count is `count` again: a host whose pool is
// an OpenMP team (LiteRT's) sizes the team from the calling thread's count, which
// a OneThread around the call would make one.
struct ThreadCount {
  int was;
  explicit ThreadCount(int count) : was(omp_get_max_threads()) { omp_set_num_threads(count); }
  ~ThreadCount() { omp_set_num_threads(was); }
  ThreadCount(const ThreadCount&) = delete;
  ThreadCount& operator=(const ThreadCount&) = delete;
};

// A 64-byte-aligned buffer of this thread's, `Slot` naming which (the primitives'
// scratchpads, a band's padded rows): pieces run concurrently on the host's threads.
template <int Slot>
inline char* ThreadBuffer(size_t bytes) {
  thread_local std::unique_ptr<char[]> buf;
  thread_local size_t cap = 0;
  if (bytes + 64 > cap) {
    cap = bytes + 64;
    buf.reset(new char[cap]);
  }
  return reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(buf.get()) + 63) & ~uintptr_t{63});
}

// The scratchpad argument of a primitive made with scratchpad_mode::user.
inline dnnl::memory Scratch(const dnnl::memory::desc& md) {
  return dnnl::memory(md, DnnlEngine(), ThreadBuffer<0>(md.get_size()));
}

inline dnnl::primitive_attr UserScratchpad(dnnl::primitive_attr attr = {}) {
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

// Pieces of work per host thread: enough for the pool to even out a thread that
// shares its core with another process.
constexpr int64_t kPiecesPerThread = 4;
// The CPUs this process may run on (a container's or taskset's share, not the
// machine's): a pool larger than that only time-slices.
inline int64_t HostThreads() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max<int64_t>(1, std::thread::hardware_concurrency());
}
// A cost per item that makes every host give each item a task of its own.
constexpr int64_t kOwnTask = int64_t{1} << 24;

// The time, in rows, that `pieces` pieces of `rows` rows (and `fixed` more per
// piece) take on `threads` threads taking the next piece as they free up,
// thread 0 at `slow` speed.
inline double Makespan(int64_t pieces, double rows, int64_t threads, double slow, double fixed = 0.0) {
  std::vector<double> done(threads, 0.0);
  for (int64_t p = 0; p < pieces; ++p) {  // the first thread free takes it (a fast one between equals)
    int64_t t = threads - 1;
    for (int64_t k = threads - 2; k >= 0; --k)
      if (done[k] < done[t]) t = k;
    done[t] += (rows + fixed) / (t == 0 ? slow : 1.0);
  }
  return *std::max_element(done.begin(), done.end());
}

// Quiet counts twice what one thread at half speed (another process on its core) does.
inline double PlanCost(int64_t pieces, double rows, int64_t threads, double fixed = 0.0) {
  return 2 * Makespan(pieces, rows, threads, 1.0, fixed) + Makespan(pieces, rows, threads, 0.5, fixed);
}

// The n in [1, most] of least cost(n), the smallest between equals; a negative
// cost leaves n out. 0 where every n is left out.
template <typename Cost>
int64_t Cheapest(int64_t most, Cost&& cost) {
  int64_t best = 0;
  double best_cost = 0.0;
  for (int64_t n = 1; n <= most; ++n) {
    const double c = cost(n);
    if (c >= 0.0 && (best == 0 || c < best_cost - 1e-9)) {
      best = n;
      best_cost = c;
    }
  }
  return best;
}

// Where Winograd beat the direct convolution on YOLOv3's layers (too few input
// channels leave too little work per transform; benchmarks/RESULTS.md).
inline bool WinoEligible(const ConvShape& g) {
  return g.kh == 3 && g.kw == 3 && g.sh == 1 && g.sw == 1 && g.dh == 1 && g.dw == 1 && g.cin >= 128 &&
         g.cout >= 64 && g.oh * g.ow >= 100;
}

constexpr int64_t kWinoChunkBytes = 6 << 20;  // V and M of one chunk of tiles stay in cache

struct WinoPlan {
  ConvShape g;
  int64_t th = 0, tw = 0, tiles = 0, chunk = 0;  // tiles per GEMM chunk (the last one padded)
  // Pieces on the host's threads: `groups` groups of `per` of the 16 matrices,
  // every output channel each, so a piece reads only its own part of V and of U.
  // (Pieces by blocks of output channels each read all of V: 4-8% slower on
  // YOLOv3's Winograd layers, for one barrier less.) On oneDNN's own threads, one group.
  int64_t groups = 1, per = 16;
  // A group's GEMMs as one batched matmul, [per, chunk, Cin] x [per, Cin, Cout]
  // (its part of U) into its dense [per, chunk, Cout] part of M: one call per
  // group, not per matrix (each call costs microseconds of its own).
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul mm;
  dnnl::memory::desc src_md, dst_md, user_w_md;
  dnnl::reorder pack;  // one group of U, [per, Cin, Cout] -> pd.weights_desc()
};

// Groups of the 16 matrices for the host's threads: the count dividing 16 of
// least PlanCost (fewest between equals).
inline int64_t WinoGroups(int64_t threads) {
  return Cheapest(std::min<int64_t>(16, kPiecesPerThread * threads), [&](int64_t n) {
    return 16 % n ? -1.0 : PlanCost(n, static_cast<double>(16 / n), threads);
  });
}

// Null where oneDNN has no brgemm matmul for it (then Winograd is not worth it).
// Throws dnnl::error where oneDNN has no implementation at all.
inline std::unique_ptr<WinoPlan> MakeWinoPlan(const ConvShape& g, bool host_threads) {
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
  p->groups = host_threads ? WinoGroups(HostThreads()) : 1;
  p->per = 16 / p->groups;
  p->src_md = dnnl::memory::desc({p->per, p->chunk, g.cin}, dt::f32, tag::abc);
  p->dst_md = dnnl::memory::desc({p->per, p->chunk, g.cout}, dt::f32, tag::abc);
  p->user_w_md = dnnl::memory::desc({p->per, g.cin, g.cout}, dt::f32, tag::abc);
  dnnl::memory::desc w_any({p->per, g.cin, g.cout}, dt::f32, tag::any);
  p->pd = dnnl::matmul::primitive_desc(DnnlEngine(), p->src_md, w_any, p->dst_md, UserScratchpad());
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

// y = leaky((A^T M A) * s + b) for tiles [t_begin, t_end) within the real tiles.
inline void WinoOutput(const float* m, const WinoPlan& w, int64_t t0, int64_t t_begin, int64_t t_end,
                       const float* s, const float* b, float alpha, float* y) {
  const ConvShape& g = w.g;
  const int64_t ld = w.chunk * g.cout;
  for (int64_t t = t_begin; t < t_end; ++t) {
    const int64_t n = t / (w.th * w.tw), r = t % (w.th * w.tw);
    const int64_t oy = 2 * (r / w.tw), ox = 2 * (r % w.tw);
    const float* src = m + (t - t0) * g.cout;  // indexed by output channel
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
            const float v = z[a][c] * s[o0 + o] + b[o0 + o];
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

// The whole Winograd convolution for x -> y on the packed U (`u`: U's groups of
// its 16 matrices). v and m hold 16 * chunk * cin and 16 * chunk * cout floats,
// zeros cin zeros. parallel(count, cost_per_item, fn(begin, end)) spreads
// [0, count) over the caller's threads; `host_threads`: the GEMMs too, a group
// per piece (else oneDNN's own threads).
template <typename ParallelFor>
void WinoRun(const WinoPlan& w, const std::vector<dnnl::memory>& u, const float* x, const float* s, const float* b,
             float alpha, float* v, float* m, const float* zeros, float* y, bool host_threads,
             ParallelFor&& parallel) {
  const ConvShape& g = w.g;
  auto gemms = [&](int64_t q) {  // the GEMMs of group q
    auto& engine = DnnlEngine();
    dnnl::stream stream(engine);
    dnnl::memory src(w.src_md, engine, v + q * w.per * w.chunk * g.cin),
        dst(w.dst_md, engine, m + q * w.per * w.chunk * g.cout);
    w.mm.execute(stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, u[q]}, {DNNL_ARG_DST, dst},
                          {DNNL_ARG_SCRATCHPAD, Scratch(w.pd.scratchpad_desc())}});
    stream.wait();
  };
  for (int64_t t0 = 0; t0 < w.tiles; t0 += w.chunk) {
    const int64_t real = std::min(w.chunk, w.tiles - t0);
    parallel(w.chunk, 40 * g.cin,
             [&](int64_t begin, int64_t end) { WinoInput(x, w, t0, t0 + begin, t0 + end, zeros, v); });
    if (host_threads) {
      std::atomic<bool> failed{false};  // as in Road::Run: nothing thrown across the host's pool
      parallel(w.groups, kOwnTask, [&](int64_t q0, int64_t q1) {
        OneThread one;
        try {
          for (int64_t q = q0; q < q1; ++q) gemms(q);
        } catch (const dnnl::error&) {
          failed = true;
        }
      });
      if (failed) throw dnnl::error(dnnl_runtime_error, "a Winograd GEMM failed");
    } else {
      gemms(0);
    }
    parallel(real, 60 * g.cout,
             [&](int64_t begin, int64_t end) { WinoOutput(m, w, t0, t0 + begin, t0 + end, s, b, alpha, y); });
  }
}

// -- one node's road: primitives per geometry, the packed filter ---------------

// The fold as post-ops (z * s, + b', LeakyReLU) on every primitive, so the
// weights they read are the filter as given: a packed copy depends on the filter
// alone, whatever BatchNorm's vectors do.
inline dnnl::primitive_attr FoldPostOps(const dnnl::memory::desc& channel_md, float alpha) {
  dnnl::post_ops ops;
  ops.append_binary(dnnl::algorithm::binary_mul, channel_md);
  ops.append_binary(dnnl::algorithm::binary_add, channel_md);
  ops.append_eltwise(dnnl::algorithm::eltwise_relu, alpha, 0.0f);  // relu with a slope is LeakyReLU
  dnnl::primitive_attr attr;
  attr.set_post_ops(ops);
  return UserScratchpad(attr);
}

// What primitive creation (~ms each) produced for one geometry:
//   plain    the brgemm convolution reading the HWIO filter in place (null where
//            oneDNN has no fast kernel for that layout);
//   blocked  the convolution on oneDNN's own weights layout (10-40% faster than
//            plain on YOLOv3's weight-heavy 3x3 layers), fed by `pack`. On first use.
struct DnnlConv {
  ConvShape g;
  dnnl::memory::desc src_md, user_weights_md, dst_md, channel_md;
  dnnl::memory::dims strides, dilations, pad_l, pad_r;
  float alpha = 0.1f;
  dnnl::convolution_forward::primitive_desc plain_pd;
  std::unique_ptr<dnnl::convolution_forward> plain;
  std::once_flag blocked_once;
  bool blocked_ok = false, blocked_brgemm = false;
  dnnl::convolution_forward::primitive_desc blocked_pd;
  dnnl::convolution_forward blocked;
  dnnl::reorder pack;

  // Thread-safe; false where oneDNN has no implementation.
  bool EnsureBlocked() {
    std::call_once(blocked_once, [this] {
      try {
        auto& engine = DnnlEngine();
        dnnl::memory::desc weights_any(user_weights_md.get_dims(), dnnl::memory::data_type::f32,
                                       dnnl::memory::format_tag::any);
        blocked_pd = dnnl::convolution_forward::primitive_desc(
            engine, dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src_md, weights_any,
            dst_md, strides, dilations, pad_l, pad_r, FoldPostOps(channel_md, alpha));
        blocked = dnnl::convolution_forward(blocked_pd);
        blocked_brgemm = Brgemm(blocked_pd.impl_info_str());
        pack = dnnl::reorder(dnnl::reorder::primitive_desc(engine, user_weights_md, engine,
                                                           blocked_pd.weights_desc()));
        blocked_ok = true;
      } catch (const dnnl::error&) {
        blocked_ok = false;
      }
    });
    return blocked_ok;
  }
};

// Null where oneDNN has no fast road for the geometry (the caller's own is faster).
inline std::shared_ptr<DnnlConv> MakeDnnlConv(const ConvShape& g, float alpha, bool want_plain) {
  using tag = dnnl::memory::format_tag;
  using dt = dnnl::memory::data_type;
  auto p = std::make_shared<DnnlConv>();
  p->g = g;
  p->src_md = dnnl::memory::desc({g.n, g.cin, g.h, g.w}, dt::f32, tag::nhwc);
  p->dst_md = dnnl::memory::desc({g.n, g.cout, g.oh, g.ow}, dt::f32, tag::nhwc);
  p->user_weights_md = dnnl::memory::desc({g.cout, g.cin, g.kh, g.kw}, dt::f32, tag::hwio);
  p->channel_md = dnnl::memory::desc({1, g.cout, 1, 1}, dt::f32, tag::nchw);
  p->strides = {g.sh, g.sw};
  p->dilations = {g.dh - 1, g.dw - 1};
  p->pad_l = {g.pad_top, g.pad_left};
  p->pad_r = {g.pad_bottom, g.pad_right};
  p->alpha = alpha;
  if (want_plain) {
    try {
      dnnl::convolution_forward::primitive_desc pd(
          DnnlEngine(), dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, p->src_md,
          p->user_weights_md, p->dst_md, p->strides, p->dilations, p->pad_l, p->pad_r,
          FoldPostOps(p->channel_md, alpha));
      if (FastImpl(pd.impl_info_str())) {
        p->plain_pd = pd;
        p->plain = std::make_unique<dnnl::convolution_forward>(pd);
      }
    } catch (const dnnl::error&) {
    }
  }
  if (!p->plain && !p->EnsureBlocked()) return nullptr;
  return p;
}

// The direct convolution as `pieces` runs of one geometry `g` (n = 1 unless
// whole): each image whole (its pads as given), or in bands of g.oh output rows
// with no pads up or down, where a band whose rows leave the image (the pads)
// reads a zero-filled copy of them and one past the last row writes to a copy.
// One geometry: one primitive and one packed filter serve every band.
struct Bands {
  ConvShape full, g;
  int64_t per_image = 1, pieces = 1;
  bool whole = true;  // one piece: `full` itself, on oneDNN's own threads
};

// Bands per image: the count of least PlanCost, fewest pieces between equals.
// Rows past the image's last are work too (26 rows as 7 bands of 4 on 2 threads
// cost 16 row-times where 4 bands of 7 cost 14), and so is each band's read of
// the whole filter: at ~10 flops per byte a core can stream, the time of 20/ow
// output rows (filter bytes over a row's flops; the channels cancel).
inline int64_t BandsPerImage(int64_t n, int64_t oh, int64_t ow, int64_t threads) {
  const double fixed = 20.0 / static_cast<double>(std::max<int64_t>(ow, 1));
  auto bands = [oh](int64_t want) {  // the bands that `want` bands' rows each make
    const int64_t rows = (oh + want - 1) / want;
    return (oh + rows - 1) / rows;
  };
  const int64_t want = Cheapest(std::min(kPiecesPerThread * threads, oh / 2), [&](int64_t w) {
    return PlanCost(n * bands(w), (oh + w - 1) / w, threads, fixed);
  });
  return want ? bands(want) : 1;
}

// A pointwise convolution reads each pixel alone: its image as one column of
// h*w pixels (the same bytes), whose bands are runs of pixels that waste nothing
// (26x26 as 4 bands of 169 pixels, not of 7 rows with 2 past the last).
inline ConvShape AsPixelColumn(const ConvShape& f) {
  if (f.kh != 1 || f.kw != 1 || f.sh != 1 || f.sw != 1 || f.pad_top || f.pad_left || f.pad_bottom || f.pad_right)
    return f;
  ConvShape c = f;
  c.h = c.oh = f.h * f.w;
  c.w = c.ow = 1;
  return c;
}

inline Bands PlanBands(const ConvShape& shape, bool host_threads) {
  Bands b;
  const ConvShape f = host_threads ? AsPixelColumn(shape) : shape;
  b.full = b.g = f;
  if (!host_threads) return b;
  b.whole = false;
  b.g.n = 1;
  b.pieces = f.n;
  const int64_t threads = HostThreads();
  if (f.n >= kPiecesPerThread * threads || f.oh < 2) return b;
  const int64_t per = BandsPerImage(f.n, f.oh, f.ow, threads);
  if (per < 2) return b;
  const int64_t rows = (f.oh + per - 1) / per;
  b.per_image = per;
  b.pieces = f.n * per;
  b.g.oh = rows;
  b.g.h = (rows - 1) * f.sh + (f.kh - 1) * f.dh + 1;
  b.g.pad_top = b.g.pad_bottom = 0;
  return b;
}

// Runs band `p`: the primitive on its input rows (or their padded copy) into its
// output rows (or a copy, then the rows that exist).
template <typename Exec>
void RunBand(const Bands& b, int64_t p, const float* x, float* y, Exec&& exec) {
  const ConvShape &f = b.full, &g = b.g;
  const int64_t n = p / b.per_image, r0 = (p % b.per_image) * g.oh;
  const int64_t row_in = f.w * f.cin, row_out = f.ow * f.cout;
  if (b.per_image == 1) {
    exec(x + n * f.h * row_in, y + n * f.oh * row_out);
    return;
  }
  const int64_t iy0 = r0 * f.sh - f.pad_top;
  const float* src = x + (n * f.h + iy0) * row_in;
  if (iy0 < 0 || iy0 + g.h > f.h) {
    float* copy = reinterpret_cast<float*>(ThreadBuffer<1>(sizeof(float) * g.h * row_in));
    for (int64_t r = 0; r < g.h; ++r) {
      const int64_t iy = iy0 + r;
      if (iy >= 0 && iy < f.h)
        std::memcpy(copy + r * row_in, x + (n * f.h + iy) * row_in, sizeof(float) * row_in);
      else
        std::memset(copy + r * row_in, 0, sizeof(float) * row_in);
    }
    src = copy;
  }
  float* dst = y + (n * f.oh + r0) * row_out;
  const int64_t rows = std::min(g.oh, f.oh - r0);
  if (rows == g.oh) {
    exec(src, dst);
    return;
  }
  float* out = reinterpret_cast<float*>(ThreadBuffer<2>(sizeof(float) * g.oh * row_out));
  exec(src, out);
  std::memcpy(dst, out, sizeof(float) * rows * row_out);
}

// BRIDGE_DNNL_WEIGHTS: which weights layout the road reads.
//   cached   (default) a call whose weights are new runs on the HWIO filter in
//            place; while they stay the same (the host says so: a graph node's
//            constants or variables) the filter is packed once and kept: as
//            Winograd's U where it applies (BRIDGE_CONV_WINOGRAD=off: never), else
//            in the blocked layout where that is a brgemm kernel
//   plain    always the HWIO filter in place
//   blocked  always the blocked layout, repacked on every call
enum class Weights { kCached, kPlain, kBlocked };

// A filter packed (blocked layout, or Winograd's 16 U matrices), owned by oneDNN.
struct Packed {
  bool wino = false;
  dnnl::memory::desc md;
  dnnl::memory weights;
  std::vector<dnnl::memory> u;
};

// Which road a call took.
enum class Ran { kNone, kDirect, kWinograd };

// One node's oneDNN road: its primitives per geometry and its packed filter.
class Road {
 public:
  Weights weights = Weights::kCached;
  bool winograd = true;
  bool host_threads = true;  // BRIDGE_DNNL_THREADS: host (default) or openmp
  float alpha = 0.1f;

  // y = leaky(conv(x, filter) * s + b), float32. kNone: oneDNN has no fast road
  // for this geometry (or failed), nothing written that the caller's road will
  // not overwrite. `same`: the host's word that the filter is the previous call's.
  template <typename ParallelFor>
  Ran Run(const ConvShape& g, const float* x, const float* filter, bool same, const float* s, const float* b,
          float* y, ParallelFor&& parallel) {
    try {
      std::unique_ptr<OneThread> one(host_threads ? new OneThread : nullptr);
      const int caller_threads = one ? one->prev : omp_get_max_threads();
      auto host = [&](int64_t count, int64_t cost, const auto& fn) {
        ThreadCount as_called(caller_threads);
        parallel(count, cost, fn);
      };
      const Bands bands = Planned(g);
      std::shared_ptr<DnnlConv> conv = Conv(bands.g);
      if (!conv) return Ran::kNone;
      std::shared_ptr<WinoPlan> wino = weights == Weights::kCached && winograd ? Wino(g) : nullptr;
      std::shared_ptr<const Packed> packed = PackedFilter(conv.get(), wino.get(), filter, same, host);
      auto& engine = DnnlEngine();
      if (packed && packed->wino) {
        const WinoPlan& w = *wino;
        std::vector<float> buf(16 * w.chunk * (g.cin + g.cout) + g.cin, 0.0f);
        float *v = buf.data(), *m = v + 16 * w.chunk * g.cin, *zeros = m + 16 * w.chunk * g.cout;
        WinoRun(w, packed->u, x, s, b, alpha, v, m, zeros, y, host_threads, host);
        return Ran::kWinograd;
      }
      const dnnl::convolution_forward& prim = packed ? conv->blocked : *conv->plain;
      const dnnl::memory::desc scratch_md = (packed ? conv->blocked_pd : conv->plain_pd).scratchpad_desc();
      const dnnl::memory weights_mem = packed ? packed->weights
                                              : dnnl::memory(conv->user_weights_md, engine, const_cast<float*>(filter));
      const dnnl::memory scale(conv->channel_md, engine, const_cast<float*>(s)),
          shift(conv->channel_md, engine, const_cast<float*>(b));
      auto exec = [&](const float* src_p, float* dst_p) {
        dnnl::memory src(conv->src_md, engine, const_cast<float*>(src_p)), dst(conv->dst_md, engine, dst_p);
        dnnl::stream stream(engine);
        prim.execute(stream, {{DNNL_ARG_SRC, src},
                              {DNNL_ARG_WEIGHTS, weights_mem},
                              {DNNL_ARG_DST, dst},
                              {DNNL_ARG_SCRATCHPAD, Scratch(scratch_md)},
                              {DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, scale},
                              {DNNL_ARG_ATTR_MULTIPLE_POST_OP(1) | DNNL_ARG_SRC_1, shift}});
        stream.wait();
      };
      if (bands.whole) {
        exec(x, y);
      } else {
        // No exception may cross a host's pool (TensorFlow's and an OpenMP team
        // would terminate): a failed piece is reported after the loop.
        std::atomic<bool> failed{false};
        host(bands.pieces, kOwnTask, [&](int64_t p0, int64_t p1) {
          OneThread piece_one;
          try {
            for (int64_t p = p0; p < p1; ++p) RunBand(bands, p, x, y, exec);
          } catch (const dnnl::error&) {
            failed = true;
          }
        });
        if (failed) return Ran::kNone;
      }
      return Ran::kDirect;
    } catch (const dnnl::error&) {
      return Ran::kNone;
    }
  }

 private:
  static std::vector<int64_t> Key(const ConvShape& g) {
    return {g.n, g.h, g.w, g.cin, g.kh, g.kw, g.cout, g.oh, g.ow, g.pad_top, g.pad_left, g.pad_bottom, g.pad_right};
  }

  // Primitive creation costs milliseconds: one per geometry, kept (a handful; an
  // eager TensorFlow kernel serves every layer with the same attributes).
  std::shared_ptr<DnnlConv> Conv(const ConvShape& g) {
    const std::vector<int64_t> key = Key(g);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = convs_.find(key);
    if (it != convs_.end()) return it->second;
    std::shared_ptr<DnnlConv> conv;
    try {
      conv = MakeDnnlConv(g, alpha, weights != Weights::kBlocked);
    } catch (const dnnl::error&) {
      conv = nullptr;
    }
    if (convs_.size() >= 16) convs_.clear();
    convs_[key] = conv;
    return conv;
  }

  // The Winograd plan of the whole convolution, where it applies (null else).
  // The bands of a geometry, planned once: the plan simulates every count on
  // every thread (milliseconds on 64 cores, per call).
  Bands Planned(const ConvShape& g) {
    const std::vector<int64_t> key = Key(g);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = bands_.find(key);
    if (it != bands_.end()) return it->second;
    if (bands_.size() >= 16) bands_.clear();
    return bands_[key] = PlanBands(g, host_threads);
  }

  std::shared_ptr<WinoPlan> Wino(const ConvShape& g) {
    if (!WinoEligible(g)) return nullptr;
    const std::vector<int64_t> key = Key(g);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = winos_.find(key);
    if (it != winos_.end()) return it->second;
    std::shared_ptr<WinoPlan> plan;
    try {
      plan = MakeWinoPlan(g, host_threads);
    } catch (const dnnl::error&) {
      plan = nullptr;
    }
    if (winos_.size() >= 16) winos_.clear();
    winos_[key] = plan;
    return plan;
  }

  // The packed filter for this call: the kept one while the filter stays the
  // same; packed and kept on a call whose filter is the previous one's (the first
  // call of a node whose weights are new reads them in place). Null: in place.
  template <typename ParallelFor>
  std::shared_ptr<const Packed> PackedFilter(DnnlConv* conv, const WinoPlan* wino_plan, const float* filter,
                                             bool same, ParallelFor&& parallel) {
    if (weights == Weights::kPlain && conv->plain) return nullptr;
    bool wino = wino_plan != nullptr;
    if (!wino && !conv->EnsureBlocked()) return nullptr;  // then the plain primitive exists (MakeDnnlConv)
    // Packing pays where the blocked primitive is a brgemm one; elsewhere (e.g.
    // Cin=3, where oneDNN offers its older jit kernel) plain brgemm is faster.
    if (weights == Weights::kCached && !wino && conv->plain && !conv->blocked_brgemm) return nullptr;
    bool keep = false;
    if (weights == Weights::kCached) {
      const dnnl::memory::desc& want = wino ? wino_plan->pd.weights_desc() : conv->blocked_pd.weights_desc();
      std::lock_guard<std::mutex> lock(mu_);
      if (same && packed_ && packed_->wino == wino && packed_->md == want) return packed_;
      packed_.reset();  // other weights, or another layout: let the old one go
      keep = same;
    }
    if (!keep) {
      if (conv->plain) return nullptr;
      wino = false;  // packed for this call only: the blocked convolution (MakeDnnlConv made sure it exists)
    }
    auto p = std::make_shared<Packed>();
    p->wino = wino;
    p->md = wino ? wino_plan->pd.weights_desc() : conv->blocked_pd.weights_desc();
    auto& engine = DnnlEngine();
    dnnl::stream stream(engine);
    if (wino) {
      const ConvShape& g = wino_plan->g;
      std::vector<float> u(16 * g.cin * g.cout);
      float* up = u.data();
      parallel(g.cin, 40 * g.cout, [&](int64_t begin, int64_t end) { WinoFilter(filter, g.cin, g.cout, begin, end, up); });
      for (int64_t q = 0; q < wino_plan->groups; ++q) {
        dnnl::memory user_u(wino_plan->user_w_md, engine, up + q * wino_plan->per * g.cin * g.cout);
        p->u.emplace_back(p->md, engine);
        wino_plan->pack.execute(stream, {{DNNL_ARG_FROM, user_u}, {DNNL_ARG_TO, p->u.back()}});
      }
      stream.wait();
    } else {
      p->weights = dnnl::memory(p->md, engine);
      dnnl::memory user_w(conv->user_weights_md, engine, const_cast<float*>(filter));
      conv->pack.execute(stream, {{DNNL_ARG_FROM, user_w}, {DNNL_ARG_TO, p->weights}});
      stream.wait();
    }
    if (keep) {
      std::lock_guard<std::mutex> lock(mu_);
      packed_ = p;
    }
    return p;
  }

  std::mutex mu_;
  std::map<std::vector<int64_t>, std::shared_ptr<DnnlConv>> convs_;
  std::map<std::vector<int64_t>, std::shared_ptr<WinoPlan>> winos_;
  std::map<std::vector<int64_t>, Bands> bands_;
  std::shared_ptr<const Packed> packed_;
};

}  // namespace
}  // namespace conv_core
}  // namespace bridge

#endif  // BRIDGE_HAVE_DNNL
#endif  // BRIDGE_KERNELS_CONV_CORE_H_
