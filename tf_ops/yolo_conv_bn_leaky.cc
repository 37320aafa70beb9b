// YoloConvBnLeaky: 2-D convolution (NHWC x HWIO) with inference BatchNorm folded
// in, then LeakyReLU (contract: shared/ops.md; Python spec:
// bridge/ops/yolo_conv_bn_leaky.py).
//
// The fold (bridge/kernels/batchnorm_fold.h, shared with the onnxruntime and
// LiteRT kernels) is applied where it costs nothing: conv(x, filter * s) equals
// conv(x, filter) * s per output channel, so the filter is never rewritten; the
// scale s and the shift b' are applied in the output pass together with the
// LeakyReLU, while the tile is still in cache.
//
// Two convolution roads, chosen when the kernel is constructed from the
// environment variable BRIDGE_CONV_IMPL:
//   onednn  oneDNN (the library is built with it when bridge.native.onednn_root()
//           finds an install, e.g. PyPI's onednn-devel-cpu-gomp), float32 only.
//           The fold is always applied by post-ops (z * s, + b', LeakyReLU), so
//           the weights oneDNN reads are the filter as given. BRIDGE_DNNL_WEIGHTS:
//     cached   (default) a call whose filter buffer is not the previous call's
//              runs the brgemm convolution on the HWIO filter in place; from the
//              second call in a row with the same buffer (a graph node fed by a
//              variable or constant) the filter is packed once and kept: for
//              3x3 stride-1 layers with Cin >= 128 and >= 100 output pixels as
//              the transformed filters of Winograd F(2x2,3x3) (1.3-1.8x faster
//              than direct there; BRIDGE_CONV_WINOGRAD=off turns it off), else in
//              oneDNN's blocked layout (10-40% faster than HWIO on the
//              weight-heavy layers). See Packed for why reuse is safe.
//     plain    always the HWIO filter in place (the road before packing existed)
//     blocked  always the blocked layout, repacked on every call
//           Primitives are cached per shape. oneDNN runs on its own OpenMP
//           threads (the PyPI build is OpenMP, not threadpool); their wait
//           policy made no measurable difference on 2 cores (OMP_WAIT_POLICY
//           PASSIVE/ACTIVE, GOMP_SPINCOUNT), so it is left alone.
//   eigen   im2col of 256-pixel tiles into a per-tile buffer, Eigen's GEMM (one
//           thread per tile; tiles spread over the op's own thread pool), then the
//           fused scale + shift + LeakyReLU pass on the tile in cache. 1x1 stride-1
//           unpadded convolutions multiply the NHWC input directly; layers with few
//           pixels and many channels (13x13x1024) are split along Cout.
//   unset   onednn where built (YOLOv3-416 whole model, tf.function: 1.2x faster
//           than TensorFlow's frozen graph, where eigen is 0.76x; see
//           benchmarks/yolo_conv_roads.py), else eigen. float16 always takes the
//           eigen road (widened to float32 on the fly, accumulated in float32):
//           oneDNN's f16 convolution needs AVX512-FP16.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "common.h"
#include "kernels/batchnorm_fold.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "unsupported/Eigen/CXX11/Tensor"

#if BRIDGE_HAVE_DNNL
#include "kernels/conv_core.h"
#include "oneapi/dnnl/dnnl.hpp"
#endif

