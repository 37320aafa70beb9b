// The one C++ op ABI: what a kernel core (bridge/ops/<op>/kernel.h) sees of the
// runtime that hosts it, framework-free. A core is a struct with
//
//   using Spec = spec::<Op>;                 the header rendered from the op's spec
//   struct Params;                           what compute needs, checked
//   static Status Read(const Spec::Attrs&, Params*);        TF and LiteRT attributes
//   static Status Read(const Spec::OnnxAttrs&, Params*);    the com.bridge node's
//   static Status Shapes(const Params&, const std::vector<Shape>& in, std::vector<Shape>* out);
//   static void Compute(const Params&, const std::vector<In>&, const std::vector<Out>&, const ParallelFor&);
//   static constexpr int kInplaceInput = k or -1;          output 0 may reuse input k's buffer
//
// A core whose later inputs are weights (constant in a deployed graph) that pay
// to prepare once -- fold, pack -- declares per-node state instead:
//
//   struct State;                            default-constructible; Compute may be called
//                                            on it from several threads at once
//   static constexpr int kWeightsFrom = k;   inputs k.. are the weights
//   static Status Init(const Params&, State*);   once per node, when the host builds it
//   static void Compute(const Params&, State&, bool same_weights, in, out, parallel_for);
//
// The host keeps one State per node (TF: per OpKernel, onnxruntime: per kernel
// instance, LiteRT: per node) and says whether the weights hold the values of the
// previous call on it: onnxruntime when they are constant initializers (always),
// TensorFlow when they are the previous call's buffers, held by the kernel so
// that a change always arrives as another buffer, LiteRT (and onnxruntime's
// non-constant weights) when their bytes equal a kept copy (SameBytes below).
// A core may then reuse what it prepared; it must not when told false.
//
// Shapes is the op's one check and shape function: at graph-build time (unknown
// dims -1, unknown rank), at run time, on every runtime, in the words of the
// Python spec. Compute runs on plain views; its parallel loops go through the
// host's ParallelFor, so each runtime's own pool does the work.
// Hosts: tf_ops/host.cc, onnx_plugins/native/host.cc, litert/native/host.cc.
#ifndef BRIDGE_KERNELS_ABI_H_
#define BRIDGE_KERNELS_ABI_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace bridge {
namespace abi {

// A bad argument: `arg` and why; an empty arg is success. Hosts turn it into
// "Op: argument 'arg': message" (bridge.ops.OpError's words).
// Fail: a failure that is no argument's (a bad setting), "Op: message".
struct Status {
  std::string arg, message;
  bool ok() const { return arg.empty() && message.empty(); }
};
inline Status Ok() { return {}; }
inline Status Bad(std::string arg, std::string message) { return {std::move(arg), std::move(message)}; }
inline Status Fail(std::string message) { return {std::string(), std::move(message)}; }
inline std::string Describe(const char* op, const Status& s) {
  if (s.arg.empty()) return std::string(op) + ": " + s.message;
  return std::string(op) + ": argument '" + s.arg + "': " + s.message;
}

// A shape as a shape function sees it: -1 for an unknown dim, known == false for
// an unknown rank.
struct Shape {
  bool known = true;
  std::vector<int64_t> d;
  Shape() = default;
  Shape(std::vector<int64_t> dims) : d(std::move(dims)) {}  // NOLINT: a known shape
  static Shape Unknown() {
    Shape s;
    s.known = false;
    return s;
  }
  int rank() const { return static_cast<int>(d.size()); }
  int64_t operator[](int i) const { return d[i]; }
  // bridge.ops.spec.dims: [1,?,7], <unknown rank>
  std::string str() const {
    if (!known) return "<unknown rank>";
    std::string s = "[";
    for (size_t i = 0; i < d.size(); ++i) s += (i ? "," : "") + (d[i] < 0 ? std::string("?") : std::to_string(d[i]));
    return s + "]";
  }
};

// A number as absl::StrCat (and so the TensorFlow kernels' errors) writes it.
inline std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}
inline std::string Num(int64_t v) { return std::to_string(v); }
template <typename V>
std::string List(const std::vector<V>& values, const char* sep = ", ") {
  std::string s = "[";
  for (size_t i = 0; i < values.size(); ++i) s += (i ? sep : "") + Num(values[i]);
  return s + "]";
}

