// FusedBiasGelu's onnxruntime CPU kernel: y = gelu(x + bias), the exact erf GELU,
// for the node com.example::FusedBiasGelu in float32 and float16 (computed in
// float32, as the TensorFlow kernel does).
//
// A team's own onnxruntime custom-op library: only onnxruntime's C API, through
// the OrtApi table handed to RegisterCustomOps, so it links no libonnxruntime and
// loads into any onnxruntime that serves ORT_API_VERSION of the headers it was
// built against. bridge registers it in every onnxruntime session it makes
// (`--ort-library examples/custom_op/ort`); the spec is fused_bias_gelu.py.
#include <onnxruntime_c_api.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

const char* kDomain = "com.example";
const char* kOp = "FusedBiasGelu";
const OrtApi* api = nullptr;
std::atomic<uint64_t> calls{0};  // how often the kernel ran: a test's proof that it, not the body, did

// The message names the op and the argument, in the spec's words.
struct BadInput : std::runtime_error {
  BadInput(const std::string& arg, const std::string& msg)
      : std::runtime_error(std::string(kOp) + ": argument '" + arg + "': " + msg) {}
};

void Check(OrtStatus* status) {
  if (!status) return;
  std::string msg = api->GetErrorMessage(status);
  api->ReleaseStatus(status);
  throw std::runtime_error(msg);
}

