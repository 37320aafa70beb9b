// Shared plumbing for the com.bridge onnxruntime kernels: attribute tables,
// tensor access, errors, threading, half floats and the op registry.
//
// Only onnxruntime's C API is used, through the OrtApi table handed to
// RegisterCustomOps: the library does not link libonnxruntime, so it loads
// into any onnxruntime that serves this header's ORT_API_VERSION or newer.
// host.cc registers an OpDef per kernel core; an op with its own adapter (the
// convolution) defines its OpDef in its .cc file and registers it statically.
#pragma once

#include <onnxruntime_c_api.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "kernels/op_failure.h"  // OpFailure, dims

namespace bridge {

extern const OrtApi* g_api;

// One attribute of the com.bridge node. `def` is its default as text
// (lists comma-separated), nullptr when required. Exposed through
// bridge_ort_describe() so a test can hold it against the Python specs.
struct AttrDef {
  const char* name;
  const char* type;  // float, int, list(float), list(int)
  const char* def;
};

class Attrs {
 public:
  Attrs(const OrtKernelInfo* info, const char* op, const std::vector<AttrDef>& defs)
      : info_(info), op_(op), defs_(defs) {}
  float f(const char* name) const;
  int64_t i(const char* name) const;
  std::string s(const char* name) const;
  std::vector<float> floats(const char* name) const;
  std::vector<int64_t> ints(const char* name) const;

 private:
  const AttrDef& def(const char* name) const;
  // The table's default for an attribute the node lacks (`absent`: the status
  // of the failed lookup, released here); OpFailure when it has none.
  const char* default_text(OrtStatus* absent, const char* name) const;
  // An array attribute through the C API's getter for T, else the table's default.
  template <typename T, typename Get>
  std::vector<T> array(Get get, const char* name) const;
  const OrtKernelInfo* info_;
  const char* op_;
  const std::vector<AttrDef>& defs_;
};

struct View {
  const void* data = nullptr;
  std::vector<int64_t> shape;
  ONNXTensorElementDataType type = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
  int64_t size() const {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }
  template <typename T> const T* as() const { return static_cast<const T*>(data); }
};

View view_of(const OrtValue* value);

class Ctx {
 public:
  explicit Ctx(OrtKernelContext* ctx) : ctx_(ctx) {}
  View input(size_t i) const;
  void* output(size_t i, const std::vector<int64_t>& shape);
  // fn(task) for task in [0, tasks) on the session's intra-op threads.
  void parallel_for(size_t tasks, const std::function<void(size_t)>& fn) const;

 private:
  OrtKernelContext* ctx_;
};

struct Kernel {
  virtual ~Kernel() = default;
  virtual void compute(Ctx& ctx) = 0;
};

struct OpDef {
  const char* name;
  std::vector<const char*> inputs;
  std::vector<const char*> outputs;
  std::vector<AttrDef> attrs;
  // Reads and checks the attributes (throws OpFailure); may read constant inputs.
  Kernel* (*create)(const Attrs& attrs, const OrtKernelInfo* info);
  const char* domain = "com.bridge";  // the spec's (a team's op: its own)
};

int register_op(const OpDef* def);

// The com.bridge node's attributes of a spec (its rendered header, spec/<op>.h).
template <typename Spec>
std::vector<AttrDef> attr_defs() {
  std::vector<AttrDef> v;
  for (int i = 0; i < Spec::kNumOnnxAttrs; ++i)
    v.push_back({Spec::kOnnxAttrs[i].name, Spec::kOnnxAttrs[i].type, Spec::kOnnxAttrs[i].def});
  return v;
}
void check_same_type(const char* op, const std::vector<View>& views, const OpDef& def);

// -- half precision: storage is uint16_t, arithmetic in float ----------------
#if defined(__FLT16_MANT_DIG__)
inline float h2f(uint16_t h) {
  _Float16 v;
  std::memcpy(&v, &h, 2);
  return static_cast<float>(v);
}
inline uint16_t f2h(float f) {
  _Float16 v = static_cast<_Float16>(f);
  uint16_t h;
  std::memcpy(&h, &v, 2);
  return h;
}
#else
float h2f(uint16_t h);
uint16_t f2h(float f);
#endif
void half_to_float(const uint16_t* src, float* dst, int64_t n);
void float_to_half(const float* src, uint16_t* dst, int64_t n);

inline bool is_half(const View& v) { return v.type == ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16; }

}  // namespace bridge
