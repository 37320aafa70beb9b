// The generic LiteRT host: one custom-op node kernel per kernel core of this
// build (spec/cores.h, rendered from the specs; the ABI is bridge/kernels/abi.h).
// The node's custom options are read by the spec's attribute list (TensorFlow's
// names and defaults: a .tflite carries the TF node's attributes), the shapes
// checked by the core's one shape function, and the core computes on OpenMP
// threads (with its per-node state where it has one: abi.h).
#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "common.h"
#include "spec/cores.h"

namespace bridge {
namespace litert {
namespace {

// The rendered Read() calls Get(name, &field, has_default): a default is the
// field's value as the rendered struct initialised it.
struct Reader {
  const Attrs& a;
  template <typename T>
  const T* fallback(T* v, bool has_default) const {
    return has_default ? v : nullptr;
  }
  void Get(const char* name, float* v, bool d) const { *v = a.f(name, fallback(v, d)); }
  void Get(const char* name, int64_t* v, bool d) const { *v = a.i(name, fallback(v, d)); }
  void Get(const char* name, std::string* v, bool d) const { *v = a.s(name, fallback(v, d)); }
  void Get(const char* name, std::vector<float>* v, bool d) const { *v = a.floats(name, fallback(v, d)); }
  void Get(const char* name, std::vector<int64_t>* v, bool d) const { *v = a.ints(name, fallback(v, d)); }
};

// Dynamic: a thread whose core another process shares takes fewer pieces.
void ParallelFor(int64_t count, int64_t cost, const abi::Range& fn) {
  const abi::Split split = abi::SplitWork(count, cost);
#pragma omp parallel for schedule(dynamic, 1) if (split.tasks > 1)
  for (int64_t t = 0; t < split.tasks; ++t) fn(t * split.per, std::min(count, (t + 1) * split.per));
}

template <typename Core>
struct Hosted : Node {
  using Spec = typename Core::Spec;
  typename Core::Params params;

  abi::NodeState<Core> state;
  abi::SameBytes seen;  // a node's weights are its constant tensors, compared or read-only, never assumed

  explicit Hosted(const Attrs& attrs) {
    typename Spec::Attrs a;
    Spec::Read(Reader{attrs}, &a);
    abi::Status s = Core::Read(a, &params);
    if (!s.ok()) throw OpFailure(Spec::kName, s.arg, s.message);
    attrs.require_float32();
    s = state.Init(params);
    if (!s.ok()) throw std::invalid_argument(abi::Describe(Spec::kName, s));
  }

  std::vector<std::vector<int64_t>> output_shapes(const std::vector<std::vector<int64_t>>& in) override {
    std::vector<abi::Shape> shapes(in.begin(), in.end()), out;
    const abi::Status s = Core::Shapes(params, shapes, &out);
    if (!s.ok()) throw OpFailure(Spec::kName, s.arg, s.message);
    std::vector<std::vector<int64_t>> result;
    for (const abi::Shape& o : out) result.push_back(o.d);
    return result;
  }

  void run(const std::vector<View>& in, const std::vector<View>& out) override {
    std::vector<abi::In> ins;
    for (const View& v : in) ins.push_back({v.data, v.shape, abi::DType::kFloat32});
    std::vector<abi::Out> outs;
    for (const View& v : out) outs.push_back({v.data, v.shape, abi::DType::kFloat32});
    constexpr int from = abi::WeightsFrom<Core>();
    state.Compute(params, from >= 0 && seen.Check(ins, from, ParallelFor), ins, outs, ParallelFor);
  }
};

template <typename Core>
std::unique_ptr<Node> Create(const Attrs& attrs) {
  return std::make_unique<Hosted<Core>>(attrs);
}

template <typename Core>
const OpDef kDefOf{Core::Spec::kName, 1, Core::Spec::kNumInputs, Core::Spec::kNumOutputs, Create<Core>, nullptr};

#define BRIDGE_LITERT_HOST(Op) const int kRegistered##Op = register_op(&kDefOf<core::Op>);
BRIDGE_CORES(BRIDGE_LITERT_HOST)
#undef BRIDGE_LITERT_HOST

}  // namespace
}  // namespace litert
}  // namespace bridge