// One attribute as the spec gives it (the rendered header's kAttrs / kOnnxAttrs):
// `def` is the default as text (lists comma-separated), nullptr when required;
// `tf` the REGISTER_OP declaration ("epsilon: float = 1e-06").
struct AttrInfo {
  const char* name;
  const char* type;  // float, int, string, list(int), list(float)
  const char* def;
  const char* tf;
};

// -- tensors -----------------------------------------------------------------
enum class DType { kFloat32, kFloat16 };

struct In {
  const void* data = nullptr;
  std::vector<int64_t> shape;
  DType type = DType::kFloat32;
  int64_t size() const {
    int64_t n = 1;
    for (int64_t v : shape) n *= v;
    return n;
  }
  template <typename T> const T* as() const { return static_cast<const T*>(data); }
};

struct Out {
  void* data = nullptr;
  std::vector<int64_t> shape;
  DType type = DType::kFloat32;
  int64_t size() const {
    int64_t n = 1;
    for (int64_t v : shape) n *= v;
    return n;
  }
  template <typename T> T* as() const { return static_cast<T*>(data); }
};

// fn(begin, end) over [0, count) in pieces, on the host's threads; cost_per_item
// is a rough cycle count the host uses to decide how finely to split.
using Range = std::function<void(int64_t, int64_t)>;
using ParallelFor = std::function<void(int64_t count, int64_t cost_per_item, const Range& fn)>;

// How a host with a plain task pool splits [0, count): `per` items a task, about
// `task_cost` cycles each (~64 KB of float rows at FusedLayerNorm's cost by default).
struct Split {
  int64_t per, tasks;
};
inline Split SplitWork(int64_t count, int64_t cost_per_item, int64_t task_cost = 6 * 16384) {
  const int64_t per = std::max<int64_t>(1, task_cost / std::max<int64_t>(cost_per_item, 1));
  return {per, count <= 0 ? 0 : (count + per - 1) / per};
}

// -- float16 storage (uint16_t bits) <-> float ---------------------------------
inline float HalfToFloat(uint16_t h) {
#if defined(__FLT16_MANT_DIG__)
  _Float16 v;
  std::memcpy(&v, &h, 2);
  return static_cast<float>(v);
#else
  const uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 31, man = h & 1023;
  uint32_t bits;
  if (exp == 0) {
    float v = static_cast<float>(man) * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  bits = (sign << 31) | (exp == 31 ? 0x7f800000u | (man << 13) : ((exp + 112) << 23) | (man << 13));
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
#endif
}

#if defined(__FLT16_MANT_DIG__)
inline uint16_t FloatToHalf(float f) {
  _Float16 v = static_cast<_Float16>(f);  // round to nearest even, as Eigen::half
  uint16_t h;
  std::memcpy(&h, &v, 2);
  return h;
}
#else
inline uint16_t FloatToHalf(float f) {  // round to nearest even by float arithmetic
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = (x >> 16) & 0x8000;
  const float a = f < 0 ? -f : f;
  if (f != f) return sign | 0x7e00;
  if (a >= 65520.f) return sign | 0x7c00;
  if (a < 6.103515625e-05f) return sign | static_cast<uint16_t>(__builtin_nearbyintf(a * 16777216.f));
  int e;
  const float m = __builtin_frexpf(a, &e);  // a = m * 2^e, m in [0.5, 1)
  uint32_t man = static_cast<uint32_t>(__builtin_nearbyintf((m * 2 - 1) * 1024));
  if (man == 1024) man = 0, ++e;
  return sign | static_cast<uint16_t>(((e + 14) << 10) | man);
}
#endif

inline void ToFloats(const float* src, float* dst, int64_t n) {
  if (src != dst && n) std::memcpy(dst, src, sizeof(float) * n);
}
inline void ToFloats(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
#endif
  for (; i < n; ++i) dst[i] = HalfToFloat(src[i]);
}
inline void FromFloats(const float* src, float* dst, int64_t n) {
  if (src != dst && n) std::memcpy(dst, src, sizeof(float) * n);
}
inline void FromFloats(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  for (; i < n; ++i) dst[i] = static_cast<uint16_t>(_cvtss_sh(src[i], _MM_FROUND_TO_NEAREST_INT));
#else
  for (; i < n; ++i) dst[i] = FloatToHalf(src[i]);
#endif
}

// -- memory ------------------------------------------------------------------
// For outputs far larger than the cache: non-temporal stores skip the read that
// an ordinary store of a cache line costs. StreamFence() before the work ends.
inline void StreamFloats(const float* src, float* dst, int64_t n) {
  int64_t i = 0;
#if defined(__AVX__)
  for (; i < n && (reinterpret_cast<uintptr_t>(dst + i) & 31); ++i) dst[i] = src[i];
  for (; i + 8 <= n; i += 8) _mm256_stream_ps(dst + i, _mm256_loadu_ps(src + i));
#endif
  for (; i < n; ++i) dst[i] = src[i];
}

inline void StreamFence() {
#if defined(__x86_64__)
  _mm_sfence();
#endif
}

// Asks for memory a loop reads next: a new row's first cache misses otherwise stall it.
inline void Prefetch(const void* p, int64_t bytes) {
#if defined(__x86_64__)
  const char* c = static_cast<const char*>(p);
  for (int64_t i = 0; i < bytes; i += 64) _mm_prefetch(c + i, _MM_HINT_T0);
#endif
}

}  // namespace abi
}  // namespace bridge

