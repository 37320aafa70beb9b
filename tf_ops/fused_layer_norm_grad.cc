// FusedLayerNormGrad (the gradient's first order, registered in
// bridge/ops/fused_layer_norm/tf_op.py): dx per row, and dgamma/dbeta summed over fixed blocks
// of rows and then over the blocks in order, so the result does not depend on
// how the thread pool splits the rows. The rows' math and the shape rules are
// FusedLayerNorm's kernel core (bridge/ops/fused_layer_norm/kernel.h); the
// forward op itself is served by the generic host (host.cc).
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "common.h"
#include "ops/fused_layer_norm/kernel.h"
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
using layer_norm::GradRow;

// Rows per block of dgamma/dbeta partial sums; fixed, so the sums' order is too.
constexpr int64_t kGradBlockRows = 32;
constexpr char kGradOp[] = "FusedLayerNormGrad";

// The forward op's rules (its kernel core) in this op's name.
absl::Status Rule(const abi::Status& s) { return s.ok() ? absl::OkStatus() : ArgError(kGradOp, s.arg, s.message); }

abi::Shape Known(const Tensor& t) {
  const auto d = t.shape().dim_sizes();
  return abi::Shape(std::vector<int64_t>(d.begin(), d.end()));
}

abi::Shape ShapeOf(InferenceContext* c, ShapeHandle s) {
  if (!c->RankKnown(s)) return abi::Shape::Unknown();
  std::vector<int64_t> d;
  for (int i = 0; i < c->Rank(s); ++i) d.push_back(c->ValueKnown(c->Dim(s, i)) ? c->Value(c->Dim(s, i)) : -1);
  return abi::Shape(d);
}

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
    OP_REQUIRES_OK(ctx, Rule(layer_norm::XRule(Known(x))));
    const int64_t h = x.dim_size(x.dims() - 1);
    OP_REQUIRES(ctx, dy.shape() == x.shape(),
                ArgError(kGradOp, "dy", absl::StrCat("must have the shape of x ", Dims(x.shape()), ", got ",
                                                     Dims(dy.shape()))));
    OP_REQUIRES_OK(ctx, Rule(layer_norm::ParamRule("gamma", Known(x), Known(gamma))));
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
  TF_RETURN_IF_ERROR(Rule(layer_norm::XRule(ShapeOf(c, x))));
  ShapeHandle merged;
  if (!c->Merge(dy, x, &merged).ok()) {
    return ArgError(kGradOp, "dy", absl::StrCat("must have the shape of x ", Dims(c, x), ", got ", Dims(c, dy)));
  }
  TF_RETURN_IF_ERROR(Rule(layer_norm::ParamRule("gamma", ShapeOf(c, merged), ShapeOf(c, gamma))));
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
