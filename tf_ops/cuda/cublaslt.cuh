// cuBLASLt, loaded at run time, and the one matrix product the convolution needs.
//
// Loaded with dlopen rather than linked: the machine that compiles the kernels
// (CI: nvcc and headers only) has no libcublasLt, and the processes that run them
// (TensorFlow, PyTorch, CuPy) have usually loaded one already. `BRIDGE_CUBLASLT`
// names a library file to use first; otherwise one already in the process, else
// libcublasLt.so.13, .so.12, .so.
// Handles are per device; the chosen algorithm is cached per shape.
#ifndef BRIDGE_TF_OPS_CUDA_CUBLASLT_CUH_
#define BRIDGE_TF_OPS_CUDA_CUBLASLT_CUH_

#include <cublasLt.h>
#include <dlfcn.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "common.cuh"

namespace bridge_cuda {
namespace lt {

struct Api {
  decltype(&cublasLtCreate) Create = nullptr;
  decltype(&cublasLtMatmulDescCreate) DescCreate = nullptr;
  decltype(&cublasLtMatmulDescDestroy) DescDestroy = nullptr;
  decltype(&cublasLtMatmulDescSetAttribute) DescSet = nullptr;
  decltype(&cublasLtMatrixLayoutCreate) LayoutCreate = nullptr;
  decltype(&cublasLtMatrixLayoutDestroy) LayoutDestroy = nullptr;
  decltype(&cublasLtMatmulPreferenceCreate) PrefCreate = nullptr;
  decltype(&cublasLtMatmulPreferenceDestroy) PrefDestroy = nullptr;
  decltype(&cublasLtMatmulPreferenceSetAttribute) PrefSet = nullptr;
  decltype(&cublasLtMatmulAlgoGetHeuristic) Heuristic = nullptr;
  decltype(&cublasLtMatmul) Matmul = nullptr;
  std::string error;  // why the library could not be used; empty when it can
};

inline const Api& GetApi() {
  static const Api api = [] {
    Api a;
    std::vector<std::string> names;
    if (const char* env = std::getenv("BRIDGE_CUBLASLT")) names.push_back(env);
    names.insert(names.end(), {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"});
    void* lib = nullptr;
    std::string tried;
#ifdef BRIDGE_CUDA_EMULATION
    // The CPU emulator's stand-in, in the emulator's own library: never a real one.
    names.clear();
    lib = ::bridge_emu::SelfHandle();
    if (!lib) tried = "\n  the emulator library could not open itself";
#endif
    // Unless told which, a library the process has loaded already (TensorFlow's,
    // PyTorch's) first.
    for (const auto& name : names) {
      if (std::getenv("BRIDGE_CUBLASLT")) break;
      lib = dlopen(name.c_str(), RTLD_NOW | RTLD_NOLOAD);
      if (lib) break;
    }
    for (const auto& name : names) {
      if (lib) break;
      lib = dlopen(name.c_str(), RTLD_NOW | RTLD_GLOBAL);
      if (lib) break;
      const char* why = dlerror();
      tried += "\n  " + name + ": " + (why ? why : "not found");
    }
    if (!lib) {
      a.error = "cuBLASLt could not be loaded (YoloConvBnLeaky multiplies with it):" + tried +
                "\nFix: install it (pip install nvidia-cublas, or the CUDA toolkit's libcublas) or set "
                "BRIDGE_CUBLASLT to the path of libcublasLt.so";
      return a;
    }
#define BRIDGE_LT_LOAD(field, symbol)                                                     \
  a.field = reinterpret_cast<decltype(a.field)>(dlsym(lib, #symbol));                     \
  if (!a.field) {                                                                         \
    a.error = "cuBLASLt library lacks " #symbol " (too old? CUDA 12 or newer is needed)"; \
    return a;                                                                             \
  }
    BRIDGE_LT_LOAD(Create, cublasLtCreate)
    BRIDGE_LT_LOAD(DescCreate, cublasLtMatmulDescCreate)
    BRIDGE_LT_LOAD(DescDestroy, cublasLtMatmulDescDestroy)
    BRIDGE_LT_LOAD(DescSet, cublasLtMatmulDescSetAttribute)
    BRIDGE_LT_LOAD(LayoutCreate, cublasLtMatrixLayoutCreate)
    BRIDGE_LT_LOAD(LayoutDestroy, cublasLtMatrixLayoutDestroy)
    BRIDGE_LT_LOAD(PrefCreate, cublasLtMatmulPreferenceCreate)
    BRIDGE_LT_LOAD(PrefDestroy, cublasLtMatmulPreferenceDestroy)
    BRIDGE_LT_LOAD(PrefSet, cublasLtMatmulPreferenceSetAttribute)
    BRIDGE_LT_LOAD(Heuristic, cublasLtMatmulAlgoGetHeuristic)
    BRIDGE_LT_LOAD(Matmul, cublasLtMatmul)
#undef BRIDGE_LT_LOAD
    return a;
  }();
  return api;
}

inline Status CheckLt(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return Ok();
  return Error(std::string("cuBLASLt ") + what + " failed with status " + std::to_string(static_cast<int>(s)));
}

// One handle per device, made on first use and kept for the process's life.
inline Status HandleForCurrentDevice(cublasLtHandle_t* out) {
  const Api& api = GetApi();
  if (!api.error.empty()) return Error(api.error);
  int device = 0;
  Status s = Check(cudaGetDevice(&device), "cudaGetDevice");
  if (!s.ok()) return s;
  static std::mutex mu;
  static std::map<int, cublasLtHandle_t> handles;
  std::lock_guard<std::mutex> lock(mu);
  auto it = handles.find(device);
  if (it == handles.end()) {
    cublasLtHandle_t h = nullptr;
    s = CheckLt(api.Create(&h), "cublasLtCreate");
    if (!s.ok()) return s;
    it = handles.emplace(device, h).first;
  }
  *out = it->second;
  return Ok();
}

// Frees the descriptors of one product however it ends.
struct Descriptors {
  const Api& api;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  explicit Descriptors(const Api& x) : api(x) {}
  ~Descriptors() {
    if (pref) api.PrefDestroy(pref);
    if (d) api.LayoutDestroy(d);
    if (b) api.LayoutDestroy(b);
    if (a) api.LayoutDestroy(a);
    if (op) api.DescDestroy(op);
  }
};

inline uint32_t AlignmentOf(const void* p) {
  for (uint32_t a = 16; a > 1; a >>= 1) {
    if (Aligned(p, a)) return a;
  }
  return 1;
}

// D = A * B (+ bias per row of D), all column-major: A is m x k (ld m), B is k x n
// (ld k), D is m x n (ld m); `type` is CUDA_R_32F or CUDA_R_16F for every matrix
// and the bias, accumulation is float32 (TF32 when `tf32`). Sets *no_algorithm
// (and returns an error) when cuBLASLt offers no algorithm for this product, so a
// caller can retry it without the bias epilogue.
inline Status Matmul(const void* A, const void* B, void* D, const void* bias, int64_t m, int64_t n, int64_t k,
                     cudaDataType_t type, bool tf32, void* workspace, size_t workspace_bytes, cudaStream_t stream,
                     bool* no_algorithm) {
  *no_algorithm = false;
  cublasLtHandle_t handle;
  Status s = HandleForCurrentDevice(&handle);
  if (!s.ok()) return s;
  const Api& api = GetApi();
  Descriptors desc(api);
  const cublasComputeType_t compute =
      (type == CUDA_R_32F && tf32) ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  s = CheckLt(api.DescCreate(&desc.op, compute, CUDA_R_32F), "cublasLtMatmulDescCreate");
  if (!s.ok()) return s;
  const cublasOperation_t no_transpose = CUBLAS_OP_N;
  api.DescSet(desc.op, CUBLASLT_MATMUL_DESC_TRANSA, &no_transpose, sizeof(no_transpose));
  api.DescSet(desc.op, CUBLASLT_MATMUL_DESC_TRANSB, &no_transpose, sizeof(no_transpose));
  if (bias) {
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    s = CheckLt(api.DescSet(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)), "set epilogue");
    if (s.ok()) s = CheckLt(api.DescSet(desc.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)), "set bias");
    if (!s.ok()) {
      *no_algorithm = true;
      return s;
    }
  }
  s = CheckLt(api.LayoutCreate(&desc.a, type, m, k, m), "layout A");
  if (s.ok()) s = CheckLt(api.LayoutCreate(&desc.b, type, k, n, k), "layout B");
  if (s.ok()) s = CheckLt(api.LayoutCreate(&desc.d, type, m, n, m), "layout D");
  if (s.ok()) s = CheckLt(api.PrefCreate(&desc.pref), "cublasLtMatmulPreferenceCreate");
  if (!s.ok()) return s;
  const uint64_t ws = workspace_bytes;
  api.PrefSet(desc.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  // The heuristic assumes 16-byte aligned matrices unless told otherwise.
  const uint32_t align_a = AlignmentOf(A), align_b = AlignmentOf(B), align_d = AlignmentOf(D);
  api.PrefSet(desc.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof(align_a));
  api.PrefSet(desc.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof(align_b));
  api.PrefSet(desc.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_d, sizeof(align_d));
  api.PrefSet(desc.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d, sizeof(align_d));

  int device = 0;
  cudaGetDevice(&device);
  using Key = std::tuple<int, int64_t, int64_t, int64_t, int, bool, bool, uint32_t, uint32_t, uint32_t, uint64_t>;
  const Key key{device, m, n, k, static_cast<int>(type), tf32, bias != nullptr, align_a, align_b, align_d, ws};
  static std::mutex mu;
  static std::map<Key, cublasLtMatmulAlgo_t> algos;
  cublasLtMatmulAlgo_t algo;
  bool cached = false;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = algos.find(key);
    if (it != algos.end()) algo = it->second, cached = true;
  }
  if (!cached) {
    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    cublasStatus_t hs =
        api.Heuristic(handle, desc.op, desc.a, desc.b, desc.d, desc.d, desc.pref, 1, &result, &found);
    if (hs != CUBLAS_STATUS_SUCCESS || found == 0) {
      *no_algorithm = true;
      return Error("cuBLASLt has no algorithm for a " + std::to_string(m) + "x" + std::to_string(k) + " by " +
                   std::to_string(k) + "x" + std::to_string(n) + (type == CUDA_R_16F ? " float16" : " float32") +
                   " product" + (bias ? " with a bias epilogue" : "") + " (status " +
                   std::to_string(static_cast<int>(hs)) + ")");
    }
    algo = result.algo;
    std::lock_guard<std::mutex> lock(mu);
    algos.emplace(key, algo);
  }
  const float alpha = 1.0f, beta = 0.0f;
  return CheckLt(api.Matmul(handle, desc.op, &alpha, A, desc.a, B, desc.b, &beta, D, desc.d, D, desc.d, &algo,
                            workspace, workspace_bytes, stream),
                 "cublasLtMatmul");
}

}  // namespace lt
}  // namespace bridge_cuda

#endif  // BRIDGE_TF_OPS_CUDA_CUBLASLT_CUH_