// -- a spec's rendered shape rule (shapes/<module>_shapes.h) on abi::Shapes -----
// What a core's Shapes calls (through spec::<Op>::CheckShapes): `check(ranks,
// dims, &rule_out, &why)` is the rendered <module>_check_shapes bound to the
// attributes; its "<Op>: argument '<arg>': <message>" comes back as a Status.
namespace bridge {
namespace abi {

template <typename RuleDims, typename Check>
Status RuleShapes(const char* op, const std::vector<Shape>& in, std::vector<Shape>* out, const Check& check) {
  std::vector<int64_t> ranks;
  std::vector<const int64_t*> dims;
  for (const Shape& s : in) {
    ranks.push_back(s.known ? s.rank() : -1);
    dims.push_back(s.d.data());
  }
  std::vector<RuleDims> got;
  std::string why;
  if (!check(ranks.data(), dims.data(), &got, &why)) {
    const std::string prefix = std::string(op) + ": argument '";
    const size_t end = why.compare(0, prefix.size(), prefix) == 0 ? why.find("': ", prefix.size()) : std::string::npos;
    if (end == std::string::npos) return Bad("inputs", why);
    return Bad(why.substr(prefix.size(), end - prefix.size()), why.substr(end + 3));
  }
  if (out) {
    out->clear();
    for (const RuleDims& d : got) {
      if (!d.known_rank) {
        out->push_back(Shape::Unknown());
        continue;
      }
      std::vector<int64_t> v;
      for (int64_t x : d.d) v.push_back(x < 0 ? -1 : x);  // the rule's kUnknown: -1
      out->emplace_back(std::move(v));
    }
  }
  return Ok();
}

// -- per-node state (the optional hook above) ------------------------------------
template <typename Core, typename = void>
struct HasState : std::false_type {};
template <typename Core>
struct HasState<Core, std::void_t<typename Core::State>> : std::true_type {};

// What a host keeps per node: the core's State where it has one, else nothing.
template <typename Core, bool = HasState<Core>::value>
struct NodeState {
  Status Init(const typename Core::Params&) { return Ok(); }
  void Compute(const typename Core::Params& p, bool, const std::vector<In>& in, const std::vector<Out>& out,
               const ParallelFor& pf) {
    Core::Compute(p, in, out, pf);
  }
};
template <typename Core>
struct NodeState<Core, true> {
  typename Core::State state;
  Status Init(const typename Core::Params& p) { return Core::Init(p, &state); }
  void Compute(const typename Core::Params& p, bool same, const std::vector<In>& in, const std::vector<Out>& out,
               const ParallelFor& pf) {
    Core::Compute(p, state, same, in, out, pf);
  }
};

template <typename Core>
constexpr int WeightsFrom() {
  if constexpr (HasState<Core>::value) {
    return Core::kWeightsFrom;
  } else {
    return -1;
  }
}

inline int64_t Bytes(const In& v) { return v.size() * (v.type == DType::kFloat16 ? 2 : 4); }

// Whether the weights' bytes equal those of the previous call; keeps a copy.
// For hosts that cannot tell otherwise (a LiteRT node's tensors). Weights at the
// previous call's addresses, in mappings without write permission, are not
// compared again: their bytes cannot have changed (LiteRT maps a model file's
// constants read-only, and XNNPack packs them once on the same premise), and a
// 19 MB filter was a millisecond of comparing per call.
class SameBytes {
 public:
  // `parallel`: the host's loop, where the bytes are many.
  bool Check(const std::vector<In>& in, int from, const ParallelFor& parallel = nullptr) {
    std::vector<int64_t> shapes;
    std::vector<std::pair<uintptr_t, uintptr_t>> spans;
    int64_t total = 0;
    for (size_t i = from; i < in.size(); ++i) {
      shapes.push_back(static_cast<int64_t>(in[i].shape.size()) * 2 + (in[i].type == DType::kFloat16));
      shapes.insert(shapes.end(), in[i].shape.begin(), in[i].shape.end());
      total += Bytes(in[i]);
      const auto at = reinterpret_cast<uintptr_t>(in[i].data);
      spans.emplace_back(at, at + static_cast<uintptr_t>(Bytes(in[i])));
    }
    std::lock_guard<std::mutex> lock(mu_);
    bool same = shapes == shapes_;
    if (same && read_only_ && spans == spans_) return true;  // kept_ still holds these bytes
    for (size_t i = from, at = 0; i < in.size() && same; at += Bytes(in[i]), ++i)
      same = !Bytes(in[i]) || Equal(kept_.data() + at, static_cast<const char*>(in[i].data), Bytes(in[i]), parallel);
    if (!same) {
      shapes_ = std::move(shapes);
      kept_.resize(total);
      for (size_t i = from, at = 0; i < in.size(); at += Bytes(in[i]), ++i)
        if (Bytes(in[i])) std::memcpy(kept_.data() + at, in[i].data, Bytes(in[i]));
    }
    if (spans != spans_) {
      read_only_ = AllReadOnly(spans);
      spans_ = std::move(spans);
    }
    return same;
  }

