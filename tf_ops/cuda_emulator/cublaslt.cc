// A stand-in for the cuBLASLt calls of tf_ops/cuda/cublaslt.cuh, on host memory,
// with the signatures of the real cublasLt.h (so a call the real library would
// take compiles the same here). It checks what the real library assumes and
// would not report: matrix shapes that agree, the pointers' alignment against
// what the preference promised, the workspace limit, the bias epilogue's vector.
// Products accumulate in float32; CUBLAS_COMPUTE_32F_FAST_TF32 first rounds both
// inputs to TF32 (10-bit mantissa), as the tensor cores read them.
#include <cublasLt.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "emulator.h"

#define BRIDGE_EMU_API extern "C" __attribute__((visibility("default")))

namespace {

struct Desc {
  cublasComputeType_t compute;
  cudaDataType_t scale;
  cublasOperation_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
};

struct Layout {
  cudaDataType_t type;
  uint64_t rows, cols;
  int64_t ld;
};

struct Pref {
  uint64_t max_workspace = 0;
  uint32_t align[4] = {256, 256, 256, 256};  // A, B, C, D; cuBLASLt's default assumption
};

constexpr uint64_t kAlgoMagic = 0x6272696467656d75ull;  // "bridgemu"

struct State {
  std::mutex mu;
  std::string log;
  int64_t heuristics = 0, products = 0, with_bias = 0;
  bool refuse_bias_epilogue = false;  // no algorithm with the BIAS epilogue, as some shapes get
} state;

cublasStatus_t Refuse(const std::string& why) {
  std::lock_guard<std::mutex> lock(state.mu);
  state.log += "cuBLASLt: " + why + "\n";
  return CUBLAS_STATUS_INVALID_VALUE;
}

// Copies an attribute's value into its field after checking its size.
cublasStatus_t SetField(void* field, size_t expected, const void* buf, size_t size, const std::string& what) {
  if (size != expected) {
    return Refuse(what + " set with " + std::to_string(size) + " bytes, expects " + std::to_string(expected));
  }
  std::memcpy(field, buf, size);
  return CUBLAS_STATUS_SUCCESS;
}

bool AlignedTo(const void* p, uint32_t bytes) { return bytes <= 1 || reinterpret_cast<uintptr_t>(p) % bytes == 0; }

float Tf32(float v) {
  // Round to nearest even at 10 mantissa bits (13 dropped), as TF32 keeps.
  uint32_t u;
  std::memcpy(&u, &v, 4);
  if ((u & 0x7f800000u) == 0x7f800000u) return v;  // inf, NaN
  u += 0x0fffu + ((u >> 13) & 1u);
  u &= ~0x1fffu;
  std::memcpy(&v, &u, 4);
  return v;
}

std::vector<float> ToFloat(const void* p, const Layout& l, bool tf32) {
  std::vector<float> out(l.rows * l.cols);
  for (uint64_t c = 0; c < l.cols; ++c) {
    for (uint64_t r = 0; r < l.rows; ++r) {
      const uint64_t i = r + c * static_cast<uint64_t>(l.ld);
      float v = l.type == CUDA_R_16F ? __half2float(static_cast<const __half*>(p)[i]) : static_cast<const float*>(p)[i];
      out[r + c * l.rows] = tf32 ? Tf32(v) : v;
    }
  }
  return out;
}

std::string Shape(const Layout& l) { return std::to_string(l.rows) + "x" + std::to_string(l.cols); }

// The checks shared by the heuristic and the product; "" when the call is valid.
std::string Invalid(const Desc& d, const Layout& a, const Layout& b, const Layout& c, const Layout& dd) {
  if (d.compute != CUBLAS_COMPUTE_32F && d.compute != CUBLAS_COMPUTE_32F_FAST_TF32) {
    return "compute type " + std::to_string(d.compute) + " is not emulated";
  }
  if (d.scale != CUDA_R_32F) return "scale type must be CUDA_R_32F with a 32F compute type";
  if (d.transa != CUBLAS_OP_N || d.transb != CUBLAS_OP_N) return "only untransposed operands are emulated";
  if (d.epilogue != CUBLASLT_EPILOGUE_DEFAULT && d.epilogue != CUBLASLT_EPILOGUE_BIAS) {
    return "epilogue " + std::to_string(d.epilogue) + " is not emulated";
  }
  if (d.epilogue == CUBLASLT_EPILOGUE_BIAS && !d.bias) return "the BIAS epilogue without a bias pointer";
  for (const Layout* l : {&a, &b, &c, &dd}) {
    if (l->type != a.type) return "matrices of different types";
    if (l->type != CUDA_R_32F && l->type != CUDA_R_16F) return "type " + std::to_string(l->type) + " is not emulated";
    if (l->ld < static_cast<int64_t>(l->rows) || l->ld < 1) return "leading dimension below the row count";
  }
  if (d.compute == CUBLAS_COMPUTE_32F_FAST_TF32 && a.type != CUDA_R_32F) return "TF32 compute on float16 matrices";
  if (a.cols != b.rows || a.rows != dd.rows || b.cols != dd.cols || c.rows != dd.rows || c.cols != dd.cols) {
    return "shapes do not agree: A " + Shape(a) + ", B " + Shape(b) + ", C " + Shape(c) + ", D " + Shape(dd);
  }
  return "";
}

}  // namespace

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  static int the_handle;
  *handle = reinterpret_cast<cublasLtHandle_t>(&the_handle);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
  Desc* d = new Desc;
  d->compute = compute;
  d->scale = scale;
  *desc = reinterpret_cast<cublasLtMatmulDesc_t>(d);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete reinterpret_cast<Desc*>(desc);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t size) {
  Desc* d = reinterpret_cast<Desc*>(desc);
  auto take = [&](void* field, size_t expected) {
    return SetField(field, expected, buf, size, "matmul attribute " + std::to_string(attr));
  };
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA: return take(&d->transa, sizeof(int32_t));
    case CUBLASLT_MATMUL_DESC_TRANSB: return take(&d->transb, sizeof(int32_t));
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return take(&d->epilogue, sizeof(uint32_t));
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return take(&d->bias, sizeof(void*));
    default: return Refuse("matmul attribute " + std::to_string(attr) + " is not emulated");
  }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  *layout = reinterpret_cast<cublasLtMatrixLayout_t>(new Layout{type, rows, cols, ld});
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete reinterpret_cast<Layout*>(layout);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  *pref = reinterpret_cast<cublasLtMatmulPreference_t>(new Pref);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete reinterpret_cast<Pref*>(pref);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t size) {
  Pref* p = reinterpret_cast<Pref*>(pref);
  auto take = [&](void* field, size_t expected) {
    return SetField(field, expected, buf, size, "preference " + std::to_string(attr));
  };
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: return take(&p->max_workspace, sizeof(uint64_t));
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: return take(&p->align[0], sizeof(uint32_t));
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: return take(&p->align[1], sizeof(uint32_t));
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: return take(&p->align[2], sizeof(uint32_t));
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: return take(&p->align[3], sizeof(uint32_t));
    default: return Refuse("preference " + std::to_string(attr) + " is not emulated");
  }
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
                                              cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                                              cublasLtMatrixLayout_t d, cublasLtMatmulPreference_t pref,
                                              int requested, cublasLtMatmulHeuristicResult_t results[], int* found) {
  const Desc& op = *reinterpret_cast<Desc*>(desc);
  *found = 0;
  {
    std::lock_guard<std::mutex> lock(state.mu);
    ++state.heuristics;
    if (state.refuse_bias_epilogue && op.epilogue == CUBLASLT_EPILOGUE_BIAS) return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  const std::string why = Invalid(op, *reinterpret_cast<Layout*>(a), *reinterpret_cast<Layout*>(b),
                                  *reinterpret_cast<Layout*>(c), *reinterpret_cast<Layout*>(d));
  if (!why.empty()) return Refuse(why);
  if (requested < 1) return Refuse("requested no algorithm");
  std::memset(&results[0], 0, sizeof(results[0]));
  results[0].algo.data[0] = kAlgoMagic;
  std::memcpy(&results[0].algo.data[1], reinterpret_cast<Pref*>(pref)->align, sizeof(uint32_t) * 4);
  results[0].workspaceSize = 0;
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *found = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
                              cublasLtMatrixLayout_t adesc, const void* B, cublasLtMatrixLayout_t bdesc,
                              const void* beta, const void* C, cublasLtMatrixLayout_t cdesc, void* D,
                              cublasLtMatrixLayout_t ddesc, const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspace_bytes, cudaStream_t) {
  const Desc& op = *reinterpret_cast<Desc*>(desc);
  const Layout &a = *reinterpret_cast<Layout*>(adesc), &b = *reinterpret_cast<Layout*>(bdesc),
               &c = *reinterpret_cast<Layout*>(cdesc), &d = *reinterpret_cast<Layout*>(ddesc);
  const std::string why = Invalid(op, a, b, c, d);
  if (!why.empty()) return Refuse(why);
  if (!algo || algo->data[0] != kAlgoMagic) return Refuse("an algorithm the heuristic did not return");
  uint32_t align[4];
  std::memcpy(align, &algo->data[1], sizeof(align));
  const void* pointers[4] = {A, B, C, D};
  for (int i = 0; i < 4; ++i) {
    if (!AlignedTo(pointers[i], align[i])) {
      return Refuse(std::string("matrix ") + "ABCD"[i] + " is not aligned to the " + std::to_string(align[i]) +
                    " bytes the preference promised");
    }
  }
  if (workspace_bytes > 0 && !workspace) return Refuse("a workspace size without a workspace");
  const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  const bool tf32 = op.compute == CUBLAS_COMPUTE_32F_FAST_TF32;
  const std::vector<float> fa = ToFloat(A, a, tf32), fb = ToFloat(B, b, tf32);
  const std::vector<float> fc = be != 0.0f ? ToFloat(C, c, false) : std::vector<float>();
  const uint64_t m = d.rows, n = d.cols, k = a.cols;
  std::vector<float> column(m);
  for (uint64_t j = 0; j < n; ++j) {
    std::fill(column.begin(), column.end(), 0.0f);
    for (uint64_t p = 0; p < k; ++p) {
      const float bv = fb[p + j * k];
      const float* ac = &fa[p * m];
      for (uint64_t i = 0; i < m; ++i) column[i] += ac[i] * bv;
    }
    for (uint64_t i = 0; i < m; ++i) {
      float v = al * column[i];
      if (be != 0.0f) v += be * fc[i + j * m];
      if (op.epilogue == CUBLASLT_EPILOGUE_BIAS) {
        v += d.type == CUDA_R_16F ? __half2float(static_cast<const __half*>(op.bias)[i])
                                  : static_cast<const float*>(op.bias)[i];
      }
      const uint64_t at = i + j * static_cast<uint64_t>(d.ld);
      if (d.type == CUDA_R_16F) {
        static_cast<__half*>(D)[at] = __float2half_rn(v);
      } else {
        static_cast<float*>(D)[at] = v;
      }
    }
  }
  std::lock_guard<std::mutex> lock(state.mu);
  ++state.products;
  state.with_bias += op.epilogue == CUBLASLT_EPILOGUE_BIAS;
  return CUBLAS_STATUS_SUCCESS;
}

// -- for the tests ------------------------------------------------------------------

// What the stand-in refused since the last call ("" when nothing), then forgets it.
BRIDGE_EMU_API const char* bridge_cublaslt_emulator_take_errors(void) {
  static thread_local std::string taken;
  std::lock_guard<std::mutex> lock(state.mu);
  taken.swap(state.log);
  state.log.clear();
  return taken.c_str();
}

// Counters since the last reset: heuristic queries, products, products with the
// BIAS epilogue.
BRIDGE_EMU_API void bridge_cublaslt_emulator_stats(int64_t* out, int reset) {
  std::lock_guard<std::mutex> lock(state.mu);
  out[0] = state.heuristics;
  out[1] = state.products;
  out[2] = state.with_bias;
  if (reset) state.heuristics = state.products = state.with_bias = 0;
}

// 1: the heuristic offers no algorithm with the BIAS epilogue (the kernel's fallback road).
BRIDGE_EMU_API void bridge_cublaslt_emulator_refuse_bias_epilogue(int refuse) {
  std::lock_guard<std::mutex> lock(state.mu);
  state.refuse_bias_epilogue = refuse != 0;
}

}  // extern "C"