namespace bridge {
namespace {

using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;
using tensorflow::shape_inference::InferenceContext;
using tensorflow::shape_inference::ShapeHandle;

constexpr char kOp[] = "YoloConvBnLeaky";
const char* const kParams[] = {"conv_bias", "bn_gamma", "bn_beta", "bn_mean", "bn_variance"};

// A shape as both the shape function and the kernel see it: -1 for an unknown
// dim, `known` false for an unknown rank. One checker serves both, so graph
// build and eager run word every error the same (and as the Python spec does).
struct PartialShape {
  bool known = false;
  std::vector<int64_t> d;
  int rank() const { return static_cast<int>(d.size()); }
  int64_t operator[](int i) const { return d[i]; }
  std::string str() const {
    if (!known) return "<unknown rank>";
    std::vector<std::string> parts;
    for (int64_t v : d) parts.push_back(v < 0 ? "?" : absl::StrCat(v));
    return absl::StrCat("[", absl::StrJoin(parts, ","), "]");
  }
};

PartialShape FromContext(InferenceContext* c, ShapeHandle s) {
  PartialShape p;
  p.known = c->RankKnown(s);
  if (p.known) {
    for (int i = 0; i < c->Rank(s); ++i) {
      auto dim = c->Dim(s, i);
      p.d.push_back(c->ValueKnown(dim) ? c->Value(dim) : -1);
    }
  }
  return p;
}

PartialShape FromTensor(const TensorShape& s) {
  PartialShape p;
  p.known = true;
  for (int i = 0; i < s.dims(); ++i) p.d.push_back(s.dim_size(i));
  return p;
}

struct Attrs {
  std::vector<int32_t> strides, explicit_paddings, dilations;
  std::string padding;
  float epsilon = 1e-5f, alpha = 0.1f;
};

template <typename Ctx>
absl::Status ReadAttrs(Ctx* c, Attrs* a) {
  TF_RETURN_IF_ERROR(c->GetAttr("strides", &a->strides));
  TF_RETURN_IF_ERROR(c->GetAttr("padding", &a->padding));
  TF_RETURN_IF_ERROR(c->GetAttr("explicit_paddings", &a->explicit_paddings));
  TF_RETURN_IF_ERROR(c->GetAttr("dilations", &a->dilations));
  TF_RETURN_IF_ERROR(c->GetAttr("epsilon", &a->epsilon));
  TF_RETURN_IF_ERROR(c->GetAttr("alpha", &a->alpha));
  return absl::OkStatus();
}

absl::Status CheckNhwc4(const char* arg, const std::vector<int32_t>& v) {
  if (v.size() != 4) {
    return ArgError(kOp, arg, absl::StrCat("needs 4 values [1,", std::string(1, arg[0]), "h,",
                                           std::string(1, arg[0]), "w,1], got ", Dims(v)));
  }
  if (v[0] != 1 || v[3] != 1) return ArgError(kOp, arg, absl::StrCat("must be 1 at N and C ([1,h,w,1]), got ", Dims(v)));
  if (v[1] < 1 || v[2] < 1) return ArgError(kOp, arg, absl::StrCat("must be positive, got ", Dims(v)));
  return absl::OkStatus();
}

absl::Status CheckAttrs(const Attrs& a) {
  TF_RETURN_IF_ERROR(CheckNhwc4("strides", a.strides));
  TF_RETURN_IF_ERROR(CheckNhwc4("dilations", a.dilations));
  const auto& p = a.explicit_paddings;
  if (a.padding == "EXPLICIT") {
    if (p.size() != 8) {
      return ArgError(kOp, "explicit_paddings",
                      absl::StrCat("EXPLICIT padding needs 8 values [0,0,top,bottom,left,right,0,0], got ", Dims(p)));
    }
    if (p[0] != 0 || p[1] != 0 || p[6] != 0 || p[7] != 0) {
      return ArgError(kOp, "explicit_paddings", absl::StrCat("must be 0 at N and C, got ", Dims(p)));
    }
    for (int32_t v : p) {
      if (v < 0) return ArgError(kOp, "explicit_paddings", absl::StrCat("must be non-negative, got ", Dims(p)));
    }
  } else if (!p.empty()) {
    return ArgError(kOp, "explicit_paddings", absl::StrCat("must be empty unless padding is EXPLICIT, got ", Dims(p)));
  }
  return absl::OkStatus();
}

// Everything the kernel needs about one call; -1 where the shape function does
// not know a size.
struct Geometry {
  int64_t n = -1, h = -1, w = -1, cin = -1, kh = -1, kw = -1, cout = -1, oh = -1, ow = -1;
  int64_t sh = 1, sw = 1, dh = 1, dw = 1;
  int64_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
};

// One spatial axis as tf.nn.conv2d computes it (SAME puts the odd pixel at the end).
absl::Status OutputSize(int axis, const PartialShape& x, const PartialShape& f, const Attrs& a, int64_t* out,
                        int64_t* before, int64_t* after) {
  int64_t size = x.known ? x[1 + axis] : -1, k = f.known ? f[axis] : -1;
  int64_t stride = a.strides[1 + axis], dilation = a.dilations[1 + axis];
  *before = *after = 0;
  if (a.padding == "EXPLICIT") {
    *before = a.explicit_paddings[2 + 2 * axis];
    *after = a.explicit_paddings[3 + 2 * axis];
  }
  if (size < 0 || k < 0) {
    *out = -1;
    return absl::OkStatus();
  }
  int64_t eff = (k - 1) * dilation + 1;
  if (a.padding == "SAME") {
    *out = (size + stride - 1) / stride;
    int64_t total = std::max<int64_t>((*out - 1) * stride + eff - size, 0);
    *before = total / 2;
    *after = total - total / 2;
    return absl::OkStatus();
  }
  int64_t num = size + *before + *after - eff + stride;
  if (num < 0) {
    return ArgError(kOp, "x",
                    absl::StrCat(axis == 0 ? "H" : "W", " axis of x ", x.str(), " with filter ", f.str(),
                                 ": computed output size would be negative: input ", size, " + padding ", *before, "+",
                                 *after, ", effective filter ", eff, ", stride ", stride));
  }
  *out = num / stride;
  return absl::OkStatus();
}

// The spec's checks, in the spec's order (bridge/ops/yolo_conv_bn_leaky.py).
absl::Status Infer(const PartialShape in[7], const Attrs& a, Geometry* g) {
  TF_RETURN_IF_ERROR(CheckAttrs(a));
  const PartialShape &x = in[0], &f = in[1];
  if (x.known && x.rank() != 4) return ArgError(kOp, "x", absl::StrCat("must have rank 4 [N,H,W,Cin], got ", x.str()));
  if (f.known && f.rank() != 4) {
    return ArgError(kOp, "filter", absl::StrCat("must have rank 4 [KH,KW,Cin,Cout], got ", f.str()));
  }
  if (x.known && f.known && x[3] >= 0 && f[2] >= 0 && x[3] != f[2]) {
    return ArgError(kOp, "filter", absl::StrCat("Cin mismatch: x ", x.str(), " has Cin=", x[3], ", filter ", f.str(),
                                                " has Cin=", f[2]));
  }
  int64_t cout = f.known ? f[3] : -1;
  for (int i = 0; i < 5; ++i) {
    const PartialShape& p = in[2 + i];
    if (!p.known) continue;
    if (p.rank() != 1 || (cout >= 0 && p[0] >= 0 && p[0] != cout)) {
      PartialShape want;
      want.known = true;
      want.d = {cout};
      return ArgError(kOp, kParams[i], absl::StrCat("must have shape [Cout]=", want.str(), " (filter ", f.str(),
                                                    "), got ", p.str()));
    }
    if (cout < 0) cout = p[0];
  }
  TF_RETURN_IF_ERROR(OutputSize(0, x, f, a, &g->oh, &g->pad_top, &g->pad_bottom));
  TF_RETURN_IF_ERROR(OutputSize(1, x, f, a, &g->ow, &g->pad_left, &g->pad_right));
  if (x.known) g->n = x[0], g->h = x[1], g->w = x[2], g->cin = x[3];
  if (f.known) g->kh = f[0], g->kw = f[1];
  if (g->cin < 0 && f.known) g->cin = f[2];
  g->cout = cout;
  g->sh = a.strides[1], g->sw = a.strides[2], g->dh = a.dilations[1], g->dw = a.dilations[2];
  return absl::OkStatus();
}

absl::Status ShapeFn(InferenceContext* c) {
  Attrs a;
  TF_RETURN_IF_ERROR(ReadAttrs(c, &a));
  PartialShape in[7];
  for (int i = 0; i < 7; ++i) in[i] = FromContext(c, c->input(i));
  Geometry g;
  TF_RETURN_IF_ERROR(Infer(in, a, &g));
  auto dim = [c](int64_t v) { return v < 0 ? c->UnknownDim() : c->MakeDim(v); };
  c->set_output(0, c->MakeShape({dim(g.n), dim(g.oh), dim(g.ow), dim(g.cout)}));
  return absl::OkStatus();
}

// -- the eigen road ------------------------------------------------------------

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Strided = Eigen::OuterStride<>;

// Output pixels per tile: enough rows that Eigen's packing of the filter panel
// is paid back (each packed filter value is used `rows` times), small enough that
// a tile's im2col buffer stays near the core's L2 cache.
constexpr int64_t kTileRows = 256;

// Rows [row0, row0 + rows) of the im2col matrix (row = output pixel in N,OH,OW
// order, column = (ky, kx, ci) as the HWIO filter's rows), widened to float.
template <typename T>
void Im2col(const T* x, const Geometry& g, int64_t row0, int64_t rows, float* out) {
  const int64_t k = g.kh * g.kw * g.cin;
  int64_t n = row0 / (g.oh * g.ow), rem = row0 % (g.oh * g.ow);
  int64_t oy = rem / g.ow, ox = rem % g.ow;
  for (int64_t r = 0; r < rows; ++r) {
    float* dst = out + r * k;
    const T* image = x + n * g.h * g.w * g.cin;
    for (int64_t ky = 0; ky < g.kh; ++ky) {
      int64_t iy = oy * g.sh - g.pad_top + ky * g.dh;
      if (iy < 0 || iy >= g.h) {
        std::fill(dst, dst + g.kw * g.cin, 0.0f);
        dst += g.kw * g.cin;
        continue;
      }
      for (int64_t kx = 0; kx < g.kw; ++kx, dst += g.cin) {
        int64_t ix = ox * g.sw - g.pad_left + kx * g.dw;
        if (ix < 0 || ix >= g.w) {
          std::fill(dst, dst + g.cin, 0.0f);
        } else {
          ToFloats(image + (iy * g.w + ix) * g.cin, dst, g.cin);
        }
      }
    }
    if (++ox == g.ow) {
      ox = 0;
      if (++oy == g.oh) oy = 0, ++n;
    }
  }
}

// y = leaky(z * s + b') for a [rows, cols] block with row stride `ld` (both sides).
template <typename T>
void ScaleShiftLeaky(const float* z, int64_t ld_z, const float* s, const float* b, float alpha, int64_t rows,
                     int64_t cols, T* y, int64_t ld_y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* zr = z + r * ld_z;
    T* yr = y + r * ld_y;
    if constexpr (std::is_same_v<T, float>) {
#pragma omp simd
      for (int64_t c = 0; c < cols; ++c) {
        float v = zr[c] * s[c] + b[c];
        yr[c] = v > 0.0f ? v : v * alpha;
      }
    } else {
      float tmp[256];
      for (int64_t c0 = 0; c0 < cols; c0 += 256) {
        int64_t m = std::min<int64_t>(256, cols - c0);
#pragma omp simd
        for (int64_t c = 0; c < m; ++c) {
          float v = zr[c0 + c] * s[c0 + c] + b[c0 + c];
          tmp[c] = v > 0.0f ? v : v * alpha;
        }
        FromFloats(tmp, yr + c0, m);
      }
    }
  }
}

template <typename T>
void ConvEigen(OpKernelContext* ctx, const Geometry& g, const T* x, const float* filter, const float* s,
               const float* b, float alpha, T* y) {
  const int64_t m = g.n * g.oh * g.ow, k = g.kh * g.kw * g.cin, cout = g.cout;
  const bool direct = std::is_same_v<T, float> && g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 &&
                      g.pad_top == 0 && g.pad_left == 0 && g.pad_bottom == 0 && g.pad_right == 0;
  // Work items are (row tile, column block) pairs. A layer with few output pixels
  // and many channels (13x13x1024) is split along Cout so that every core has work.
  const int64_t row_tiles = (m + kTileRows - 1) / kTileRows;
  const int64_t threads = ctx->device()->tensorflow_cpu_worker_threads()->num_threads;
  int64_t col_blocks = 1;
  while (row_tiles * col_blocks < 2 * threads && cout / (col_blocks * 2) >= 64) col_blocks *= 2;
  const int64_t cols_per_block = (cout + col_blocks - 1) / col_blocks;
  const int64_t cost = 2 * std::min(kTileRows, m) * k * cols_per_block;
  // Split along Cout, the few row tiles are unfolded once and shared by the blocks.
  Tensor shared_t;
  const float* shared = nullptr;
  if (!direct && col_blocks > 1) {
    OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DT_FLOAT, TensorShape({m, k}), &shared_t));
    float* p = shared_t.flat<float>().data();
    ParallelRows(ctx, m, 4 * k, [&](int64_t begin, int64_t end) { Im2col(x, g, begin, end - begin, p + begin * k); });
    shared = p;
  }
  ParallelRows(ctx, row_tiles * col_blocks, cost, [&](int64_t begin, int64_t end) {
    std::vector<float, Eigen::aligned_allocator<float>> patches, acc;
    for (int64_t item = begin; item < end; ++item) {
      const int64_t row0 = (item / col_blocks) * kTileRows, rows = std::min(kTileRows, m - row0);
      const int64_t col0 = (item % col_blocks) * cols_per_block, cols = std::min(cols_per_block, cout - col0);
      if (cols <= 0) continue;
      const float* a;
      if (direct) {
        a = reinterpret_cast<const float*>(x) + row0 * k;
      } else if (shared) {
        a = shared + row0 * k;
      } else {
        patches.resize(rows * k);
        Im2col(x, g, row0, rows, patches.data());
        a = patches.data();
      }
      // float output: the GEMM writes straight into y and the epilogue runs in place.
      float* z;
      int64_t ld_z;
      if constexpr (std::is_same_v<T, float>) {
        z = y + row0 * cout + col0;
        ld_z = cout;
      } else {
        acc.resize(rows * cols);
        z = acc.data();
        ld_z = cols;
      }
      Eigen::Map<const RowMatrix> lhs(a, rows, k);
      Eigen::Map<const RowMatrix, 0, Strided> rhs(filter + col0, k, cols, Strided(cout));
      Eigen::Map<RowMatrix, 0, Strided> out(z, rows, cols, Strided(ld_z));
      out.noalias() = lhs * rhs;
      ScaleShiftLeaky(z, ld_z, s + col0, b + col0, alpha, rows, cols, y + row0 * cout + col0, cout);
    }
  });
}