 private:
  static bool Equal(const char* a, const char* b, int64_t n, const ParallelFor& parallel) {
    constexpr int64_t kPiece = int64_t{1} << 20;
    if (!parallel || n < 4 * kPiece) return std::memcmp(a, b, n) == 0;
    std::atomic<bool> differ{false};
    parallel((n + kPiece - 1) / kPiece, kPiece / 8, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1 && !differ.load(std::memory_order_relaxed); ++p) {
        const int64_t at = p * kPiece;
        if (std::memcmp(a + at, b + at, std::min(kPiece, n - at))) differ = true;
      }
    });
    return !differ;
  }

  // Whether every non-empty span lies inside one mapping without write permission.
  static bool AllReadOnly(const std::vector<std::pair<uintptr_t, uintptr_t>>& spans) {
    std::ifstream maps("/proc/self/maps");
    std::vector<std::pair<uintptr_t, uintptr_t>> read_only;
    std::string line;
    while (std::getline(maps, line)) {
      unsigned long lo = 0, hi = 0;
      char perms[5] = {0};
      if (std::sscanf(line.c_str(), "%lx-%lx %4s", &lo, &hi, perms) == 3 && perms[1] != 'w')
        read_only.emplace_back(lo, hi);
    }
    for (const auto& s : spans) {
      if (s.first == s.second) continue;  // an empty tensor
      bool inside = false;
      for (const auto& m : read_only) inside = inside || (m.first <= s.first && s.second <= m.second);
      if (!inside) return false;
    }
    return true;
  }

  std::mutex mu_;
  std::vector<std::pair<uintptr_t, uintptr_t>> spans_;  // the previous call's weights, [begin, end)
  bool read_only_ = false;                              // all of them in read-only mappings
  std::vector<int64_t> shapes_;
  std::vector<char> kept_;
};

}  // namespace abi
}  // namespace bridge

#endif  // BRIDGE_KERNELS_ABI_H_
