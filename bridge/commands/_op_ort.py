"""The onnxruntime files of `bridge op new`: `ort/<module>_ort.cc`, a custom-op
library against onnxruntime's C API, and its `ort/CMakeLists.txt`.

What onnxruntime must know of the op (its domain and name, its tensors, the
element types it serves, its attributes and their defaults) is generated from
the spec, as register_op_cc does for TensorFlow; the math is the scaffold's
placeholder, the same as the spec's reference and the TensorFlow kernel's.
"""
from __future__ import annotations

import math
import re

# numpy dtype -> (ONNX element type, the C++ type of one element, the macro that
# says the compiler has it). float16 travels as its bits and is computed in float.
_ELEMENT = {"float32": ("FLOAT", "float", None),
            "float16": ("FLOAT16", "uint16_t", "HAVE_FLOAT16")}
# spec attribute type -> the C++ type of its value in the kernel (the scaffold's
# alpha is a float; an op with others has its reads written by hand)
_ATTR = {"float": "float"}


class TemplateError(ValueError):
    """A spec the onnxruntime template cannot express: its kernel is written by hand."""


def template_attrs(spec, attrs, kinds, template: str = "the template"):
    """`attrs` (the spec's attributes a template reads), each of a type in
    `kinds`, named like a C++ identifier and with a finite default; else
    TemplateError naming the op and the attribute."""
    for a in attrs:
        if a.type not in kinds or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", a.name) or \
                not (a.required or math.isfinite(a.default)):
            raise TemplateError(f"{spec.name}: attribute {a.name!r} of type {a.type}: {template} reads "
                                f"{', '.join(kinds)} attributes with finite defaults only")
    return attrs


def _attr_fields(spec) -> str:
    lines = []
    for a in template_attrs(spec, spec.onnx_attrs, _ATTR):
        default = "" if a.required else f" = {float(a.default)!r}f"
        lines.append(f"  {_ATTR[a.type]} {a.name}{default};")
    return "\n".join(lines) or "  // (none)"


def _attr_reads(spec) -> str:
    return "\n".join(f'  ReadAttr(info, "{a.name}", &attrs.{a.name}, /*required=*/{str(a.required).lower()});'
                     for a in spec.onnx_attrs)


def _ops(spec) -> str:
    lines = []
    for dtype in spec.dtypes:
        if dtype not in _ELEMENT:
            raise TemplateError(f"{spec.name}: dtype {dtype}: the template serves {', '.join(_ELEMENT)} only")
        onnx_type, cc_type, macro = _ELEMENT[dtype]
        line = f"    ops.push_back(MakeOp(ONNX_TENSOR_ELEMENT_DATA_TYPE_{onnx_type}, Compute<{cc_type}>));"
        lines += [f"#ifdef {macro}", line, "#endif"] if macro else [line]
    return "\n".join(lines)


def _names(args) -> str:
    return ", ".join(f'"{a.name}"' for a in args)


def kernel_cc(spec) -> str:
    """`ort/<module>_ort.cc` for `spec`."""
    return KERNEL_TEMPLATE.format(
        name=spec.name, module=spec.module, domain=spec.domain, inputs=_names(spec.inputs),
        outputs=_names(spec.outputs), attr_fields=_attr_fields(spec), attr_reads=_attr_reads(spec), ops=_ops(spec))


def cmake(spec) -> str:
    """`ort/CMakeLists.txt` for `spec`."""
    return CMAKE_TEMPLATE.format(name=spec.name, library=f"{spec.module}_ort")


