// A .tflite on LiteRT's CompiledModel (CPU), with or without bridge's kernels:
// what litert/runtime.py calls through ctypes. The model's first
// signature; inputs are resized to the shapes of each run; outputs stay in
// managed buffers until the next run.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common.h"

#define BRIDGE_EXPORT extern "C" __attribute__((visibility("default")))

extern "C" void* bridge_litert_add_kernels(LiteRtOptions options, char* err, size_t err_size);
extern "C" void bridge_litert_free_kernels(void* set);
extern "C" int bridge_litert_error(void* set, char* err, size_t err_size);

namespace {

using bridge::litert::shape_of;

struct Harness {
  LiteRtEnvironment env = nullptr;
  LiteRtModel model = nullptr;
  LiteRtOptions options = nullptr;
  LiteRtCompiledModel compiled = nullptr;
  void* kernels = nullptr;
  std::vector<std::string> names[2];
  std::vector<LiteRtRankedTensorType> types[2];
  std::vector<LiteRtTensor> tensors[2];
  // output k is input alias[k] itself (a model that passes an input through): the
  // compiled model writes nothing into its buffer, the harness copies the input there
  std::vector<int> alias;
  std::vector<std::vector<int64_t>> input_shapes;
  std::vector<LiteRtTensorBuffer> outputs;
  std::vector<LiteRtRankedTensorType> output_types;
  // set once a run resized an output past the buffer it was bound to: that run
  // wrote out of bounds, so this compiled model runs no more
  std::string broken;

  ~Harness() {
    clear_outputs();
    if (compiled) LiteRtDestroyCompiledModel(compiled);
    if (kernels) bridge_litert_free_kernels(kernels);
    if (options) LiteRtDestroyOptions(options);
    if (model) LiteRtDestroyModel(model);
    if (env) LiteRtDestroyEnvironment(env);
  }
  void clear_outputs() {
    for (auto b : outputs) LiteRtDestroyTensorBuffer(b);
    outputs.clear();
    output_types.clear();
  }
};

void say(const std::string& msg, char* err, size_t n) {
  if (err && n) std::snprintf(err, n, "%s", msg.c_str());
}

// The kernels' own error (op, argument, shapes) if they recorded one, else LiteRT's.
std::string why(Harness* h, const std::string& what, LiteRtStatus s) {
  if (h->kernels) {
    char buf[2048];
    if (bridge_litert_error(h->kernels, buf, sizeof buf)) return buf;
  }
  return what + " failed (LiteRT status " + std::to_string(s) + ")";
}

// Bytes per element; 0 for a type the harness does not copy (refused when the model is opened:
// a tensor copied as 0 bytes would run on whatever the buffer held)
size_t element_size(int t) {
  switch (t) {
    case kBridgeLiteRtFloat32:
    case kBridgeLiteRtInt32: return 4;
    case kBridgeLiteRtInt64:
    case kBridgeLiteRtFloat64: return 8;
    case kBridgeLiteRtFloat16:
    case kBridgeLiteRtInt16: return 2;
    case kBridgeLiteRtBool:  // TFLite's bool is one byte, as numpy's
    case kBridgeLiteRtInt8:
    case kBridgeLiteRtUInt8: return 1;
    default: return 0;
  }
}

size_t bytes_of(const LiteRtRankedTensorType& t) {
  size_t n = element_size(t.element_type);
  for (unsigned k = 0; k < t.layout.rank; ++k) n *= static_cast<size_t>(t.layout.dimensions[k] < 0 ? 0 : t.layout.dimensions[k]);
  return n;
}

LiteRtStatus make_buffer(Harness* h, const LiteRtRankedTensorType& t, LiteRtTensorBuffer* b) {
  // Never a zero-byte allocation: an empty tensor still gets a (small) buffer.
  const size_t bytes = bytes_of(t) < 64 ? 64 : bytes_of(t);
  return LiteRtCreateManagedTensorBuffer(h->env, kBridgeLiteRtHostMemory, &t, bytes, b);
}

}  // namespace

BRIDGE_EXPORT void bridge_litert_close(void* handle) { delete static_cast<Harness*>(handle); }