// -- the oneDNN road ---------------------------------------------------------------

#if BRIDGE_HAVE_DNNL
// The engine, Winograd and the fast-implementation test: bridge/kernels/conv_core.h, shared
// with the onnxruntime kernel.
using conv_core::DnnlEngine;
using conv_core::FastImpl;
using conv_core::WinoPlan;

conv_core::ConvShape Shape(const Geometry& g) {
  return {g.n, g.h, g.w, g.cin, g.kh, g.kw, g.cout, g.oh, g.ow, g.sh, g.sw, g.dh, g.dw, g.pad_top, g.pad_left};
}

// The fold is applied by post-ops (z * s, + b', LeakyReLU) on both primitives, so
// the weights they read are the filter as given, never rescaled: a packed copy
// depends on the filter alone, whatever BatchNorm's vectors do.
dnnl::primitive_attr FoldPostOps(const dnnl::memory::desc& channel_md, float alpha) {
  dnnl::post_ops ops;
  ops.append_binary(dnnl::algorithm::binary_mul, channel_md);
  ops.append_binary(dnnl::algorithm::binary_add, channel_md);
  ops.append_eltwise(dnnl::algorithm::eltwise_relu, alpha, 0.0f);  // relu with a slope is LeakyReLU
  dnnl::primitive_attr attr;
  attr.set_post_ops(ops);
  return attr;
}