KERNEL_TEMPLATE = '''// {name}'s onnxruntime CPU kernel, for the node {domain}::{name}.
//
// Only onnxruntime's C API, reached through the OrtApi table RegisterCustomOps is
// handed: the library links no libonnxruntime. bridge builds this folder and
// registers the library in the sessions that run the op's kernel:
//   bridge parity MODEL --op-spec ../{module}.py --op-library .. --ort-library .
// The lines marked "from {module}.py" were generated from the spec by `bridge op
// new`: when the spec changes, change them with it.
#include <onnxruntime_c_api.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace {{

// from {module}.py: the node this library serves.
const char* const kDomain = "{domain}";
const char* const kOp = "{name}";
const char* const kInputs[] = {{{inputs}}};
const char* const kOutputs[] = {{{outputs}}};

// from {module}.py: the node's attributes, the spec's default where it has none.
struct Attrs {{
{attr_fields}
}};

const OrtApi* api = nullptr;

// Bad input or attributes: the message names the op and the argument, as the spec's errors do.
struct BadInput : std::invalid_argument {{
  BadInput(const std::string& arg, const std::string& message)
      : std::invalid_argument(std::string(kOp) + ": argument '" + arg + "': " + message) {{}}
}};

// onnxruntime's failures become exceptions, turned back into an OrtStatus at the boundary.
void Ok(OrtStatus* status) {{
  if (status == nullptr) return;
  const std::string message = api->GetErrorMessage(status);
  api->ReleaseStatus(status);
  throw std::runtime_error(message);
}}

bool Failed(OrtStatus* status) {{
  const bool failed = status != nullptr;
  if (failed) api->ReleaseStatus(status);
  return failed;
}}

// The C API cannot ask whether a node has an attribute: an int one (alpha=2 for 2.0)
// is told from a missing one by reading it as an int, so it is not taken for the default.
void ReadAttr(const OrtKernelInfo* info, const char* name, float* value, bool required) {{
  int64_t other = 0;
  if (!Failed(api->KernelInfoGetAttribute_float(info, name, value))) return;
  if (!Failed(api->KernelInfoGetAttribute_int64(info, name, &other))) {{
    throw BadInput(name, "must be a float, got an int");
  }}
  if (required) throw BadInput(name, "required attribute is missing");
}}

// from {module}.py: the attributes the kernel reads.
Attrs ReadAttrs(const OrtKernelInfo* info) {{
  Attrs attrs;
{attr_reads}
  return attrs;
}}

std::vector<int64_t> ShapeOf(const OrtValue* value) {{
  OrtTensorTypeAndShapeInfo* info = nullptr;
  Ok(api->GetTensorTypeAndShape(value, &info));
  size_t rank = 0;
  OrtStatus* status = api->GetDimensionsCount(info, &rank);
  std::vector<int64_t> shape(rank);
  if (status == nullptr && rank > 0) status = api->GetDimensions(info, shape.data(), rank);
  api->ReleaseTensorTypeAndShapeInfo(info);
  Ok(status);
  return shape;
}}

// As the spec's errors spell a shape: [3,5].
std::string Dims(const std::vector<int64_t>& shape) {{
  std::string text;
  for (int64_t d : shape) text += (text.empty() ? "" : ",") + std::to_string(d);
  return "[" + text + "]";
}}

template <typename T>
T* DataOf(const OrtValue* value) {{
  void* data = nullptr;
  Ok(api->GetTensorMutableData(const_cast<OrtValue*>(value), &data));
  return static_cast<T*>(data);
}}

// Elements are computed in float, as the TensorFlow kernel computes them.
inline float Load(float v) {{ return v; }}
inline void Store(float v, float* out) {{ *out = v; }}
#if defined(__FLT16_MANT_DIG__)
#define HAVE_FLOAT16 1
inline float Load(uint16_t bits) {{
  _Float16 h;
  std::memcpy(&h, &bits, sizeof h);
  return static_cast<float>(h);
}}
inline void Store(float v, uint16_t* out) {{
  const _Float16 h = static_cast<_Float16>(v);
  std::memcpy(out, &h, sizeof h);
}}
#endif

template <typename T>
void Compute(const Attrs& attrs, OrtKernelContext* context) {{
  const OrtValue* x = nullptr;
  const OrtValue* bias = nullptr;
  Ok(api->KernelContext_GetInput(context, 0, &x));
  Ok(api->KernelContext_GetInput(context, 1, &bias));
  const std::vector<int64_t> xs = ShapeOf(x), bs = ShapeOf(bias);
  if (xs.empty()) throw BadInput(kInputs[0], "must have rank >= 1, got a scalar (shape [])");
  if (bs.size() != 1 || bs[0] != xs.back()) {{
    throw BadInput(kInputs[1], "must have shape [C] (the last dim of " + std::string(kInputs[0]) + " " + Dims(xs) +
                                   "), got " + Dims(bs));
  }}
  OrtValue* y = nullptr;
  Ok(api->KernelContext_GetOutput(context, 0, xs.data(), xs.size(), &y));
  int64_t n = 1;
  for (int64_t d : xs) n *= d;
  if (n == 0) return;
  const T* xp = DataOf<const T>(x);
  const T* bp = DataOf<const T>(bias);
  T* yp = DataOf<T>(y);
  const int64_t c = bs[0];
  for (int64_t i = 0; i < n; ++i) {{  // replace with your op's math
    const float z = Load(xp[i]) + Load(bp[i % c]);
    Store((z > 0.f ? z : 0.f) * attrs.alpha, yp + i);
  }}
}}

// One OrtCustomOp per element type (onnxruntime picks the one of the node's type);
// a kernel is the node's attributes and the op's compute.
struct Op : OrtCustomOp {{
  ONNXTensorElementDataType type;
  void (*compute)(const Attrs&, OrtKernelContext*);
}};

struct Kernel {{
  Attrs attrs;
  void (*compute)(const Attrs&, OrtKernelContext*);
}};

OrtStatus* StatusOf(const std::exception& e) {{
  const bool bad = dynamic_cast<const BadInput*>(&e) != nullptr;
  return api->CreateStatus(bad ? ORT_INVALID_ARGUMENT : ORT_FAIL, e.what());
}}

Op* MakeOp(ONNXTensorElementDataType type, void (*compute)(const Attrs&, OrtKernelContext*)) {{
  Op* op = new Op();
  std::memset(static_cast<OrtCustomOp*>(op), 0, sizeof(OrtCustomOp));
  op->type = type;
  op->compute = compute;
  op->version = ORT_API_VERSION;
  op->GetName = [](const OrtCustomOp*) {{ return kOp; }};
  op->GetExecutionProviderType = [](const OrtCustomOp*) -> const char* {{ return nullptr; }};
  op->GetInputType = [](const OrtCustomOp* o, size_t) {{ return static_cast<const Op*>(o)->type; }};
  op->GetInputTypeCount = [](const OrtCustomOp*) {{ return sizeof kInputs / sizeof *kInputs; }};
  op->GetOutputType = [](const OrtCustomOp* o, size_t) {{ return static_cast<const Op*>(o)->type; }};
  op->GetOutputTypeCount = [](const OrtCustomOp*) {{ return sizeof kOutputs / sizeof *kOutputs; }};
  op->GetInputCharacteristic = [](const OrtCustomOp*, size_t) {{ return INPUT_OUTPUT_REQUIRED; }};
  op->GetOutputCharacteristic = [](const OrtCustomOp*, size_t) {{ return INPUT_OUTPUT_REQUIRED; }};
  op->GetInputMemoryType = [](const OrtCustomOp*, size_t) {{ return OrtMemTypeDefault; }};
  op->GetVariadicInputMinArity = [](const OrtCustomOp*) {{ return 1; }};
  op->GetVariadicInputHomogeneity = [](const OrtCustomOp*) {{ return 1; }};
  op->GetVariadicOutputMinArity = [](const OrtCustomOp*) {{ return 1; }};
  op->GetVariadicOutputHomogeneity = [](const OrtCustomOp*) {{ return 1; }};
  op->CreateKernelV2 = [](const OrtCustomOp* o, const OrtApi*, const OrtKernelInfo* info,
                          void** kernel) -> OrtStatus* {{
    try {{
      *kernel = new Kernel{{ReadAttrs(info), static_cast<const Op*>(o)->compute}};
      return nullptr;
    }} catch (const std::exception& e) {{
      return StatusOf(e);
    }}
  }};
  op->KernelComputeV2 = [](void* kernel, OrtKernelContext* context) -> OrtStatus* {{
    try {{
      const Kernel* k = static_cast<const Kernel*>(kernel);
      k->compute(k->attrs, context);
      return nullptr;
    }} catch (const std::exception& e) {{
      return StatusOf(e);
    }}
  }};
  op->KernelDestroy = [](void* kernel) {{ delete static_cast<Kernel*>(kernel); }};
  op->GetStartVersion = [](const OrtCustomOp*) {{ return 1; }};
  op->GetEndVersion = [](const OrtCustomOp*) {{ return 0x7fffffff; }};
  return op;
}}

}}  // namespace

// What onnxruntime calls when a session registers the library.
extern "C" __attribute__((visibility("default"))) OrtStatus* RegisterCustomOps(OrtSessionOptions* options,
                                                                              const OrtApiBase* base) {{
  api = base->GetApi(ORT_API_VERSION);
  if (api == nullptr) return nullptr;  // an onnxruntime older than these headers: no API to answer through
  // Made once: every session keeps pointers to the ops.
  static const std::vector<Op*> ops = [] {{
    std::vector<Op*> ops;  // from {module}.py: one per dtype
{ops}
    return ops;
  }}();
  OrtCustomOpDomain* domain = nullptr;
  if (OrtStatus* status = api->CreateCustomOpDomain(kDomain, &domain)) return status;
  for (Op* op : ops) {{
    if (OrtStatus* status = api->CustomOpDomain_Add(domain, op)) return status;
  }}
  return api->AddCustomOpDomain(options, domain);
}}
'''

