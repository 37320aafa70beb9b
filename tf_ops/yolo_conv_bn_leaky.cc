// YoloConvBnLeaky: 2-D convolution (NHWC x HWIO) with inference BatchNorm folded
// in, then LeakyReLU (contract: shared/ops.md; Python spec:
// bridge/ops/yolo_conv_bn_leaky.py).
//
// The fold is applied where it costs nothing: conv(x, filter * s) equals
// conv(x, filter) * s per output channel, so the filter is never rewritten; the
// scale s = gamma / sqrt(var + eps) and the shift b' = (conv_bias - mean) * s + beta
// (conv bias and BN mean combined once) are applied in the output pass together
// with the LeakyReLU, while the tile is still in cache.
//
// Two convolution roads, chosen when the kernel is constructed from the
// environment variable BRIDGE_CONV_IMPL:
//   onednn  oneDNN's convolution primitive (the library is built with it when
//           bridge.native.onednn_root() finds an install, e.g. PyPI's
//           onednn-devel-cpu-gomp): the brgemm convolution reads the HWIO filter
//           in place and applies z * s, + b' and LeakyReLU as post-ops; where only
//           oneDNN's blocked filter layout has a fast kernel, a reorder that also
//           multiplies by s feeds it (BRIDGE_DNNL_WEIGHTS=blocked forces that).
//           Primitives are cached per shape. oneDNN runs on its own OpenMP
//           threads: the PyPI build is OpenMP, not threadpool, so TF's pool cannot
//           drive it. float32 only.
//   eigen   im2col of 256-pixel tiles into a per-tile buffer, Eigen's GEMM (one
//           thread per tile; tiles spread over the op's own thread pool), then the
//           fused scale + shift + LeakyReLU pass on the tile in cache. 1x1 stride-1
//           unpadded convolutions multiply the NHWC input directly; layers with few
//           pixels and many channels (13x13x1024) are split along Cout.
//   unset   onednn where built (measured 10-25% faster at YOLOv3's shapes on
//           these 2 cores), else eigen. float16 always takes the eigen road
//           (widened to float32 on the fly, accumulated in float32): oneDNN's f16
//           convolution needs AVX512-FP16.
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
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "unsupported/Eigen/CXX11/Tensor"