// What primitive creation (~ms each) produced for one geometry:
//   plain    the brgemm convolution reading the HWIO filter in place (null where
//            oneDNN has no fast kernel for that layout);
//   blocked  the convolution on oneDNN's own weights layout (measured 10-40%
//            faster than plain on YOLOv3's weight-heavy 3x3 layers), fed by
//            `pack` (HWIO -> blocked). Created on first use;
//   wino     the Winograd plan where WinoEligible. Created on first use.
struct DnnlConv {
  Geometry g;
  dnnl::memory::desc src_md, user_weights_md, dst_md, channel_md;
  dnnl::memory::dims strides, dilations, pad_l, pad_r;
  float alpha = 0.1f;
  std::unique_ptr<dnnl::convolution_forward> plain;
  std::once_flag blocked_once;
  bool blocked_ok = false, blocked_brgemm = false;
  dnnl::convolution_forward::primitive_desc blocked_pd;
  dnnl::convolution_forward blocked;
  dnnl::reorder pack;
  std::once_flag wino_once;
  std::unique_ptr<WinoPlan> wino;  // Winograd where it applies (WinoEligible); created on first use

  bool EnsureWino() {
    std::call_once(wino_once, [this] {
      if (!conv_core::WinoEligible(Shape(g))) return;
      try {
        wino = conv_core::MakeWinoPlan(Shape(g));
      } catch (const dnnl::error&) {
        wino = nullptr;
      }
    });
    return wino != nullptr;
  }

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
        blocked_brgemm = conv_core::Brgemm(blocked_pd.impl_info_str());
        pack = dnnl::reorder(dnnl::reorder::primitive_desc(engine, user_weights_md, engine,
                                                           blocked_pd.weights_desc()));
        blocked_ok = true;
      } catch (const dnnl::error&) {
        blocked_ok = false;  // no oneDNN implementation: the plain primitive or eigen serves
      }
    });
    return blocked_ok;
  }
};

