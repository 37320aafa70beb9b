// RegisterCustomOps (the entry point onnxruntime calls), the op registry, and
// the small C functions Python reads through ctypes: which ops the library
// has, their attribute tables, and how often each kernel ran.
#include <atomic>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>

#include "bridge_ort.h"

#define BRIDGE_EXPORT extern "C" __attribute__((visibility("default")))

namespace bridge {

const OrtApi* g_api = nullptr;
static const char* kConfigKey = "bridge.kernels";

static std::vector<const OpDef*>& registry() {
  static std::vector<const OpDef*> ops;
  return ops;
}

int register_op(const OpDef* def) {
  registry().push_back(def);
  return static_cast<int>(registry().size());
}

static std::map<std::string, std::atomic<uint64_t>>& counters() {
  static std::map<std::string, std::atomic<uint64_t>> c;  // filled once, before any kernel runs
  return c;
}

// -- errors -------------------------------------------------------------------
static void throw_on(OrtStatus* status) {
  if (!status) return;
  std::string msg = g_api->GetErrorMessage(status);
  g_api->ReleaseStatus(status);
  throw std::runtime_error(msg);
}

// -- attributes ---------------------------------------------------------------
const AttrDef& Attrs::def(const char* name) const {
  for (const auto& d : defs_)
    if (!std::strcmp(d.name, name)) return d;
  throw std::logic_error(std::string(op_) + ": no attribute table entry for " + name);
}

static std::vector<double> parse_list(const char* text) {
  std::vector<double> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(std::stod(item));
  return out;
}

const char* Attrs::default_text(OrtStatus* absent, const char* name) const {
  g_api->ReleaseStatus(absent);
  const AttrDef& d = def(name);
  if (!d.def) throw OpFailure(op_, name, "required attribute is missing");
  return d.def;
}

float Attrs::f(const char* name) const {
  float v;
  OrtStatus* st = g_api->KernelInfoGetAttribute_float(info_, name, &v);
  return st ? std::stof(default_text(st, name)) : v;
}

int64_t Attrs::i(const char* name) const {
  int64_t v;
  OrtStatus* st = g_api->KernelInfoGetAttribute_int64(info_, name, &v);
  return st ? std::stoll(default_text(st, name)) : v;
}

std::string Attrs::s(const char* name) const {
  size_t n = 0;
  OrtStatus* st = g_api->KernelInfoGetAttribute_string(info_, name, nullptr, &n);
  if (st) return default_text(st, name);
  std::string v(n, '\0');
  throw_on(g_api->KernelInfoGetAttribute_string(info_, name, v.data(), &n));
  v.resize(n ? n - 1 : 0);  // n counts the terminating NUL
  return v;
}

template <typename T, typename Get>
std::vector<T> Attrs::array(Get get, const char* name) const {
  size_t n = 0;
  OrtStatus* st = get(info_, name, nullptr, &n);
  if (!st) {
    std::vector<T> v(n);
    if (n) throw_on(get(info_, name, v.data(), &n));
    return v;
  }
  std::vector<T> v;
  for (double x : parse_list(default_text(st, name))) v.push_back(static_cast<T>(x));
  return v;
}

std::vector<float> Attrs::floats(const char* name) const {
  return array<float>(g_api->KernelInfoGetAttributeArray_float, name);
}

std::vector<int64_t> Attrs::ints(const char* name) const {
  return array<int64_t>(g_api->KernelInfoGetAttributeArray_int64, name);
}

// -- tensors ------------------------------------------------------------------
View view_of(const OrtValue* value) {
  View v;
  OrtTensorTypeAndShapeInfo* info = nullptr;
  throw_on(g_api->GetTensorTypeAndShape(value, &info));
  size_t rank = 0;
  OrtStatus* st = g_api->GetDimensionsCount(info, &rank);
  if (!st) {
    v.shape.resize(rank);
    st = g_api->GetDimensions(info, v.shape.data(), rank);
  }
  if (!st) st = g_api->GetTensorElementType(info, &v.type);
  g_api->ReleaseTensorTypeAndShapeInfo(info);
  throw_on(st);
  void* data = nullptr;
  throw_on(g_api->GetTensorMutableData(const_cast<OrtValue*>(value), &data));
  v.data = data;
  return v;
}

View Ctx::input(size_t i) const {
  const OrtValue* value = nullptr;
  throw_on(g_api->KernelContext_GetInput(ctx_, i, &value));
  if (!value) throw std::runtime_error("input " + std::to_string(i) + " is missing");
  return view_of(value);
}

void* Ctx::output(size_t i, const std::vector<int64_t>& shape) {
  OrtValue* value = nullptr;
  throw_on(g_api->KernelContext_GetOutput(ctx_, i, shape.data(), shape.size(), &value));
  void* data = nullptr;
  throw_on(g_api->GetTensorMutableData(value, &data));
  return data;
}

static void trampoline(void* user, size_t i) { (*static_cast<const std::function<void(size_t)>*>(user))(i); }

void Ctx::parallel_for(size_t tasks, const std::function<void(size_t)>& fn) const {
  if (tasks == 0) return;
  if (tasks == 1) return fn(0);
  // An exception must not cross onnxruntime's thread pool: keep the first one.
  std::exception_ptr error;
  std::mutex m;
  std::function<void(size_t)> guarded = [&](size_t i) {
    try {
      fn(i);
    } catch (...) {
      std::lock_guard<std::mutex> lock(m);
      if (!error) error = std::current_exception();
    }
  };
  throw_on(g_api->KernelContext_ParallelFor(ctx_, trampoline, tasks, 0, &guarded));
  if (error) std::rethrow_exception(error);
}

void check_same_type(const char* op, const std::vector<View>& views, const OpDef& def) {
  for (size_t i = 1; i < views.size(); ++i)
    if (views[i].type != views[0].type)
      throw OpFailure(op, def.inputs[i], "element type differs from input '" + std::string(def.inputs[0]) + "'");
}

#if !defined(__FLT16_MANT_DIG__)
float h2f(uint16_t h) {
  uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 31, man = h & 1023;
  float v = exp == 0 ? std::ldexp(static_cast<float>(man), -24)
          : exp == 31 ? (man ? NAN : INFINITY)
                      : std::ldexp(static_cast<float>(man | 1024), static_cast<int>(exp) - 25);
  return sign ? -v : v;
}
uint16_t f2h(float f) {
  // round-to-nearest-even through float arithmetic is not needed on the
  // compilers this project uses (_Float16 exists); keep a simple fallback.
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint16_t sign = (x >> 16) & 0x8000;
  float a = std::fabs(f);
  if (std::isnan(f)) return sign | 0x7e00;
  if (a >= 65520.f) return sign | 0x7c00;
  if (a < 6.103515625e-05f) return sign | static_cast<uint16_t>(std::nearbyint(a * 16777216.f));
  int e;
  float m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  uint32_t man = static_cast<uint32_t>(std::nearbyint((m * 2 - 1) * 1024));
  if (man == 1024) { man = 0; ++e; }
  return sign | static_cast<uint16_t>(((e + 14) << 10) | man);
}
#endif

void half_to_float(const uint16_t* src, float* dst, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) dst[i] = h2f(src[i]);
}

