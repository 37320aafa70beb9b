// The generic onnxruntime host: one custom op per kernel core of this build
// (spec/cores.h, rendered from the specs; the ABI is bridge/kernels/abi.h). The
// node's attributes are read by the spec's table, the inputs checked by the
// core's one shape function, the outputs allocated here, and the core computes
// on the session's intra-op threads (with its per-node state where it has one:
// its weights are the same on every call when they are constant initializers).
#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "bridge_ort.h"
#include "spec/cores.h"

namespace bridge {
namespace {

// The rendered Read() calls Get(name, &field, has_default); the attribute table
// (the spec's defaults as text) fills in what the node leaves out.
struct Reader {
  const Attrs& a;
  void Get(const char* name, float* v, bool) const { *v = a.f(name); }
  void Get(const char* name, int64_t* v, bool) const { *v = a.i(name); }
  void Get(const char* name, std::string* v, bool) const { *v = a.s(name); }
  void Get(const char* name, std::vector<float>* v, bool) const { *v = a.floats(name); }
  void Get(const char* name, std::vector<int64_t>* v, bool) const { *v = a.ints(name); }
};

abi::ParallelFor Pool(const Ctx& ctx) {
  return [&ctx](int64_t count, int64_t cost, const abi::Range& fn) {
    const abi::Split split = abi::SplitWork(count, cost);
    ctx.parallel_for(static_cast<size_t>(split.tasks), [&](size_t t) {
      const int64_t b = static_cast<int64_t>(t) * split.per;
      fn(b, std::min(count, b + split.per));
    });
  };
}

abi::DType TypeOf(const View& v) { return is_half(v) ? abi::DType::kFloat16 : abi::DType::kFloat32; }

template <typename Core>
const OpDef& DefOf();

template <typename Core>
struct Hosted : Kernel {
  using Spec = typename Core::Spec;
  typename Core::Params params;

  abi::NodeState<Core> state;
  bool constant_weights = false;  // every weight input is a constant initializer
  abi::SameBytes seen;            // else: the weights compared with the previous call's

  Hosted(const Attrs& attrs, const OrtKernelInfo* info) {
    typename Spec::OnnxAttrs a;
    Spec::Read(Reader{attrs}, &a);
    abi::Status s = Core::Read(a, &params);
    if (!s.ok()) throw OpFailure(Spec::kName, s.arg, s.message);
    s = state.Init(params);
    if (!s.ok()) throw std::invalid_argument(abi::Describe(Spec::kName, s));
    constexpr int from = abi::WeightsFrom<Core>();
    constant_weights = from >= 0 && info;
    for (int i = from; i < Spec::kNumInputs && constant_weights; ++i) {
      int is_constant = 0;
      const OrtValue* value = nullptr;
      if (OrtStatus* st = g_api->KernelInfoGetConstantInput_tensor(info, i, &is_constant, &value)) {
        g_api->ReleaseStatus(st);
        is_constant = 0;
      }
      constant_weights = is_constant && value;
    }
  }

  void compute(Ctx& ctx) override {
    std::vector<View> views;
    std::vector<abi::Shape> shapes;
    for (int i = 0; i < Spec::kNumInputs; ++i) {
      views.push_back(ctx.input(i));
      shapes.emplace_back(views.back().shape);
    }
    check_same_type(Spec::kName, views, DefOf<Core>());
    std::vector<abi::Shape> out_shapes;
    const abi::Status s = Core::Shapes(params, shapes, &out_shapes);
    if (!s.ok()) throw OpFailure(Spec::kName, s.arg, s.message);
    const abi::DType type = TypeOf(views[0]);
    std::vector<abi::In> in;
    for (const View& v : views) in.push_back({v.data, v.shape, type});
    std::vector<abi::Out> out;
    for (int i = 0; i < Spec::kNumOutputs; ++i) {
      const std::vector<int64_t>& shape = out_shapes[i].d;
      out.push_back({ctx.output(i, shape), shape, type});
    }
    constexpr int from = abi::WeightsFrom<Core>();
    const abi::ParallelFor pool = Pool(ctx);
    const bool same = from >= 0 && (constant_weights || seen.Check(in, from, pool));
    state.Compute(params, same, in, out, pool);
  }
};

template <typename Core>
Kernel* Create(const Attrs& attrs, const OrtKernelInfo* info) {
  return new Hosted<Core>(attrs, info);
}

template <typename Core>
const OpDef& DefOf() {
  using Spec = typename Core::Spec;
  static const OpDef def = [] {
    OpDef d{Spec::kName, {}, {}, {}, Create<Core>, Spec::kDomain};
    d.inputs.assign(Spec::kInputs, Spec::kInputs + Spec::kNumInputs);
    d.outputs.assign(Spec::kOutputs, Spec::kOutputs + Spec::kNumOutputs);
    d.attrs = attr_defs<Spec>();
    return d;
  }();
  return def;
}

#define BRIDGE_ORT_HOST(Op) const int kRegistered##Op = register_op(&DefOf<core::Op>());
BRIDGE_CORES(BRIDGE_ORT_HOST)
#undef BRIDGE_ORT_HOST

}  // namespace
}  // namespace bridge
