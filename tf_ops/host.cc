// The generic TensorFlow host: for every kernel core of this build (spec/cores.h,
// rendered from the specs; the ABI is bridge/kernels/abi.h) the op's
// REGISTER_OP (tensors, attributes, defaults and T's types from the rendered
// header), its shape function (the core's one shape rule on partial shapes) and
// a CPU OpKernel per dtype, which checks each call by the same rule and runs
// the core on the op's own device thread pool (with the core's per-node state,
// where it has one: abi.h).
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "common.h"
#include "spec/cores.h"
#include "tensorflow/core/framework/kernel_def_builder.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace bridge {
namespace {

using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;
using tensorflow::shape_inference::InferenceContext;
using tensorflow::shape_inference::ShapeHandle;

// The rendered Read() calls Get(name, &field, has_default); TensorFlow fills in
// the registered defaults itself (and appends a list to what the field holds:
// it is emptied first). The first failure is kept.
template <typename Source>
struct Reader {
  const Source& src;
  mutable absl::Status status;
  template <typename T>
  void Get(const char* name, T* v, bool) const {
    *v = T();
    if (status.ok()) status = src.GetAttr(name, v);
  }
  // list(int) as TensorFlow's own kernels (Conv2D's strides) read it: int32, so a
  // value out of that range gets TensorFlow's words before the core sees it.
  void Get(const char* name, std::vector<int64_t>* v, bool) const {
    std::vector<int32_t> narrow;
    if (status.ok()) status = src.GetAttr(name, &narrow);
    v->assign(narrow.begin(), narrow.end());
  }
};

// The core's Params from the node's attributes (a kernel's construction or a
// shape function's context): the same checks, the same words.
template <typename Core, typename Source>
absl::Status ReadParams(const Source& src, typename Core::Params* params) {
  using Spec = typename Core::Spec;
  typename Spec::Attrs attrs;
  Reader<Source> reader{src, absl::OkStatus()};
  Spec::Read(reader, &attrs);
  if (!reader.status.ok()) return reader.status;
  const abi::Status s = Core::Read(attrs, params);
  return s.ok() ? absl::OkStatus() : ArgError(Spec::kName, s.arg, s.message);
}

abi::Shape ShapeOf(InferenceContext* c, ShapeHandle s) {
  if (!c->RankKnown(s)) return abi::Shape::Unknown();
  std::vector<int64_t> d;
  for (int i = 0; i < c->Rank(s); ++i) {
    auto dim = c->Dim(s, i);
    d.push_back(c->ValueKnown(dim) ? c->Value(dim) : -1);
  }
  return abi::Shape(d);
}

ShapeHandle HandleOf(InferenceContext* c, const abi::Shape& s) {
  if (!s.known) return c->UnknownShape();
  std::vector<tensorflow::shape_inference::DimensionHandle> dims;
  for (int64_t v : s.d) dims.push_back(v < 0 ? c->UnknownDim() : c->MakeDim(v));
  return c->MakeShape(dims);
}

template <typename Core>
absl::Status ShapeFn(InferenceContext* c) {
  typename Core::Params params;
  TF_RETURN_IF_ERROR(ReadParams<Core>(*c, &params));
  std::vector<abi::Shape> in, out;
  for (int i = 0; i < c->num_inputs(); ++i) in.push_back(ShapeOf(c, c->input(i)));
  const abi::Status s = Core::Shapes(params, in, &out);
  if (!s.ok()) return ArgError(Core::Spec::kName, s.arg, s.message);
  for (size_t i = 0; i < out.size(); ++i) c->set_output(static_cast<int>(i), HandleOf(c, out[i]));
  return absl::OkStatus();
}

template <typename Core, typename T>
class HostOp : public OpKernel {
 public:
  using Spec = typename Core::Spec;
  explicit HostOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadParams<Core>(*ctx, &params_));
    const abi::Status s = state_.Init(params_);
    OP_REQUIRES(ctx, s.ok(), absl::InvalidArgumentError(abi::Describe(Spec::kName, s)));
  }

  void Compute(OpKernelContext* ctx) override {
    std::vector<abi::Shape> shapes, out_shapes;
    for (int i = 0; i < ctx->num_inputs(); ++i) {
      const auto dims = ctx->input(i).shape().dim_sizes();
      shapes.emplace_back(std::vector<int64_t>(dims.begin(), dims.end()));
    }
    const abi::Status s = Core::Shapes(params_, shapes, &out_shapes);
    OP_REQUIRES(ctx, s.ok(), ArgError(Spec::kName, s.arg, s.message));
    constexpr abi::DType type = std::is_same<T, float>::value ? abi::DType::kFloat32 : abi::DType::kFloat16;
    std::vector<abi::In> in;
    for (int i = 0; i < ctx->num_inputs(); ++i) {
      const Tensor& t = ctx->input(i);
      in.push_back({t.tensor_data().data(), shapes[i].d, type});
    }
    std::vector<abi::Out> out;
    for (int i = 0; i < ctx->num_outputs(); ++i) {
      TensorShape shape;
      OP_REQUIRES_OK(ctx, TensorShape::BuildTensorShape(out_shapes[i].d, &shape));
      Tensor* t = nullptr;
      if (i == 0 && Core::kInplaceInput >= 0) {  // the input's buffer when nothing else holds it
        OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({Core::kInplaceInput}, 0, shape, &t));
      } else {
        OP_REQUIRES_OK(ctx, ctx->allocate_output(i, shape, &t));
      }
      out.push_back({const_cast<char*>(t->tensor_data().data()), out_shapes[i].d, type});
    }
    state_.Compute(params_, SameWeights(ctx), in, out, [ctx](int64_t count, int64_t cost, const abi::Range& fn) {
      ParallelRows(ctx, count, cost, fn);
    });
  }

 private:
  // Whether the weights are the previous call's buffers. The kernel holds those,
  // and holding them is what makes this sound: TensorFlow writes into a
  // variable's buffer in place only while nothing else references it
  // (AssignAdd/Sub and the optimizers copy on write, Assign swaps in a new
  // buffer), and a buffer still alive cannot reappear at its address as another
  // tensor; changed values thus always arrive as another buffer. Outside that
  // promise: TF1 reference variables and memory written behind TensorFlow's back.
  bool SameWeights(OpKernelContext* ctx) {
    constexpr int from = abi::WeightsFrom<Core>();
    if (from < 0) return false;
    std::lock_guard<std::mutex> lock(mu_);
    bool same = static_cast<int>(held_.size()) == ctx->num_inputs() - from;
    for (int i = from; i < ctx->num_inputs() && same; ++i) {
      const Tensor& t = ctx->input(i);
      const Tensor& h = held_[i - from];
      same = h.SharesBufferWith(t) && h.tensor_data().data() == t.tensor_data().data() && h.shape() == t.shape() &&
             h.dtype() == t.dtype();
    }
    if (!same) {
      held_.clear();
      for (int i = from; i < ctx->num_inputs(); ++i) held_.push_back(ctx->input(i));
    }
    return same;
  }

  typename Core::Params params_;
  abi::NodeState<Core> state_;
  std::mutex mu_;
  std::vector<Tensor> held_;
};

