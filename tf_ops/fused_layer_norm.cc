// FusedLayerNorm: layer normalization over the last axis in one pass over memory
// (contract: shared/ops.md; Python spec: bridge/ops/fused_layer_norm.py).
//
// Each row is read from memory once and then worked on in cache by the row math
// of bridge/kernels/fused_layer_norm.h (shared with the onnxruntime kernel).
// float16 rows are widened to a float buffer and everything accumulates in float32.
//
// FusedLayerNormGrad (the gradient's first order, registered in
// fused_layer_norm_op.py): dx per row, and dgamma/dbeta summed over fixed blocks of
// rows and then over the blocks in order, so the result does not depend on how
// the thread pool splits the rows.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "common.h"
#include "kernels/fused_layer_norm.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace bridge {
namespace {

using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::shape_inference::InferenceContext;
using tensorflow::shape_inference::ShapeHandle;

constexpr char kOp[] = "FusedLayerNorm";
constexpr int64_t kStreamBytes = int64_t{16} << 20;
constexpr int64_t kAhead = 2;  // rows prefetched ahead

// gamma or beta (`arg`) of the op `op` must be [H], H the last dim of x: at
// shape inference (unknown sizes pass) and in the kernels, in the same words.
absl::Status CheckParamShape(InferenceContext* c, const char* op, const char* arg, ShapeHandle x, ShapeHandle p) {
  if (!c->RankKnown(p)) return absl::OkStatus();
  auto h = c->RankKnown(x) ? c->Dim(x, -1) : c->UnknownDim();
  if (c->Rank(p) == 1 &&
      !(c->ValueKnown(h) && c->ValueKnown(c->Dim(p, 0)) && c->Value(c->Dim(p, 0)) != c->Value(h))) {
    return absl::OkStatus();
  }
  return ArgError(op, arg, absl::StrCat("must have shape [H]=[", c->ValueKnown(h) ? absl::StrCat(c->Value(h)) : "?",
                                        "] (the last dim of x ", Dims(c, x), "), got ", Dims(c, p)));
}

absl::Status CheckParamShape(const char* op, const char* arg, const Tensor& x, const Tensor& p) {
  const int64_t h = x.dim_size(x.dims() - 1);
  if (p.dims() == 1 && p.dim_size(0) == h) return absl::OkStatus();
  return ArgError(op, arg, absl::StrCat("must have shape [H]=[", h, "] (the last dim of x ", Dims(x.shape()),
                                        "), got ", Dims(p.shape())));
}

absl::Status ShapeFn(InferenceContext* c) {
  ShapeHandle x = c->input(0);
  if (c->RankKnown(x) && c->Rank(x) == 0) {
    return ArgError(kOp, "x", "must have rank >= 1, got a scalar (shape [])");
  }
  TF_RETURN_IF_ERROR(CheckParamShape(c, kOp, "gamma", x, c->input(1)));
  TF_RETURN_IF_ERROR(CheckParamShape(c, kOp, "beta", x, c->input(2)));
  c->set_output(0, x);
  return absl::OkStatus();
}

using layer_norm::GradRow;
using layer_norm::NormalizeRow;

template <typename T>
class FusedLayerNormOp : public OpKernel {
 public:
  explicit FusedLayerNormOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("epsilon", &epsilon_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& gamma = ctx->input(1);
    const Tensor& beta = ctx->input(2);
    OP_REQUIRES(ctx, x.dims() >= 1, ArgError(kOp, "x", "must have rank >= 1, got a scalar (shape [])"));
    const int64_t h = x.dim_size(x.dims() - 1);
    OP_REQUIRES_OK(ctx, CheckParamShape(kOp, "gamma", x, gamma));
    OP_REQUIRES_OK(ctx, CheckParamShape(kOp, "beta", x, beta));
    Tensor* y = nullptr;
    // x's buffer becomes y's when nothing else holds x (each row is read before
    // it is written).
    OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({0}, 0, x.shape(), &y));
    if (x.NumElements() == 0) return;