void float_to_half(const float* src, uint16_t* dst, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) dst[i] = f2h(src[i]);
}

// -- the OrtCustomOp objects ----------------------------------------------------
// One per (op, element type); onnxruntime picks the kernel by the node's type.
struct Entry : OrtCustomOp {
  const OpDef* def;
  ONNXTensorElementDataType type;
  std::atomic<uint64_t>* calls;
};

struct Instance {
  Kernel* kernel;
  std::atomic<uint64_t>* calls;
};

static OrtStatus* status_of(const std::exception& e, OrtErrorCode code) {
  return g_api->CreateStatus(code, e.what());
}

static Entry* make_entry(const OpDef* def, ONNXTensorElementDataType type) {
  auto* e = new Entry();
  std::memset(static_cast<OrtCustomOp*>(e), 0, sizeof(OrtCustomOp));
  e->def = def;
  e->type = type;
  e->calls = &counters()[def->name];
  e->version = ORT_API_VERSION;
  e->GetName = [](const OrtCustomOp* op) { return static_cast<const Entry*>(op)->def->name; };
  e->GetExecutionProviderType = [](const OrtCustomOp*) -> const char* { return nullptr; };
  e->GetInputType = [](const OrtCustomOp* op, size_t) { return static_cast<const Entry*>(op)->type; };
  e->GetInputTypeCount = [](const OrtCustomOp* op) { return static_cast<const Entry*>(op)->def->inputs.size(); };
  e->GetOutputType = [](const OrtCustomOp* op, size_t) { return static_cast<const Entry*>(op)->type; };
  e->GetOutputTypeCount = [](const OrtCustomOp* op) { return static_cast<const Entry*>(op)->def->outputs.size(); };
  e->KernelDestroy = [](void* k) {
    auto* inst = static_cast<Instance*>(k);
    delete inst->kernel;
    delete inst;
  };
  e->GetInputCharacteristic = [](const OrtCustomOp*, size_t) { return INPUT_OUTPUT_REQUIRED; };
  e->GetOutputCharacteristic = [](const OrtCustomOp*, size_t) { return INPUT_OUTPUT_REQUIRED; };
  e->GetInputMemoryType = [](const OrtCustomOp*, size_t) { return OrtMemTypeDefault; };
  e->GetVariadicInputMinArity = [](const OrtCustomOp*) { return 1; };
  e->GetVariadicInputHomogeneity = [](const OrtCustomOp*) { return 1; };
  e->GetVariadicOutputMinArity = [](const OrtCustomOp*) { return 1; };
  e->GetVariadicOutputHomogeneity = [](const OrtCustomOp*) { return 1; };
  e->CreateKernelV2 = [](const OrtCustomOp* op, const OrtApi*, const OrtKernelInfo* info,
                         void** kernel) -> OrtStatus* {
    const Entry* entry = static_cast<const Entry*>(op);
    try {
      Attrs attrs(info, entry->def->name, entry->def->attrs);
      *kernel = new Instance{entry->def->create(attrs, info), entry->calls};
      return nullptr;
    } catch (const OpFailure& e) {
      return status_of(e, ORT_INVALID_ARGUMENT);
    } catch (const std::exception& e) {
      return status_of(e, ORT_FAIL);
    }
  };
  e->KernelComputeV2 = [](void* k, OrtKernelContext* context) -> OrtStatus* {
    auto* inst = static_cast<Instance*>(k);
    try {
      Ctx ctx(context);
      inst->kernel->compute(ctx);
      inst->calls->fetch_add(1, std::memory_order_relaxed);
      return nullptr;
    } catch (const OpFailure& e) {
      return status_of(e, ORT_INVALID_ARGUMENT);
    } catch (const std::bad_alloc&) {
      return g_api->CreateStatus(ORT_FAIL, "com.bridge kernel: out of memory");
    } catch (const std::exception& e) {
      return status_of(e, ORT_FAIL);
    }
  };
  e->GetStartVersion = [](const OrtCustomOp*) { return 1; };
  e->GetEndVersion = [](const OrtCustomOp*) { return static_cast<int>((1UL << 31) - 1); };
  return e;
}