#if BRIDGE_HAVE_DNNL
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
dnnl::engine& DnnlEngine() {
  static dnnl::engine* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

// What primitive creation (~ms) produced for one geometry. oneDNN's brgemm
// convolution reads HWIO weights as they are, so the fold goes into post-ops
// (z * s, + b', LeakyReLU) and the filter is used in place. Where oneDNN only has
// a fast kernel for its blocked layout, a reorder that also multiplies by s feeds
// it instead, and b' is the convolution's bias.
struct DnnlConv {
  bool plain = true;
  dnnl::convolution_forward::primitive_desc conv_pd;
  dnnl::convolution_forward conv;
  dnnl::reorder reorder;
  dnnl::memory::desc src_md, user_weights_md, dst_md, vec_md, channel_md;
};

bool FastImpl(const std::string& impl) { return impl.rfind("brg", 0) == 0 || impl.rfind("jit", 0) == 0; }

std::shared_ptr<DnnlConv> MakeDnnlConv(const Geometry& g, float alpha) {
  using tag = dnnl::memory::format_tag;
  using dt = dnnl::memory::data_type;
  auto& engine = DnnlEngine();
  auto p = std::make_shared<DnnlConv>();
  p->src_md = dnnl::memory::desc({g.n, g.cin, g.h, g.w}, dt::f32, tag::nhwc);
  p->dst_md = dnnl::memory::desc({g.n, g.cout, g.oh, g.ow}, dt::f32, tag::nhwc);
  p->user_weights_md = dnnl::memory::desc({g.cout, g.cin, g.kh, g.kw}, dt::f32, tag::hwio);
  p->vec_md = dnnl::memory::desc({g.cout}, dt::f32, tag::x);
  p->channel_md = dnnl::memory::desc({1, g.cout, 1, 1}, dt::f32, tag::nchw);
  const dnnl::memory::dims strides = {g.sh, g.sw}, dilations = {g.dh - 1, g.dw - 1},
                           pad_l = {g.pad_top, g.pad_left}, pad_r = {g.pad_bottom, g.pad_right};
  const char* want = std::getenv("BRIDGE_DNNL_WEIGHTS");
  if (!want || std::string(want) != "blocked") {
    dnnl::post_ops ops;
    ops.append_binary(dnnl::algorithm::binary_mul, p->channel_md);
    ops.append_binary(dnnl::algorithm::binary_add, p->channel_md);
    ops.append_eltwise(dnnl::algorithm::eltwise_relu, alpha, 0.0f);  // relu with a slope is LeakyReLU
    dnnl::primitive_attr attr;
    attr.set_post_ops(ops);
    try {
      p->conv_pd = dnnl::convolution_forward::primitive_desc(
          engine, dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, p->src_md,
          p->user_weights_md, p->dst_md, strides, dilations, pad_l, pad_r, attr);
      if (FastImpl(p->conv_pd.impl_info_str())) {
        p->conv = dnnl::convolution_forward(p->conv_pd);
        return p;
      }
    } catch (const dnnl::error&) {
    }
  }
  p->plain = false;
  dnnl::memory::desc weights_any({g.cout, g.cin, g.kh, g.kw}, dt::f32, tag::any);
  dnnl::post_ops ops;
  ops.append_eltwise(dnnl::algorithm::eltwise_relu, alpha, 0.0f);
  dnnl::primitive_attr conv_attr;
  conv_attr.set_post_ops(ops);
  p->conv_pd = dnnl::convolution_forward::primitive_desc(
      engine, dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, p->src_md, weights_any,
      p->vec_md, p->dst_md, strides, dilations, pad_l, pad_r, conv_attr);
  p->conv = dnnl::convolution_forward(p->conv_pd);
  dnnl::primitive_attr reorder_attr;
  reorder_attr.set_scales_mask(DNNL_ARG_SRC, 1 << 0);  // one scale per output channel (dim 0, O)
  p->reorder = dnnl::reorder(dnnl::reorder::primitive_desc(engine, p->user_weights_md, engine,
                                                           p->conv_pd.weights_desc(), reorder_attr));
  return p;
}
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

    // The fold, in double: s = gamma / sqrt(var + eps), b' = (conv_bias - mean) * s + beta.
    Tensor fold_t;
    OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DT_FLOAT, TensorShape({2, g.cout}), &fold_t));
    float* s = fold_t.flat<float>().data();
    float* b = s + g.cout;
    {
      const T* p[5];
      for (int i = 0; i < 5; ++i) p[i] = ctx->input(2 + i).flat<T>().data();
      for (int64_t o = 0; o < g.cout; ++o) {
        double scale = static_cast<double>(static_cast<float>(p[1][o])) /
                       std::sqrt(static_cast<double>(static_cast<float>(p[4][o])) + attrs_.epsilon);
        s[o] = static_cast<float>(scale);
        b[o] = static_cast<float>((static_cast<double>(static_cast<float>(p[0][o])) -
                                   static_cast<float>(p[3][o])) * scale + static_cast<float>(p[2][o]));
      }
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
        std::shared_ptr<DnnlConv> conv;
        OP_REQUIRES_OK(ctx, GetDnnlConv(g, &conv));
        if (conv) return RunDnnl(ctx, *conv, g, fold_t);
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
  // Primitive creation costs milliseconds: one per geometry, kept (a handful).
  absl::Status GetDnnlConv(const Geometry& g, std::shared_ptr<DnnlConv>* conv) {
    std::vector<int64_t> key = {g.n, g.h, g.w, g.cin, g.kh, g.kw, g.cout, g.oh, g.ow};
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      *conv = it->second;
      return absl::OkStatus();
    }
    try {
      *conv = MakeDnnlConv(g, attrs_.alpha);
    } catch (const dnnl::error& e) {
      // No oneDNN implementation for this geometry: the eigen road takes it.
      *conv = nullptr;
    }
    if (cache_.size() >= 16) cache_.clear();
    cache_[key] = *conv;
    return absl::OkStatus();
  }

  void RunDnnl(OpKernelContext* ctx, const DnnlConv& p, const Geometry& g, Tensor& fold_t) {
    auto& engine = DnnlEngine();
    float* s = fold_t.flat<float>().data();
    auto* x = const_cast<float*>(ctx->input(0).flat<float>().data());
    auto* filter = const_cast<float*>(ctx->input(1).flat<float>().data());
    dnnl::memory src(p.src_md, engine, x), user_w(p.user_weights_md, engine, filter),
        dst(p.dst_md, engine, ctx->mutable_output(0)->flat<float>().data());
    try {
      dnnl::stream stream(engine);
      if (p.plain) {
        dnnl::memory scale(p.channel_md, engine, s), shift(p.channel_md, engine, s + g.cout);
        p.conv.execute(stream, {{DNNL_ARG_SRC, src},
                                {DNNL_ARG_WEIGHTS, user_w},
                                {DNNL_ARG_DST, dst},
                                {DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, scale},
                                {DNNL_ARG_ATTR_MULTIPLE_POST_OP(1) | DNNL_ARG_SRC_1, shift}});
      } else {
        Tensor weights_t;
        int64_t bytes = static_cast<int64_t>(p.conv_pd.weights_desc().get_size());
        OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DT_FLOAT, TensorShape({(bytes + 3) / 4}), &weights_t));
        dnnl::memory w(p.conv_pd.weights_desc(), engine, weights_t.flat<float>().data()), scale(p.vec_md, engine, s),
            bias(p.vec_md, engine, s + g.cout);
        p.reorder.execute(stream,
                          {{DNNL_ARG_FROM, user_w}, {DNNL_ARG_TO, w}, {DNNL_ARG_ATTR_SCALES | DNNL_ARG_SRC, scale}});
        p.conv.execute(stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_BIAS, bias}, {DNNL_ARG_DST, dst}});
      }
      stream.wait();
    } catch (const dnnl::error& e) {
      ctx->SetStatus(absl::InternalError(absl::StrCat(kOp, ": oneDNN failed: ", e.what())));
    }
  }

  std::mutex mu_;
  std::map<std::vector<int64_t>, std::shared_ptr<DnnlConv>> cache_;
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