std::shared_ptr<DnnlConv> MakeDnnlConv(const Geometry& g, float alpha, bool want_plain) {
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
      if (FastImpl(pd.impl_info_str())) p->plain = std::make_unique<dnnl::convolution_forward>(pd);
    } catch (const dnnl::error&) {
    }
  }
  if (!p->plain && !p->EnsureBlocked()) return nullptr;  // no oneDNN road at all: eigen takes it
  return p;
}

// A filter packed (blocked layout, or Winograd's U), kept while the same filter
// buffer keeps coming back (every call of a graph node whose filter is a variable or a
// constant). `source` holds a reference to that buffer, and holding it is what
// makes reuse safe: TensorFlow writes into a variable's buffer in place only
// while nothing else references it (AssignAdd/Sub and the optimizers copy on
// write, Assign swaps in a new buffer), and a buffer that is still alive cannot
// reappear at its address as a different tensor. Changed values thus always
// arrive as another buffer, and another buffer is a miss. Outside that promise:
// TF1 reference variables (their Assign writes in place regardless) and memory
// written behind TensorFlow's back; BRIDGE_DNNL_WEIGHTS=plain serves those.
struct Packed {
  bool wino = false;  // U of the Winograd GEMMs, else the blocked convolution's weights
  Tensor source;
  dnnl::memory::desc md;
  Tensor blocked;

  bool Serves(const Tensor& filter, const dnnl::memory::desc& want) const {
    return source.SharesBufferWith(filter) && source.tensor_data().data() == filter.tensor_data().data() &&
           source.shape() == filter.shape() && md == want;
  }
};

// BRIDGE_DNNL_WEIGHTS: which weights layout the oneDNN road reads.
enum class Weights { kCached, kPlain, kBlocked };
#endif  // BRIDGE_HAVE_DNNL

// -- the kernel --------------------------------------------------------------------

