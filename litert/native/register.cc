// The library's entry points: bridge_litert_add_kernels (registers every op on
// a LiteRtOptions, for any application that links LiteRT), and the small
// harness litert/runtime.py drives through ctypes (open a .tflite, run
// its first signature on host buffers, read the outputs back).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common.h"

#define BRIDGE_EXPORT extern "C" __attribute__((visibility("default")))

namespace bridge {
namespace litert {

int64_t View::size() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<int64_t> shape_of(const LiteRtLayout& l) {
  std::vector<int64_t> s;
  for (unsigned k = 0; k < l.rank && k < kBridgeLiteRtMaxRank; ++k) s.push_back(l.dimensions[k]);
  return s;
}

LiteRtLayout layout_of(const std::vector<int64_t>& shape) {
  LiteRtLayout l;
  std::memset(&l, 0, sizeof(l));
  if (shape.size() > kBridgeLiteRtMaxRank) throw std::runtime_error("rank above LiteRT's maximum of 8");
  l.rank = static_cast<unsigned>(shape.size());
  for (size_t k = 0; k < shape.size(); ++k) {
    if (shape[k] < 0 || shape[k] > INT32_MAX) throw std::runtime_error("dimension out of range: " + dims(shape));
    l.dimensions[k] = static_cast<int32_t>(shape[k]);
  }
  return l;
}

// -- attributes -------------------------------------------------------------------
const flex::Value* Attrs::get(const char* name, bool required) const {
  auto it = map_.find(name);
  if (it != map_.end()) return &it->second;
  if (required) throw OpFailure(op_, name, "is missing from the node's attributes (custom options)");
  return nullptr;
}

void Attrs::wrong(const char* name, const char* want, const flex::Value& v) const {
  throw OpFailure(op_, name, std::string("must be ") + want + ", got " + v.kind_name());
}

int64_t Attrs::i(const char* name, const int64_t* fallback) const {
  const flex::Value* v = get(name, !fallback);
  if (!v) return *fallback;
  if (v->kind != flex::Value::kInt) wrong(name, "an int", *v);
  return v->i;
}

float Attrs::f(const char* name, const float* fallback) const {
  const flex::Value* v = get(name, !fallback);
  if (!v) return *fallback;
  if (v->kind == flex::Value::kFloat) return static_cast<float>(v->f);
  if (v->kind == flex::Value::kInt) return static_cast<float>(v->i);
  wrong(name, "a float", *v);
}

std::string Attrs::s(const char* name, const std::string* fallback) const {
  const flex::Value* v = get(name, !fallback);
  if (!v) return *fallback;
  if (v->kind != flex::Value::kString) wrong(name, "a string", *v);
  return v->s;
}

std::vector<int64_t> Attrs::ints(const char* name, const std::vector<int64_t>* fallback) const {
  const flex::Value* v = get(name, !fallback);
  if (!v) return *fallback;
  if (v->kind != flex::Value::kInts && !(v->kind == flex::Value::kFloats && v->floats.empty()))
    wrong(name, "a list(int)", *v);
  return v->ints;
}

std::vector<float> Attrs::floats(const char* name, const std::vector<float>* fallback) const {
  const flex::Value* v = get(name, !fallback);
  if (!v) return *fallback;
  if (v->kind == flex::Value::kFloats) return std::vector<float>(v->floats.begin(), v->floats.end());
  if (v->kind == flex::Value::kInts) return std::vector<float>(v->ints.begin(), v->ints.end());
  wrong(name, "a list(float)", *v);
}

void Attrs::require_float32() const {
  const int64_t float32 = 0;  // TFLite's TensorType FLOAT32
  const int64_t t = i("T", &float32);
  if (t != 0)
    throw OpFailure(op_, "T", "this LiteRT kernel runs float32 (TensorType 0) only, got TensorType " +
                                  std::to_string(t) + " (--mode lowered runs the other types)");
}

// -- the op table and the callbacks -------------------------------------------------
std::vector<const OpDef*>& table() {
  static std::vector<const OpDef*> t;
  return t;
}
int register_op(const OpDef* def) {
  table().push_back(def);
  return static_cast<int>(table().size());
}
const std::vector<const OpDef*>& ops() { return table(); }

void KernelSet::fail(const std::string& message) {
  if (error.empty()) error = message;
  std::fprintf(stderr, "bridge LiteRT kernels: %s\n", message.c_str());
}

namespace {

const char* kMarkKey = "_bridge_node";  // litert/aligned.py: MARK_KEY

// The node a marked call is for (its last input has shape [k + 1]), else `fallback`.
size_t marked_node(const OpState* st, size_t num_inputs, int64_t mark_dim, size_t fallback) {
  if (num_inputs != st->def->num_inputs + 1) return fallback;
  auto it = st->marked.find(mark_dim - 1);
  return it == st->marked.end() ? st->nodes.size() : it->second;  // an unknown mark: no node
}

LiteRtStatus Init(void* user, const void* data, size_t size) {
  auto* st = static_cast<OpState*>(user);
  std::lock_guard<std::mutex> lock(st->set->mu);
  try {
    flex::Map map = flex::ReadMap(data, size);
    auto mark = map.find(kMarkKey);
    if (mark != map.end() && mark->second.kind == flex::Value::kInt) {
      st->marked[mark->second.i] = st->nodes.size();
      map.erase(mark);
    }
    Attrs attrs(st->def->name, std::move(map));
    st->nodes.push_back(st->def->create(attrs));
    st->init_errors.emplace_back();
  } catch (const std::exception& e) {
    std::string msg = e.what();
    if (dynamic_cast<const flex::Error*>(&e)) msg = std::string(st->def->name) + ": " + msg;
    st->nodes.emplace_back();
    st->init_errors.push_back(msg);
    st->set->fail(msg);
    return kBridgeLiteRtInvalidArgument;
  }
  return kBridgeLiteRtOk;
}

LiteRtStatus GetOutputLayouts(void* user, size_t ni, const LiteRtLayout* in, size_t no, LiteRtLayout* out) {
  auto* st = static_cast<OpState*>(user);
  std::lock_guard<std::mutex> lock(st->set->mu);
  const size_t count = st->nodes.size();
  size_t k = st->last_was_run ? st->next_run : st->next_prepare;
  if (k >= count) k = 0;
  st->next_prepare = k + 1;
  st->last_was_run = false;
  const bool is_marked = ni == st->def->num_inputs + 1 && in[ni - 1].rank == 1;
  if (is_marked) {
    k = marked_node(st, ni, in[ni - 1].dimensions[0], k);
    --ni;
  }
  std::string error;
  if (count == 0) {
    error = std::string(st->def->name) + ": prepared before any node was initialised";
  } else if (k >= count) {
    error = std::string(st->def->name) + ": a node marked " + std::to_string(in[ni].dimensions[0] - 1) +
            " was never initialised";
  } else if (!st->nodes[k]) {
    error = st->init_errors[k];
  } else if (ni != st->def->num_inputs || no != st->def->num_outputs) {
    error = std::string(st->def->name) + ": the node has " + std::to_string(ni) + " inputs and " +
            std::to_string(no) + " outputs, the op takes " + std::to_string(st->def->num_inputs) + " and gives " +
            std::to_string(st->def->num_outputs);
  } else {
    try {
      std::vector<std::vector<int64_t>> shapes;
      for (size_t j = 0; j < ni; ++j) shapes.push_back(shape_of(in[j]));
      const auto outs = st->nodes[k]->output_shapes(shapes);
      for (size_t j = 0; j < no; ++j) out[j] = layout_of(outs.at(j));
      return kBridgeLiteRtOk;
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  st->set->fail(error);
  for (size_t j = 0; j < no; ++j) {
    std::memset(&out[j], 0, sizeof(LiteRtLayout));
    out[j].has_strides = true;  // LiteRT refuses it: the prepare fails
  }
  return kBridgeLiteRtInvalidArgument;
}

struct Locked {
  std::vector<View> views;
  ~Locked() {
    for (View& v : views)
      if (v.data) LiteRtUnlockTensorBuffer(v.buffer);
  }
  void lock(LiteRtTensorBuffer b, int mode) {
    View v;
    v.buffer = b;
    LiteRtRankedTensorType t;
    if (LiteRtGetTensorBufferTensorType(b, &t) != kBridgeLiteRtOk) throw std::runtime_error("no tensor type");
    v.shape = shape_of(t.layout);
    v.element_type = t.element_type;
    void* p = nullptr;
    if (LiteRtLockTensorBuffer(b, &p, mode) != kBridgeLiteRtOk) throw std::runtime_error("could not lock a buffer");
    v.data = p;
    views.push_back(v);
  }
};

LiteRtStatus Run(void* user, size_t ni, const LiteRtTensorBuffer* in, size_t no, LiteRtTensorBuffer* out) {
  auto* st = static_cast<OpState*>(user);
  size_t k;
  {
    std::lock_guard<std::mutex> lock(st->set->mu);
    const size_t count = st->nodes.size();
    k = st->next_run < count ? st->next_run : 0;
    st->next_run = k + 1 < count ? k + 1 : 0;
    st->last_was_run = true;
    if (ni == st->def->num_inputs + 1) {  // marked: the node from the marker's shape
      LiteRtRankedTensorType t;
      if (LiteRtGetTensorBufferTensorType(in[ni - 1], &t) == kBridgeLiteRtOk && t.layout.rank == 1)
        k = marked_node(st, ni, t.layout.dimensions[0], k);
      --ni;
    }
    if (count == 0 || k >= count || !st->nodes[k]) {
      st->set->fail(count && k < count ? st->init_errors[k] : std::string(st->def->name) + ": run before Init");
      return kBridgeLiteRtInvalidArgument;
    }
  }
  try {
    Locked ins, outs;
    for (size_t j = 0; j < ni; ++j) ins.lock(in[j], kBridgeLiteRtLockRead);
    for (size_t j = 0; j < no; ++j) outs.lock(out[j], kBridgeLiteRtLockWrite);
    for (const auto* vs : {&ins.views, &outs.views})
      for (const View& v : *vs)
        if (v.element_type != kBridgeLiteRtFloat32)
          throw OpFailure(st->def->name, "T", "this LiteRT kernel runs float32 tensors only, got element type " +
                                                  std::to_string(v.element_type));
    st->nodes[k]->run(ins.views, outs.views);
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lock(st->set->mu);
    st->set->fail(e.what());
    return kBridgeLiteRtRuntimeFailure;
  }
  return kBridgeLiteRtOk;
}

LiteRtStatus Destroy(void* user) {
  auto* st = static_cast<OpState*>(user);
  std::lock_guard<std::mutex> lock(st->set->mu);
  if (++st->destroyed >= st->nodes.size()) {  // every node freed: ready for another model
    st->nodes.clear();
    st->init_errors.clear();
    st->marked.clear();
    st->next_prepare = st->next_run = st->destroyed = 0;
    st->last_was_run = false;
  }
  return kBridgeLiteRtOk;
}

const LiteRtCustomOpKernel kKernel = {Init, GetOutputLayouts, Run, Destroy};

void copy_error(const std::string& msg, char* err, size_t n) {
  if (err && n) {
    std::snprintf(err, n, "%s", msg.c_str());
  }
}

}  // namespace
}  // namespace litert
}  // namespace bridge

using namespace bridge::litert;

// Registers every op this build runs on `options`; the returned kernel set
// outlives every compiled model made with them (free it after those).
// Null on failure, with the reason in `err`.
BRIDGE_EXPORT void* bridge_litert_add_kernels(LiteRtOptions options, char* err, size_t err_size) {
  auto set = std::make_unique<KernelSet>();
  for (const OpDef* def : ops()) {
    if (def->unavailable && def->unavailable()) continue;
    auto st = std::make_unique<OpState>();
    st->def = def;
    st->set = set.get();
    const LiteRtStatus s = LiteRtAddCustomOpKernelOption(options, def->name, def->version, &kKernel, st.get());
    if (s != kBridgeLiteRtOk) {
      copy_error(std::string("LiteRtAddCustomOpKernelOption(") + def->name + ") failed: status " + std::to_string(s),
                 err, err_size);
      return nullptr;
    }
    set->ops.push_back(std::move(st));
  }
  return set.release();
}

BRIDGE_EXPORT void bridge_litert_free_kernels(void* set) { delete static_cast<KernelSet*>(set); }

// The first error the kernels recorded since the last call (which clears it); "" if none.
BRIDGE_EXPORT int bridge_litert_error(void* set, char* err, size_t err_size) {
  auto* s = static_cast<KernelSet*>(set);
  std::lock_guard<std::mutex> lock(s->mu);
  copy_error(s->error, err, err_size);
  const int had = !s->error.empty();
  s->error.clear();
  return had;
}

// "name:version" of every op, and why an op is not served, one per line.
BRIDGE_EXPORT int bridge_litert_ops(char* out, size_t size) {
  std::string s;
  for (const OpDef* def : ops()) {
    const char* why = def->unavailable ? def->unavailable() : nullptr;
    s += std::string(def->name) + ":" + std::to_string(def->version) + (why ? std::string(":") + why : "") + "\n";
  }
  copy_error(s, out, size);
  return static_cast<int>(s.size());
}
