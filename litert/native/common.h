// What the LiteRT kernels share (host.cc, serving every kernel core, and the ops
// with adapters of their own: the convolution, a team's op files): reading attributes (typed, with the op
// and argument named), the op table, and the per-node bookkeeping LiteRT's
// custom-op API leaves to the kernel.
//
// LiteRT 2.x hands every callback the one user_data given at registration, not
// a per-node object, and drops the status each returns (custom_op_dispatcher in
// LiteRT: Init's result is not kept, Prepare fails only when resizing an output
// fails). So:
//  - A file bridge's runtime loads is marked first (litert/aligned.py):
//    node k has `_bridge_node: k` in its options and a last constant input of
//    shape [k + 1], so every callback knows its node. In an unmarked file:
//  - Init is called once per node, in node order: the op keeps a list of nodes.
//  - GetOutputLayouts and Run come in execution order, a node's prepare before
//    its run; the next node to prepare after a run is the next node to run
//    (a re-prepare at invoke time starts there), else the one after the last
//    prepared (a full prepare after a resize starts at the first).
//  - An error is recorded (op, argument, shapes) in the kernel set, written to
//    stderr, and turned into a failed prepare by asking for a strided output
//    layout, which LiteRT refuses; a failed run is recorded and the harness
//    (or the embedding application, through bridge_litert_error) reports it.
#ifndef BRIDGE_LITERT_COMMON_H_
#define BRIDGE_LITERT_COMMON_H_

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "flexbuffer.h"
#include "kernels/op_failure.h"  // OpFailure, dims
#include "litert_c_api.h"

namespace bridge {
namespace litert {

// A node's attributes, read by name with the type the op declares.
class Attrs {
 public:
  Attrs(const char* op, flex::Map map) : op_(op), map_(std::move(map)) {}
  int64_t i(const char* name, const int64_t* fallback = nullptr) const;
  float f(const char* name, const float* fallback = nullptr) const;
  std::string s(const char* name, const std::string* fallback = nullptr) const;
  std::vector<int64_t> ints(const char* name, const std::vector<int64_t>* fallback = nullptr) const;
  std::vector<float> floats(const char* name, const std::vector<float>* fallback = nullptr) const;
  // T: the TFLite TensorType of the op's float type; only FLOAT32 (0) is served.
  void require_float32() const;

 private:
  const flex::Value* get(const char* name, bool required) const;
  [[noreturn]] void wrong(const char* name, const char* want, const flex::Value& v) const;
  const char* op_;
  flex::Map map_;
};

// One tensor of a node: its shape and host memory, locked while the view lives.
struct View {
  std::vector<int64_t> shape;
  int element_type = 0;
  void* data = nullptr;
  LiteRtTensorBuffer buffer = nullptr;
  int64_t size() const;
  template <typename T> const T* as() const { return static_cast<const T*>(data); }
  template <typename T> T* mut() const { return static_cast<T*>(data); }
};

std::vector<int64_t> shape_of(const LiteRtLayout& l);
LiteRtLayout layout_of(const std::vector<int64_t>& shape);

// A node's kernel: built from its attributes in Init (throwing OpFailure for
// bad ones), asked for its output shapes and run.
struct Node {
  virtual ~Node() = default;
  virtual std::vector<std::vector<int64_t>> output_shapes(const std::vector<std::vector<int64_t>>& inputs) = 0;
  virtual void run(const std::vector<View>& inputs, const std::vector<View>& outputs) = 0;
};

struct OpDef {
  const char* name;
  int version;
  size_t num_inputs, num_outputs;
  std::unique_ptr<Node> (*create)(const Attrs& attrs);  // throws OpFailure
  const char* (*unavailable)();  // why this build cannot run the op, or null
};

// Each op file registers its OpDef at load time.
int register_op(const OpDef* def);
const std::vector<const OpDef*>& ops();

struct KernelSet;

// The registered state of one op on one LiteRtOptions.
struct OpState {
  const OpDef* def = nullptr;
  KernelSet* set = nullptr;
  std::vector<std::unique_ptr<Node>> nodes;  // null where Init failed
  std::vector<std::string> init_errors;
  std::map<int64_t, size_t> marked;  // _bridge_node -> index in nodes
  size_t next_prepare = 0, next_run = 0, destroyed = 0;
  bool last_was_run = false;
};

struct KernelSet {
  std::mutex mu;
  std::vector<std::unique_ptr<OpState>> ops;
  std::string error;  // the first error since the last clear
  void fail(const std::string& message);
};

}  // namespace litert
}  // namespace bridge

#endif  // BRIDGE_LITERT_COMMON_H_