static const std::vector<Entry*>& entries() {
  static std::vector<Entry*> all = [] {
    std::vector<Entry*> v;
    for (const OpDef* def : registry()) {
      v.push_back(make_entry(def, ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT));
      v.push_back(make_entry(def, ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16));
    }
    return v;
  }();
  return all;
}

static std::string known_ops() {
  std::string s;
  for (const OpDef* def : registry()) s += (s.empty() ? "" : ",") + std::string(def->name);
  return s;
}

// The ops named by the session config entry bridge.kernels: a comma list of op
// types, "all" (also the default when the entry is absent) or "none".
static std::vector<std::string> selected(const OrtSessionOptions* options) {
  std::string value = "all";
  int has = 0;
  if (!g_api->HasSessionConfigEntry(options, kConfigKey, &has) && has) {
    size_t n = 0;
    throw_on(g_api->GetSessionConfigEntry(options, kConfigKey, nullptr, &n));
    std::string buf(n, '\0');
    throw_on(g_api->GetSessionConfigEntry(options, kConfigKey, buf.data(), &n));
    value = buf.c_str();
  }
  std::vector<std::string> out;
  if (value == "none" || value.empty()) return out;
  if (value == "all") {
    for (const OpDef* def : registry()) out.push_back(def->name);
    return out;
  }
  std::stringstream ss(value);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    bool ok = false;
    for (const OpDef* def : registry()) ok |= item == def->name;
    if (!ok)
      throw std::invalid_argument(std::string(kConfigKey) + ": unknown op '" + item + "'; the library has " +
                                  known_ops() + " (or use all / none)");
    out.push_back(item);
  }
  return out;
}

}  // namespace bridge