enum class Impl { kEigen, kOneDnn };

template <typename T>
class YoloConvBnLeakyOp : public OpKernel {
 public:
  explicit YoloConvBnLeakyOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadAttrs(ctx, &attrs_));
    OP_REQUIRES_OK(ctx, CheckAttrs(attrs_));
    const char* env = std::getenv("BRIDGE_CONV_IMPL");
    std::string want = env ? env : "";
    OP_REQUIRES(ctx, want.empty() || want == "eigen" || want == "onednn",
                absl::InvalidArgumentError(absl::StrCat(kOp, ": BRIDGE_CONV_IMPL must be eigen or onednn, got '",
                                                        want, "'")));
#if BRIDGE_HAVE_DNNL
    impl_ = (want == "eigen" || !std::is_same_v<T, float>) ? Impl::kEigen : Impl::kOneDnn;
    const char* layout = std::getenv("BRIDGE_DNNL_WEIGHTS");
    std::string w = layout ? layout : "";
    OP_REQUIRES(ctx, w.empty() || w == "cached" || w == "plain" || w == "blocked",
                absl::InvalidArgumentError(absl::StrCat(kOp, ": BRIDGE_DNNL_WEIGHTS must be cached, plain or ",
                                                        "blocked, got '", w, "'")));
    weights_ = w == "plain" ? Weights::kPlain : w == "blocked" ? Weights::kBlocked : Weights::kCached;
    const char* wino = std::getenv("BRIDGE_CONV_WINOGRAD");
    std::string wv = wino ? wino : "";
    OP_REQUIRES(ctx, wv.empty() || wv == "auto" || wv == "off",
                absl::InvalidArgumentError(absl::StrCat(kOp, ": BRIDGE_CONV_WINOGRAD must be auto or off, got '",
                                                        wv, "'")));
    winograd_ = wv != "off";
#else
    OP_REQUIRES(ctx, want != "onednn",
                absl::InvalidArgumentError(absl::StrCat(kOp, ": BRIDGE_CONV_IMPL=onednn, but the op library was "
                                                        "built without oneDNN (pip install onednn-devel-cpu-gomp, "
                                                        "then bridge build tf_ops --force)")));
    impl_ = Impl::kEigen;
#endif
  }

  void Compute(OpKernelContext* ctx) override {
    PartialShape in[7];
    for (int i = 0; i < 7; ++i) in[i] = FromTensor(ctx->input(i).shape());
    Geometry g;
    OP_REQUIRES_OK(ctx, Infer(in, attrs_, &g));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({g.n, g.oh, g.ow, g.cout}), &out));
    if (out->NumElements() == 0) return;

    // The fold (bridge/kernels/batchnorm_fold.h): s and b', applied to the output.
    Tensor fold_t;
    OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DT_FLOAT, TensorShape({7, g.cout}), &fold_t));
    float* s = fold_t.flat<float>().data();
    float* b = s + g.cout;
    {
      const float* p[5];
      for (int i = 0; i < 5; ++i) {
        if constexpr (std::is_same_v<T, float>) {
          p[i] = ctx->input(2 + i).flat<float>().data();
        } else {  // widened into the rows after s and b'
          float* wide = s + (2 + i) * g.cout;
          ToFloats(ctx->input(2 + i).flat<T>().data(), wide, g.cout);
          p[i] = wide;
        }
      }
      FoldBatchNorm(p, g.cout, attrs_.epsilon, s, b);
    }
    const T* x = ctx->input(0).flat<T>().data();
    T* y = out->flat<T>().data();
    const int64_t k = g.kh * g.kw * g.cin;
    if (k == 0) {  // an empty filter convolves to zero: y = leaky(b')
      std::vector<float> zero(g.cout, 0.0f);
      for (int64_t r = 0; r < g.n * g.oh * g.ow; ++r) ScaleShiftLeaky(zero.data(), 0, s, b, attrs_.alpha, 1, g.cout,
                                                                     y + r * g.cout, g.cout);
      return;
    }
#if BRIDGE_HAVE_DNNL
    if (impl_ == Impl::kOneDnn) {
      if constexpr (std::is_same_v<T, float>) {
        std::shared_ptr<DnnlConv> conv = GetDnnlConv(g);
        if (conv) return RunDnnl(ctx, conv.get(), g, s);
      }
    }
#endif
    const float* filter;
    Tensor wide;
    if constexpr (std::is_same_v<T, float>) {
      filter = ctx->input(1).flat<float>().data();
    } else {
      OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DT_FLOAT, TensorShape({k, g.cout}), &wide));
      const T* src = ctx->input(1).flat<T>().data();
      float* dst = wide.flat<float>().data();
      ParallelRows(ctx, k, 4 * g.cout, [&](int64_t begin, int64_t end) {
        ToFloats(src + begin * g.cout, dst + begin * g.cout, (end - begin) * g.cout);
      });
      filter = dst;
    }
    ConvEigen<T>(ctx, g, x, filter, s, b, attrs_.alpha, y);
  }

 private:
#if BRIDGE_HAVE_DNNL
  // Primitive creation costs milliseconds: one per geometry, kept (a handful; in
  // eager mode one kernel serves every layer with the same attributes).
  std::shared_ptr<DnnlConv> GetDnnlConv(const Geometry& g) {
    std::vector<int64_t> key = {g.n, g.h, g.w, g.cin, g.kh, g.kw, g.cout, g.oh, g.ow};
    std::lock_guard<std::mutex> lock(mu_);
    auto it = convs_.find(key);
    if (it != convs_.end()) return it->second;
    std::shared_ptr<DnnlConv> conv;
    try {
      conv = MakeDnnlConv(g, attrs_.alpha, weights_ != Weights::kBlocked);
    } catch (const dnnl::error&) {
      conv = nullptr;  // no oneDNN implementation for this geometry: the eigen road takes it
    }
    if (convs_.size() >= 16) convs_.clear();
    convs_[key] = conv;
    return conv;
  }

  // The packed filter for this call: the kept one when it serves; else packed
  // now, and kept when this is the second call in a row with the same filter
  // buffer (a graph node; an eager kernel shared by many layers sees a new filter
  // every call and keeps nothing). Null: read the filter in place.
  std::shared_ptr<const Packed> PackedFilter(OpKernelContext* ctx, DnnlConv* conv) {
    if (weights_ == Weights::kPlain && conv->plain) return nullptr;
    bool wino = weights_ == Weights::kCached && winograd_ && conv->EnsureWino();
    if (!wino && !conv->EnsureBlocked()) return nullptr;  // then the plain primitive exists (MakeDnnlConv)
    // Packing pays where the blocked primitive is a brgemm one; elsewhere (e.g.
    // Cin=3, where oneDNN offers its older jit kernel) plain brgemm is faster.
    if (weights_ == Weights::kCached && !wino && conv->plain && !conv->blocked_brgemm) return nullptr;
    const Tensor& filter = ctx->input(1);
    const void* data = filter.tensor_data().data();
    bool keep = false;
    if (weights_ == Weights::kCached) {
      const dnnl::memory::desc& want = wino ? conv->wino->pd.weights_desc() : conv->blocked_pd.weights_desc();
      std::lock_guard<std::mutex> lock(mu_);
      if (packed_ && packed_->wino == wino && packed_->Serves(filter, want)) return packed_;
      packed_.reset();  // another buffer: an updated variable or another layer; let the old one go
      keep = last_filter_ == data;
      last_filter_ = data;
    }
    if (!keep) {
      if (conv->plain) return nullptr;
      wino = false;  // packed for this call only: the blocked convolution (MakeDnnlConv made sure it exists)
    }
    auto p = std::make_shared<Packed>();
    p->wino = wino;
    p->md = wino ? conv->wino->pd.weights_desc() : conv->blocked_pd.weights_desc();
    const int64_t bytes = static_cast<int64_t>(p->md.get_size());
    absl::Status st = ctx->allocate_temp(tensorflow::DT_FLOAT, TensorShape({(bytes + 3) / 4}), &p->blocked);
    if (!st.ok()) {
      ctx->SetStatus(st);
      return nullptr;
    }
    auto& engine = DnnlEngine();
    dnnl::stream stream(engine);
    dnnl::memory w(p->md, engine, p->blocked.flat<float>().data());
    if (wino) {
      const Geometry& g = conv->g;
      Tensor u_t;
      st = ctx->allocate_temp(tensorflow::DT_FLOAT, TensorShape({16 * g.cin * g.cout}), &u_t);
      if (!st.ok()) {
        ctx->SetStatus(st);
        return nullptr;
      }
      float* u = u_t.flat<float>().data();
      const float* f = filter.flat<float>().data();
      ParallelRows(ctx, g.cin, 40 * g.cout,
                   [&](int64_t begin, int64_t end) { conv_core::WinoFilter(f, g.cin, g.cout, begin, end, u); });
      dnnl::memory user_u(conv->wino->user_w_md, engine, u);
      conv->wino->pack.execute(stream, {{DNNL_ARG_FROM, user_u}, {DNNL_ARG_TO, w}});
    } else {
      dnnl::memory user_w(conv->user_weights_md, engine, const_cast<char*>(filter.tensor_data().data()));
      conv->pack.execute(stream, {{DNNL_ARG_FROM, user_w}, {DNNL_ARG_TO, w}});
    }
    stream.wait();
    if (keep) {
      p->source = filter;
      std::lock_guard<std::mutex> lock(mu_);
      packed_ = p;
    }
    return p;
  }

  void RunWino(OpKernelContext* ctx, const DnnlConv& conv, const Packed& packed, const float* s) {
    const Geometry& g = conv.g;
    const WinoPlan& w = *conv.wino;
    Tensor v_t, m_t, zeros_t;
    OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DT_FLOAT, TensorShape({16 * w.chunk * g.cin}), &v_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DT_FLOAT, TensorShape({16 * w.chunk * g.cout}), &m_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DT_FLOAT, TensorShape({g.cin}), &zeros_t));
    float *v = v_t.flat<float>().data(), *m = m_t.flat<float>().data(), *zeros = zeros_t.flat<float>().data();
    std::fill(zeros, zeros + g.cin, 0.0f);
    const float* x = ctx->input(0).flat<float>().data();
    float* y = ctx->mutable_output(0)->flat<float>().data();
    dnnl::memory weights(packed.md, DnnlEngine(), const_cast<float*>(packed.blocked.flat<float>().data()));
    conv_core::WinoRun(w, weights, x, s, s + g.cout, attrs_.alpha, v, m, zeros, y,
                       [ctx](int64_t count, int64_t cost, auto&& fn) { ParallelRows(ctx, count, cost, fn); });
  }

  void RunDnnl(OpKernelContext* ctx, DnnlConv* conv, const Geometry& g, float* s) {
    auto& engine = DnnlEngine();
    try {
      std::shared_ptr<const Packed> packed = PackedFilter(ctx, conv);
      if (!ctx->status().ok()) return;
      if (packed && packed->wino) return RunWino(ctx, *conv, *packed, s);
      auto* x = const_cast<float*>(ctx->input(0).flat<float>().data());
      float* y = ctx->mutable_output(0)->flat<float>().data();
      dnnl::memory src(conv->src_md, engine, x), dst(conv->dst_md, engine, y), scale(conv->channel_md, engine, s),
          shift(conv->channel_md, engine, s + g.cout);
      dnnl::memory weights =
          packed ? dnnl::memory(packed->md, engine, const_cast<float*>(packed->blocked.flat<float>().data()))
                 : dnnl::memory(conv->user_weights_md, engine, const_cast<float*>(ctx->input(1).flat<float>().data()));
      dnnl::stream stream(engine);
      (packed ? conv->blocked : *conv->plain)
          .execute(stream, {{DNNL_ARG_SRC, src},
                            {DNNL_ARG_WEIGHTS, weights},
                            {DNNL_ARG_DST, dst},
                            {DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, scale},
                            {DNNL_ARG_ATTR_MULTIPLE_POST_OP(1) | DNNL_ARG_SRC_1, shift}});
      stream.wait();
    } catch (const dnnl::error& e) {
      ctx->SetStatus(absl::InternalError(absl::StrCat(kOp, ": oneDNN failed: ", e.what())));
    }
  }

  std::mutex mu_;
  std::map<std::vector<int64_t>, std::shared_ptr<DnnlConv>> convs_;
  std::shared_ptr<const Packed> packed_;
  const void* last_filter_ = nullptr;  // a hint only: never dereferenced, never trusted for reuse
  Weights weights_ = Weights::kCached;
  bool winograd_ = true;