// XNNPack on `threads` threads (LiteRT's default is one).
LiteRtStatus SetCpuThreads(LiteRtOptions options, int threads) {
  const std::string toml = "num_threads = " + std::to_string(threads) + "\n";
  char* payload = strdup(toml.c_str());
  LiteRtOpaqueOptions cpu = nullptr;
  LiteRtStatus s = LiteRtCreateOpaqueOptions("xnnpack", payload, free, &cpu);
  if (s != kBridgeLiteRtOk) {
    free(payload);
    return s;
  }
  if ((s = LiteRtAddOpaqueOptions(options, cpu)) != kBridgeLiteRtOk) LiteRtDestroyOpaqueOptions(cpu);
  return s;
}

// Opens `path`; with_kernels: register bridge's ops; threads > 0: XNNPack's
// thread count. Null on failure (reason in err).
BRIDGE_EXPORT void* bridge_litert_open(const char* path, int with_kernels, int threads, char* err, size_t err_size) {
  auto* h = new Harness();
  LiteRtStatus s;
  auto fail = [&](const std::string& msg) -> void* {
    say(msg, err, err_size);
    delete h;
    return nullptr;
  };
  if ((s = LiteRtCreateEnvironment(0, nullptr, &h->env)) != kBridgeLiteRtOk) return fail(why(h, "LiteRtCreateEnvironment", s));
  if ((s = LiteRtCreateModelFromFile(h->env, path, &h->model)) != kBridgeLiteRtOk)
    return fail(why(h, std::string("loading ") + path, s));
  LiteRtParamIndex n_sig = 0;
  LiteRtSignature sig = nullptr;
  if (LiteRtGetNumModelSignatures(h->model, &n_sig) != kBridgeLiteRtOk || n_sig == 0 ||
      LiteRtGetModelSignature(h->model, 0, &sig) != kBridgeLiteRtOk)
    return fail("the model has no signature (input and output names)");
  for (int out = 0; out < 2; ++out) {
    LiteRtParamIndex n = 0;
    s = out ? LiteRtGetNumSignatureOutputs(sig, &n) : LiteRtGetNumSignatureInputs(sig, &n);
    if (s != kBridgeLiteRtOk) return fail(why(h, "reading the signature", s));
    for (LiteRtParamIndex k = 0; k < n; ++k) {
      const char* name = nullptr;
      LiteRtTensor t = nullptr;
      LiteRtRankedTensorType type;
      s = out ? LiteRtGetSignatureOutputName(sig, k, &name) : LiteRtGetSignatureInputName(sig, k, &name);
      if (s == kBridgeLiteRtOk)
        s = out ? LiteRtGetSignatureOutputTensorByIndex(sig, k, &t) : LiteRtGetSignatureInputTensorByIndex(sig, k, &t);
      if (s == kBridgeLiteRtOk) s = LiteRtGetRankedTensorType(t, &type);
      if (s != kBridgeLiteRtOk) return fail(why(h, "reading the signature's tensors", s));
      if (element_size(type.element_type) == 0)
        return fail(std::string(out ? "output " : "input ") + (name ? name : "") + ": element type " +
                    std::to_string(type.element_type) + " (a TfLiteType) is not one bridge's LiteRT harness "
                    "copies (float32/16/64, int8/16/32/64, uint8, bool)");
      h->names[out].push_back(name ? name : "");
      h->types[out].push_back(type);
      h->tensors[out].push_back(t);
      if (!out) h->input_shapes.push_back(shape_of(type.layout));
    }
  }
  for (LiteRtTensor t : h->tensors[1]) {
    auto in = std::find(h->tensors[0].begin(), h->tensors[0].end(), t);
    h->alias.push_back(in == h->tensors[0].end() ? -1 : static_cast<int>(in - h->tensors[0].begin()));
  }
  if ((s = LiteRtCreateOptions(&h->options)) != kBridgeLiteRtOk) return fail(why(h, "LiteRtCreateOptions", s));
  if ((s = LiteRtSetOptionsHardwareAccelerators(h->options, kBridgeLiteRtCpu)) != kBridgeLiteRtOk)
    return fail(why(h, "LiteRtSetOptionsHardwareAccelerators(CPU)", s));
  if (threads > 0 && (s = SetCpuThreads(h->options, threads)) != kBridgeLiteRtOk)
    return fail(why(h, "setting XNNPack's threads (LiteRtAddOpaqueOptions)", s));
  if (with_kernels) {
    char buf[1024] = {0};
    h->kernels = bridge_litert_add_kernels(h->options, buf, sizeof buf);
    if (!h->kernels) return fail(buf);
  }
  if ((s = LiteRtCreateCompiledModel(h->env, h->model, h->options, &h->compiled)) != kBridgeLiteRtOk)
    return fail(why(h, "compiling the model (LiteRtCreateCompiledModel)", s));
  if (h->kernels) {
    char buf[2048];
    if (bridge_litert_error(h->kernels, buf, sizeof buf)) return fail(buf);
  }
  return h;
}