CMAKE_TEMPLATE = '''# {name}'s onnxruntime kernel library, against onnxruntime's C headers (its
# wheel has none: bridge fetches them into its cache). bridge builds it with its
# own CPU flags, once per onnxruntime API version, compiler and CPU:
#   bridge build .   (or --ort-library . on ops, export, parity)
# By hand: cmake -S . -B build -DORT_INCLUDE_DIR=<folder with onnxruntime_c_api.h>
cmake_minimum_required(VERSION 3.18)
project({library} LANGUAGES CXX)

set(ORT_INCLUDE_DIR "" CACHE PATH "folder with onnxruntime_c_api.h")
if(NOT EXISTS "${{ORT_INCLUDE_DIR}}/onnxruntime_c_api.h")
  message(FATAL_ERROR "ORT_INCLUDE_DIR=${{ORT_INCLUDE_DIR}} has no onnxruntime_c_api.h")
endif()

add_library({library} SHARED {library}.cc)
set_target_properties({library} PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON CXX_VISIBILITY_PRESET hidden)
target_include_directories({library} SYSTEM PRIVATE ${{ORT_INCLUDE_DIR}})
target_compile_options({library} PRIVATE -O3 -Wall)
set(BRIDGE_CPU_CMAKE "" CACHE FILEPATH "bridge's CPU flags (native.cmake), given by bridge")
if(BRIDGE_CPU_CMAKE)
  include(${{BRIDGE_CPU_CMAKE}})
  bridge_cpu_target({library})
endif()
# Everything of onnxruntime comes through the OrtApi table: no symbol may stay undefined.
target_link_options({library} PRIVATE -Wl,--no-undefined)
'''