template <typename Core, typename T>
void RegisterKernel() {
  static tensorflow::kernel_factory::OpKernelRegistrar registrar(
      tensorflow::register_kernel::Name(Core::Spec::kName)
          .Device(tensorflow::DEVICE_CPU)
          .template TypeConstraint<T>("T")
          .Build(),
      "bridge::HostOp", [](OpKernelConstruction* ctx) -> OpKernel* { return new HostOp<Core, T>(ctx); });
}

template <typename Core>
int Register() {
  using Spec = typename Core::Spec;
  tensorflow::register_op::OpDefBuilderWrapper op(Spec::kName);
  for (const char* name : Spec::kInputs) op.Input(std::string(name) + ": T");
  for (const char* name : Spec::kOutputs) op.Output(std::string(name) + ": T");
  for (int i = 0; i < Spec::kNumAttrs; ++i) op.Attr(Spec::kAttrs[i].tf);
  op.Attr(std::string("T: {") + Spec::kTfTypes + "}");
  op.SetShapeFn(ShapeFn<Core>);
  op.Doc(Spec::kDoc);
  op();  // registers the OpDef
  RegisterKernel<Core, float>();
  if (Spec::kFloat16) RegisterKernel<Core, Eigen::half>();
  return 0;
}

#define BRIDGE_TF_HOST(Op) const int kRegistered##Op = Register<core::Op>();
BRIDGE_CORES(BRIDGE_TF_HOST)
#undef BRIDGE_TF_HOST

}  // namespace
}  // namespace bridge