#endif
  Attrs attrs_;
  Impl impl_ = Impl::kEigen;
};

}  // namespace
}  // namespace bridge

REGISTER_OP("YoloConvBnLeaky")
    .Input("x: T")
    .Input("filter: T")
    .Input("conv_bias: T")
    .Input("bn_gamma: T")
    .Input("bn_beta: T")
    .Input("bn_mean: T")
    .Input("bn_variance: T")
    .Output("y: T")
    .Attr("strides: list(int) = [1, 1, 1, 1]")
    .Attr("padding: {'SAME', 'VALID', 'EXPLICIT'} = 'SAME'")
    .Attr("explicit_paddings: list(int) = []")
    .Attr("dilations: list(int) = [1, 1, 1, 1]")
    .Attr("epsilon: float = 1e-5")
    .Attr("alpha: float = 0.1")
    .Attr("T: {float, half}")
    .SetShapeFn(bridge::ShapeFn)
    .Doc("2-D convolution (NHWC x HWIO) with inference BatchNorm folded into weights and bias, then LeakyReLU.");

REGISTER_KERNEL_BUILDER(Name("YoloConvBnLeaky").Device(tensorflow::DEVICE_CPU).TypeConstraint<float>("T"),
                        bridge::YoloConvBnLeakyOp<float>);
REGISTER_KERNEL_BUILDER(Name("YoloConvBnLeaky").Device(tensorflow::DEVICE_CPU).TypeConstraint<Eigen::half>("T"),
                        bridge::YoloConvBnLeakyOp<Eigen::half>);