    const int64_t rows = x.NumElements() / h;
    const T* xp = x.flat<T>().data();
    T* yp = y->flat<T>().data();
    // gamma and beta as float, once per call (they are read by every row).
    std::vector<float> gb;
    const float* g;
    const float* b;
    if constexpr (std::is_same<T, float>::value) {
      g = reinterpret_cast<const float*>(gamma.flat<T>().data());
      b = reinterpret_cast<const float*>(beta.flat<T>().data());
    } else {
      gb.resize(2 * h);
      ToFloats(gamma.flat<T>().data(), gb.data(), h);
      ToFloats(beta.flat<T>().data(), gb.data() + h, h);
      g = gb.data();
      b = gb.data() + h;
    }
    const float eps = epsilon_;
    // Above this size y will not stay in cache for the next op anyway.
    const bool stream = x.TotalBytes() >= kStreamBytes;
    ParallelRows(ctx, rows, 6 * h, [=](int64_t begin, int64_t end) {
      std::vector<float> buf;
      if constexpr (std::is_same<T, float>::value) {
        const float* xf = reinterpret_cast<const float*>(xp);
        float* yf = reinterpret_cast<float*>(yp);
        if (stream) buf.resize(h);
        for (int64_t r = begin; r < end; ++r) {
          if (r + kAhead < end) Prefetch(xf + (r + kAhead) * h, h * sizeof(float));
          if (stream) {
            NormalizeRow(xf + r * h, h, g, b, eps, buf.data());
            StreamFloats(buf.data(), yf + r * h, h);
          } else {
            NormalizeRow(xf + r * h, h, g, b, eps, yf + r * h);
          }
        }
        if (stream) StreamFence();
      } else {
        buf.resize(h);
        for (int64_t r = begin; r < end; ++r) {
          if (r + kAhead < end) Prefetch(xp + (r + kAhead) * h, h * sizeof(T));
          ToFloats(xp + r * h, buf.data(), h);
          NormalizeRow(buf.data(), h, g, b, eps, buf.data());
          FromFloats(buf.data(), yp + r * h, h);
        }
      }
    });
  }

 private:
  float epsilon_;
};

// Rows per block of dgamma/dbeta partial sums; fixed, so the sums' order is too.
constexpr int64_t kGradBlockRows = 32;
constexpr char kGradOp[] = "FusedLayerNormGrad";

template <typename T>
class FusedLayerNormGradOp : public OpKernel {
 public:
  explicit FusedLayerNormGradOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("epsilon", &epsilon_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& dy = ctx->input(0);
    const Tensor& x = ctx->input(1);
    const Tensor& gamma = ctx->input(2);
    OP_REQUIRES(ctx, x.dims() >= 1, ArgError(kGradOp, "x", "must have rank >= 1, got a scalar (shape [])"));
    const int64_t h = x.dim_size(x.dims() - 1);
    OP_REQUIRES(ctx, dy.shape() == x.shape(),
                ArgError(kGradOp, "dy", absl::StrCat("must have the shape of x ", Dims(x.shape()), ", got ",
                                                     Dims(dy.shape()))));
    OP_REQUIRES_OK(ctx, CheckParamShape(kGradOp, "gamma", x, gamma));
    Tensor *dx = nullptr, *dgamma = nullptr, *dbeta = nullptr;
    OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({0}, 0, x.shape(), &dx));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, gamma.shape(), &dgamma));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, gamma.shape(), &dbeta));
    const int64_t rows = h ? x.NumElements() / h : 0;
    T* dgp = dgamma->flat<T>().data();
    T* dbp = dbeta->flat<T>().data();
    if (rows == 0) {  // sums of nothing
      std::fill(dgp, dgp + h, static_cast<T>(0.0f));
      std::fill(dbp, dbp + h, static_cast<T>(0.0f));
      return;
    }
    std::vector<float> g(h);
    ToFloats(gamma.flat<T>().data(), g.data(), h);
    const int64_t blocks = (rows + kGradBlockRows - 1) / kGradBlockRows;
    std::vector<float> partial(static_cast<size_t>(2 * blocks * h), 0.0f);  // per block: dgamma's, dbeta's
    const T* dyp = dy.flat<T>().data();
    const T* xp = x.flat<T>().data();
    T* dxp = dx->flat<T>().data();
    const float eps = epsilon_;
    const float* gp = g.data();
    float* pp = partial.data();
    ParallelRows(ctx, blocks, 12 * h * kGradBlockRows, [=](int64_t begin, int64_t end) {
      std::vector<float> buf;
      if constexpr (!std::is_same<T, float>::value) buf.resize(3 * h);
      for (int64_t blk = begin; blk < end; ++blk) {
        float* dgs = pp + 2 * blk * h;
        float* dbs = dgs + h;
        const int64_t r1 = std::min(rows, (blk + 1) * kGradBlockRows);
        for (int64_t r = blk * kGradBlockRows; r < r1; ++r) {
          if constexpr (std::is_same<T, float>::value) {
            GradRow(dyp + r * h, xp + r * h, h, gp, eps, dxp + r * h, dgs, dbs);
          } else {
            float* fdy = buf.data();
            float* fx = fdy + h;
            float* fdx = fx + h;
            ToFloats(dyp + r * h, fdy, h);
            ToFloats(xp + r * h, fx, h);
            GradRow(fdy, fx, h, gp, eps, fdx, dgs, dbs);
            FromFloats(fdx, dxp + r * h, h);
          }
        }
      }
    });
    // The blocks' sums in order (in double: there may be many), columns in parallel.
    ParallelRows(ctx, h, 2 * blocks, [=](int64_t begin, int64_t end) {
      for (int64_t j = begin; j < end; ++j) {
        double sg = 0.0, sb = 0.0;
        for (int64_t blk = 0; blk < blocks; ++blk) {
          sg += pp[2 * blk * h + j];
          sb += pp[(2 * blk + 1) * h + j];
        }
        dgp[j] = static_cast<T>(static_cast<float>(sg));
        dbp[j] = static_cast<T>(static_cast<float>(sb));
      }
    });
  }

 private:
  float epsilon_;
};