// The signature's inputs (output=0) or outputs (1): count, or entry k's name,
// element type and rank (and dims, -1 where dynamic, when dims is not null).
BRIDGE_EXPORT int bridge_litert_count(void* handle, int output) {
  return static_cast<int>(static_cast<Harness*>(handle)->names[output ? 1 : 0].size());
}
BRIDGE_EXPORT const char* bridge_litert_name(void* handle, int output, int k) {
  return static_cast<Harness*>(handle)->names[output ? 1 : 0].at(k).c_str();
}
BRIDGE_EXPORT int bridge_litert_element_type(void* handle, int output, int k) {
  return static_cast<Harness*>(handle)->types[output ? 1 : 0].at(k).element_type;
}

// Runs on host data: inputs in signature order, shapes flattened (ranks[k] dims each).
BRIDGE_EXPORT int bridge_litert_run(void* handle, const void* const* data, const int64_t* shapes, const int* ranks,
                                    char* err, size_t err_size) {
  auto* h = static_cast<Harness*>(handle);
  h->clear_outputs();
  if (!h->broken.empty()) {
    say(h->broken + " (an earlier run; open the model again)", err, err_size);
    return 1;
  }
  const size_t n_in = h->names[0].size(), n_out = h->names[1].size();
  std::vector<LiteRtTensorBuffer> ins;
  auto cleanup = [&]() {
    for (auto b : ins) LiteRtDestroyTensorBuffer(b);
  };
  LiteRtStatus s;
  size_t at = 0;
  std::vector<LiteRtRankedTensorType> in_types(n_in);
  for (size_t k = 0; k < n_in; ++k) {
    std::vector<int64_t> shape(shapes + at, shapes + at + ranks[k]);
    at += ranks[k];
    for (int64_t d : shape)
      if (d <= 0) {
        say("input " + h->names[0][k] + ": shape " + bridge::dims(shape) +
                " has an empty dimension, which LiteRT's CompiledModel does not take (ResizeInputTensor: "
                "dimensions must be positive)",
            err, err_size);
        return 1;
      }
    if (shape != h->input_shapes[k]) {
      std::vector<int> d(shape.begin(), shape.end());
      if ((s = LiteRtCompiledModelResizeInputTensor(h->compiled, 0, k, d.data(), d.size())) != kBridgeLiteRtOk) {
        say(why(h, "resizing input " + h->names[0][k] + " to " + bridge::dims(shape), s), err, err_size);
        return 1;
      }
      h->input_shapes[k] = shape;
    }
    in_types[k] = h->types[0][k];
    in_types[k].layout = bridge::litert::layout_of(shape);
  }
  std::vector<LiteRtLayout> layouts(n_out);
  if ((s = LiteRtGetCompiledModelOutputTensorLayouts(h->compiled, 0, n_out, layouts.data(), true)) != kBridgeLiteRtOk) {
    say(why(h, "preparing the model for these input shapes", s), err, err_size);
    return 1;
  }
  for (size_t k = 0; k < n_in; ++k) {
    LiteRtTensorBuffer b = nullptr;
    if ((s = make_buffer(h, in_types[k], &b)) != kBridgeLiteRtOk) {
      cleanup();
      say(why(h, "allocating input " + h->names[0][k], s), err, err_size);
      return 1;
    }
    ins.push_back(b);
    void* p = nullptr;
    if (LiteRtLockTensorBuffer(b, &p, kBridgeLiteRtLockWrite) != kBridgeLiteRtOk) {
      cleanup();
      say("could not lock input " + h->names[0][k], err, err_size);
      return 1;
    }
    std::memcpy(p, data[k], bytes_of(in_types[k]));
    LiteRtUnlockTensorBuffer(b);
  }
  for (size_t k = 0; k < n_out; ++k) {
    LiteRtRankedTensorType t = h->types[1][k];
    t.layout = layouts[k];
    t.layout.has_strides = false;
    LiteRtTensorBuffer b = nullptr;
    if ((s = make_buffer(h, t, &b)) != kBridgeLiteRtOk) {
      cleanup();
      std::string msg = why(h, "allocating output " + h->names[1][k], s);
      const std::vector<int64_t> shape = bridge::litert::shape_of(t.layout);
      if (std::find(shape.begin(), shape.end(), 0) != shape.end())  // e.g. from an empty constant in the model
        msg += ": its shape " + bridge::dims(shape) + " is empty, which LiteRT's CompiledModel does not allocate";
      say(msg, err, err_size);
      return 1;
    }
    h->outputs.push_back(b);
    h->output_types.push_back(t);
  }
  // before the run: the compiled model binds both buffers to the one tensor, and may read either
  for (size_t k = 0; k < n_out; ++k) {
    const int a = h->alias[k];
    void* p = nullptr;
    if (a < 0 || bytes_of(h->output_types[k]) != bytes_of(in_types[a])) continue;
    if (LiteRtLockTensorBuffer(h->outputs[k], &p, kBridgeLiteRtLockWrite) != kBridgeLiteRtOk) {
      cleanup();
      say("could not lock output " + h->names[1][k], err, err_size);
      return 1;
    }
    std::memcpy(p, data[a], bytes_of(in_types[a]));
    LiteRtUnlockTensorBuffer(h->outputs[k]);
  }
  s = LiteRtRunCompiledModel(h->compiled, 0, ins.size(), ins.data(), h->outputs.size(), h->outputs.data());
  cleanup();
  if (h->kernels) {  // a kernel's failure does not reach LiteRT's status
    char buf[2048];
    if (bridge_litert_error(h->kernels, buf, sizeof buf)) {
      say(buf, err, err_size);
      return 1;
    }
  }
  if (s != kBridgeLiteRtOk) {
    say(why(h, "LiteRtRunCompiledModel", s), err, err_size);
    return 1;
  }
  // A kernel may resize an output while running (its shape computed from values,
  // not shapes): then the buffer sized before the run is not its shape. Never a
  // silently wrong shape; runtime.py refuses the cases it can see before running.
  std::vector<LiteRtLayout> after(n_out);
  if (LiteRtGetCompiledModelOutputTensorLayouts(h->compiled, 0, n_out, after.data(), false) == kBridgeLiteRtOk)
    for (size_t k = 0; k < n_out; ++k) {
      const std::vector<int64_t> sized = shape_of(h->output_types[k].layout), ran = shape_of(after[k]);
      if (sized != ran) {
        h->broken = "output " + h->names[1][k] + ": LiteRT's CompiledModel sized it " + bridge::dims(sized) +
                    " before the run, which made it " + bridge::dims(ran) +
                    " (its shape is computed while running); convert the model at these input shapes";
        say(h->broken, err, err_size);
        h->clear_outputs();
        return 1;
      }
    }
  return 0;
}

// Output k of the last run: its rank (and dims into `dims`, up to 8).
BRIDGE_EXPORT int bridge_litert_output_shape(void* handle, int k, int64_t* dims) {
  auto* h = static_cast<Harness*>(handle);
  const LiteRtLayout& l = h->output_types.at(k).layout;
  for (unsigned j = 0; j < l.rank; ++j) dims[j] = l.dimensions[j];
  return static_cast<int>(l.rank);
}

BRIDGE_EXPORT int bridge_litert_read_output(void* handle, int k, void* dst, size_t bytes) {
  auto* h = static_cast<Harness*>(handle);
  if (bytes != bytes_of(h->output_types.at(k))) return 1;
  if (bytes == 0) return 0;
  void* p = nullptr;
  if (LiteRtLockTensorBuffer(h->outputs[k], &p, kBridgeLiteRtLockRead) != kBridgeLiteRtOk) return 1;
  std::memcpy(dst, p, bytes);
  LiteRtUnlockTensorBuffer(h->outputs[k]);
  return 0;
}