std::string Dims(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

std::vector<int64_t> ShapeOf(const OrtValue* value) {
  OrtTensorTypeAndShapeInfo* info = nullptr;
  Check(api->GetTensorTypeAndShape(value, &info));
  size_t rank = 0;
  OrtStatus* st = api->GetDimensionsCount(info, &rank);
  std::vector<int64_t> shape(rank);
  if (!st && rank) st = api->GetDimensions(info, shape.data(), rank);
  api->ReleaseTensorTypeAndShapeInfo(info);
  Check(st);
  return shape;
}

inline float Gelu(float z) { return 0.5f * z * (1.0f + std::erf(z * 0.70710678118654752f)); }

#if defined(__FLT16_MANT_DIG__)
#define FUSED_BIAS_GELU_HAVE_FLOAT16 1
inline float Load(const uint16_t& h) {
  _Float16 v;
  std::memcpy(&v, &h, 2);
  return static_cast<float>(v);
}
inline void Store(float f, uint16_t* h) {
  _Float16 v = static_cast<_Float16>(f);
  std::memcpy(h, &v, 2);
}
#endif
inline float Load(const float& f) { return f; }
inline void Store(float f, float* out) { *out = f; }

template <typename T>
void Compute(OrtKernelContext* context) {
  const OrtValue* x = nullptr;
  const OrtValue* bias = nullptr;
  Check(api->KernelContext_GetInput(context, 0, &x));
  Check(api->KernelContext_GetInput(context, 1, &bias));
  const std::vector<int64_t> xs = ShapeOf(x), bs = ShapeOf(bias);
  if (xs.empty()) throw BadInput("x", "must have rank >= 1, got a scalar (shape [])");
  const int64_t c = xs.back();
  if (bs.size() != 1 || bs[0] != c) {
    throw BadInput("bias", "must have shape [C]=[" + std::to_string(c) + "] (the last dim of x " + Dims(xs) +
                               "), got " + Dims(bs));
  }
  int64_t n = 1;
  for (int64_t d : xs) n *= d;
  OrtValue* y = nullptr;
  Check(api->KernelContext_GetOutput(context, 0, xs.data(), xs.size(), &y));
  if (n == 0) return;
  const T* xp = nullptr;
  const T* bp = nullptr;
  T* yp = nullptr;
  Check(api->GetTensorMutableData(const_cast<OrtValue*>(x), (void**)&xp));
  Check(api->GetTensorMutableData(const_cast<OrtValue*>(bias), (void**)&bp));
  Check(api->GetTensorMutableData(y, (void**)&yp));
  for (int64_t row = 0; row < n / c; ++row) {
    const T* xr = xp + row * c;
    T* yr = yp + row * c;
    for (int64_t j = 0; j < c; ++j) Store(Gelu(Load(xr[j]) + Load(bp[j])), yr + j);
  }
}

// One OrtCustomOp per element type: onnxruntime picks the kernel by the node's type.
struct Op : OrtCustomOp {
  ONNXTensorElementDataType type;
  void (*compute)(OrtKernelContext*);
};

OrtStatus* Failed(const std::exception& e, OrtErrorCode code) { return api->CreateStatus(code, e.what()); }

Op* MakeOp(ONNXTensorElementDataType type, void (*compute)(OrtKernelContext*)) {
  Op* op = new Op();
  std::memset(static_cast<OrtCustomOp*>(op), 0, sizeof(OrtCustomOp));
  op->type = type;
  op->compute = compute;
  op->version = ORT_API_VERSION;
  op->GetName = [](const OrtCustomOp*) { return kOp; };
  op->GetExecutionProviderType = [](const OrtCustomOp*) -> const char* { return nullptr; };
  op->GetInputType = [](const OrtCustomOp* o, size_t) { return static_cast<const Op*>(o)->type; };
  op->GetInputTypeCount = [](const OrtCustomOp*) -> size_t { return 2; };
  op->GetOutputType = [](const OrtCustomOp* o, size_t) { return static_cast<const Op*>(o)->type; };
  op->GetOutputTypeCount = [](const OrtCustomOp*) -> size_t { return 1; };
  op->GetInputCharacteristic = [](const OrtCustomOp*, size_t) { return INPUT_OUTPUT_REQUIRED; };
  op->GetOutputCharacteristic = [](const OrtCustomOp*, size_t) { return INPUT_OUTPUT_REQUIRED; };
  op->GetInputMemoryType = [](const OrtCustomOp*, size_t) { return OrtMemTypeDefault; };
  op->GetVariadicInputMinArity = [](const OrtCustomOp*) { return 1; };
  op->GetVariadicInputHomogeneity = [](const OrtCustomOp*) { return 1; };
  op->GetVariadicOutputMinArity = [](const OrtCustomOp*) { return 1; };
  op->GetVariadicOutputHomogeneity = [](const OrtCustomOp*) { return 1; };
  // The kernel keeps nothing: its "instance" is the op itself.
  op->CreateKernelV2 = [](const OrtCustomOp* o, const OrtApi*, const OrtKernelInfo*, void** kernel) -> OrtStatus* {
    *kernel = const_cast<OrtCustomOp*>(o);
    return nullptr;
  };
  op->KernelComputeV2 = [](void* kernel, OrtKernelContext* context) -> OrtStatus* {
    try {
      static_cast<Op*>(kernel)->compute(context);
      calls.fetch_add(1, std::memory_order_relaxed);
      return nullptr;
    } catch (const BadInput& e) {
      return Failed(e, ORT_INVALID_ARGUMENT);
    } catch (const std::exception& e) {
      return Failed(e, ORT_FAIL);
    }
  };
  op->KernelDestroy = [](void*) {};
  op->GetStartVersion = [](const OrtCustomOp*) { return 1; };
  op->GetEndVersion = [](const OrtCustomOp*) { return static_cast<int>((1UL << 31) - 1); };
  return op;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) uint64_t fused_bias_gelu_ort_calls(void) { return calls.load(); }

// What onnxruntime calls when the library is registered with a session.
extern "C" __attribute__((visibility("default"))) OrtStatus* RegisterCustomOps(OrtSessionOptions* options,
                                                                              const OrtApiBase* base) {
  const OrtApi* got = base->GetApi(ORT_API_VERSION);
  if (!got) return nullptr;  // an onnxruntime older than these headers: nothing to report through
  api = got;
  // Made once: onnxruntime keeps pointers to the ops for every session's lifetime.
  static std::vector<Op*> ops = [] {
    std::vector<Op*> v{MakeOp(ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, Compute<float>)};
#ifdef FUSED_BIAS_GELU_HAVE_FLOAT16
    v.push_back(MakeOp(ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16, Compute<uint16_t>));
#endif
    return v;
  }();
  OrtCustomOpDomain* domain = nullptr;
  if (OrtStatus* st = api->CreateCustomOpDomain(kDomain, &domain)) return st;
  for (Op* op : ops) {
    if (OrtStatus* st = api->CustomOpDomain_Add(domain, op)) return st;
  }
  return api->AddCustomOpDomain(options, domain);
}