// Also the GPU kernel's input check (cuda/tf_gpu.h runs it on the call's shapes).
absl::Status GradShapeFn(InferenceContext* c) {
  ShapeHandle dy = c->input(0), x = c->input(1), gamma = c->input(2);
  if (c->RankKnown(x) && c->Rank(x) == 0) return ArgError(kGradOp, "x", "must have rank >= 1, got a scalar (shape [])");
  ShapeHandle merged;
  if (!c->Merge(dy, x, &merged).ok()) {
    return ArgError(kGradOp, "dy", absl::StrCat("must have the shape of x ", Dims(c, x), ", got ", Dims(c, dy)));
  }
  TF_RETURN_IF_ERROR(CheckParamShape(c, kGradOp, "gamma", merged, gamma));
  auto h = c->RankKnown(merged) ? c->Dim(merged, -1) : c->UnknownDim();
  c->set_output(0, merged);
  c->set_output(1, c->Vector(h));
  c->set_output(2, c->Vector(h));
  return absl::OkStatus();
}

}  // namespace
}  // namespace bridge

REGISTER_OP("FusedLayerNormGrad")
    .Input("dy: T")
    .Input("x: T")
    .Input("gamma: T")
    .Output("dx: T")
    .Output("dgamma: T")
    .Output("dbeta: T")
    .Attr("epsilon: float")
    .Attr("T: {float, half}")
    .SetShapeFn(bridge::GradShapeFn)
    .Doc("FusedLayerNorm's gradients (dx, dgamma, dbeta) for the output gradient dy.");

REGISTER_KERNEL_BUILDER(Name("FusedLayerNormGrad").Device(tensorflow::DEVICE_CPU).TypeConstraint<float>("T"),
                        bridge::FusedLayerNormGradOp<float>);
REGISTER_KERNEL_BUILDER(Name("FusedLayerNormGrad").Device(tensorflow::DEVICE_CPU).TypeConstraint<Eigen::half>("T"),
                        bridge::FusedLayerNormGradOp<Eigen::half>);

REGISTER_OP("FusedLayerNorm")
    .Input("x: T")
    .Input("gamma: T")
    .Input("beta: T")
    .Output("y: T")
    .Attr("epsilon: float = 1e-6")
    .Attr("T: {float, half}")
    .SetShapeFn(bridge::ShapeFn)
    .Doc("Layer normalization over the last axis: y = gamma*(x-mean)/sqrt(var+epsilon) + beta.");

REGISTER_KERNEL_BUILDER(Name("FusedLayerNorm").Device(tensorflow::DEVICE_CPU).TypeConstraint<float>("T"),
                        bridge::FusedLayerNormOp<float>);
REGISTER_KERNEL_BUILDER(Name("FusedLayerNorm").Device(tensorflow::DEVICE_CPU).TypeConstraint<Eigen::half>("T"),
                        bridge::FusedLayerNormOp<Eigen::half>);