using namespace bridge;

BRIDGE_EXPORT OrtStatus* ORT_API_CALL RegisterCustomOps(OrtSessionOptions* options, const OrtApiBase* api_base) {
  const OrtApi* api = api_base->GetApi(ORT_API_VERSION);
  if (!api) {
    const OrtApi* v1 = api_base->GetApi(1);
    std::string msg = std::string("the com.bridge kernels need onnxruntime API version ") +
                      std::to_string(ORT_API_VERSION) + " or newer; this onnxruntime is " +
                      api_base->GetVersionString() + ". Fix: upgrade onnxruntime or rebuild with older headers "
                      "(ORT_INCLUDE_DIR)";
    return v1 ? v1->CreateStatus(ORT_FAIL, msg.c_str()) : nullptr;
  }
  static std::mutex m;
  std::lock_guard<std::mutex> lock(m);
  g_api = api;
  try {
    std::vector<std::string> names = selected(options);
    if (names.empty()) return nullptr;
    // One domain per spec domain (bridge's ops: com.bridge; a team's core: its
    // own). Domains live as long as the process: sessions keep pointers into them.
    std::map<std::string, OrtCustomOpDomain*> domains;
    for (Entry* e : entries()) {
      bool want = false;
      for (const auto& n : names) want |= n == e->def->name;
      if (!want) continue;
      OrtCustomOpDomain*& domain = domains[e->def->domain];
      if (!domain)
        if (OrtStatus* st = api->CreateCustomOpDomain(e->def->domain, &domain)) return st;
      if (OrtStatus* st = api->CustomOpDomain_Add(domain, e)) return st;
    }
    for (const auto& [name, domain] : domains)
      if (OrtStatus* st = api->AddCustomOpDomain(options, domain)) return st;
    return nullptr;
  } catch (const std::exception& e) {
    return api->CreateStatus(ORT_INVALID_ARGUMENT, e.what());
  }
}

// The ops and their ONNX signatures, as JSON:
// {"OpType": {"inputs": [...], "outputs": [...], "attrs": [{"name", "type", "default"}]}}
BRIDGE_EXPORT const char* bridge_ort_describe() {
  static std::string text = [] {
    std::string s = "{";
    auto quote = [](const std::string& v) { return "\"" + v + "\""; };
    auto list = [&](const std::vector<const char*>& v) {
      std::string r = "[";
      for (size_t i = 0; i < v.size(); ++i) r += (i ? "," : "") + quote(v[i]);
      return r + "]";
    };
    for (size_t k = 0; k < registry().size(); ++k) {
      const OpDef* d = registry()[k];
      s += (k ? "," : "") + quote(d->name) + ":{\"inputs\":" + list(d->inputs) + ",\"outputs\":" + list(d->outputs) +
           ",\"attrs\":[";
      for (size_t i = 0; i < d->attrs.size(); ++i) {
        const AttrDef& a = d->attrs[i];
        s += (i ? "," : "") + std::string("{\"name\":") + quote(a.name) + ",\"type\":" + quote(a.type) +
             ",\"default\":" + (a.def ? quote(a.def) : "null") + "}";
      }
      s += "]}";
    }
    return s + "}";
  }();
  return text.c_str();
}

// How many times the kernel of `op` ran in this process (a test's proof that
// the native kernel, not the function body, computed a result).
BRIDGE_EXPORT uint64_t bridge_ort_calls(const char* op) {
  auto it = counters().find(op);
  return it == counters().end() ? 0 : it->second.load();
}
