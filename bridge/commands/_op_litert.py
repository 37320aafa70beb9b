"""The LiteRT file of `bridge op new`: `litert/<module>.cc`, the op's kernel
against bridge's Node API (litert/native/common.h), which
`--litert-library DIR/litert` compiles into a build of bridge's LiteRT kernels.

What LiteRT must know of the op (the TFLite custom code, its tensor counts, the
attributes a node's custom options carry and their defaults) is generated from
the spec, as _op_ort does for onnxruntime; the math is the scaffold's
placeholder. The custom options are what the TFLite converter writes for a
TensorFlow op: its TensorFlow attributes (spec.attrs, not spec.onnx_attrs) and
T, the TFLite TensorType of its float type.
"""
from __future__ import annotations

from bridge.commands._op_ort import TemplateError, template_attrs

# spec attribute type -> (the C++ type of its value, the Attrs reader); the
# scaffold's alpha is a float, an op with others has its reads written by hand
_ATTR = {"float": ("float", "f")}


def _attrs(spec):
    return template_attrs(spec, spec.attrs, _ATTR, "the LiteRT template")


def _attr_fields(spec) -> str:
    lines = [f"  {_ATTR[a.type][0]} {a.name}" + ("" if a.required else f" = {float(a.default)!r}f") + ";"
             for a in _attrs(spec)]
    return "\n".join(lines) or "  // (none)"


def _attr_reads(spec) -> str:
    # A default is the field's initial value, handed to the reader as its fallback.
    return "\n".join(f'    {a.name} = a.{_ATTR[a.type][1]}("{a.name}"{"" if a.required else f", &{a.name}"});'
                     for a in _attrs(spec))


def kernel_cc(spec) -> str:
    """`litert/<module>.cc` for `spec`."""
    if "float32" not in spec.dtypes:
        raise TemplateError(f"{spec.name}: bridge's LiteRT kernels run float32 only, and the spec has "
                            f"{', '.join(spec.dtypes)}")
    return KERNEL_TEMPLATE.format(
        name=spec.name, module=spec.module, inputs=", ".join(f'"{a.name}"' for a in spec.inputs),
        num_outputs=len(spec.outputs), attr_fields=_attr_fields(spec), attr_reads=_attr_reads(spec),
        others=_others(spec))


def _others(spec) -> str:
    others = [d for d in spec.dtypes if d != "float32"]
    return f"\n// The spec's {', '.join(others)} exports with --mode lowered (TFLite builtins)." if others else ""


KERNEL_TEMPLATE = '''// {name}'s LiteRT kernel, for the TFLite CUSTOM node "{name}" that
// `bridge export --to tflite --mode custom` keeps. float32 only: bridge's LiteRT
// kernels run float32 tensors (T = TensorType 0).{others}
//
// Written against the Node API of litert/native/common.h, like bridge's own
// LiteRT ops: bridge compiles this folder's files into a build of its LiteRT kernels
// of their own, which does the LiteRT plumbing (attributes, shapes, buffers, errors):
//   bridge export MODEL --to tflite --mode custom --op-spec ../{module}.py
//     --op-library .. --litert-library .
// The lines marked "from {module}.py" were generated from the spec by `bridge op
// new`: when the spec changes, change them with it.
#include "common.h"

namespace {{

using bridge::dims;
using bridge::OpFailure;
using namespace bridge::litert;

// from {module}.py: the node this file serves and its tensors.
const char* const kOp = "{name}";
const char* const kInputs[] = {{{inputs}}};
const size_t kNumOutputs = {num_outputs};

struct {name}Kernel : Node {{
  // from {module}.py: the node's attributes, as the TFLite converter writes them
  // into its custom options (the TensorFlow names); the spec's default where a
  // node has none.
{attr_fields}

  explicit {name}Kernel(const Attrs& a) {{
{attr_reads}
    a.require_float32();
  }}

  std::vector<std::vector<int64_t>> output_shapes(const std::vector<std::vector<int64_t>>& in) override {{
    const auto& x = in[0];
    const auto& bias = in[1];
    if (x.empty()) throw OpFailure(kOp, kInputs[0], "must have rank >= 1, got a scalar (shape [])");
    if (bias.size() != 1 || bias[0] != x.back())
      throw OpFailure(kOp, kInputs[1], "must have shape [C] (the last dim of " + std::string(kInputs[0]) + " " +
                                           dims(x) + "), got " + dims(bias));
    return {{x}};  // y has x's shape: write your op's shape function
  }}

  void run(const std::vector<View>& in, const std::vector<View>& out) override {{
    const int64_t c = in[0].shape.empty() ? 0 : in[0].shape.back();
    const int64_t n = in[0].size();
    if (c == 0 || n == 0) return;
    const float *x = in[0].as<float>(), *b = in[1].as<float>();
    float* y = out[0].mut<float>();
    for (int64_t i = 0; i < n; ++i) {{  // replace with your op's math
      const float z = x[i] + b[i % c];
      y[i] = (z > 0.f ? z : 0.f) * alpha;
    }}
  }}
}};

std::unique_ptr<Node> create(const Attrs& a) {{ return std::make_unique<{name}Kernel>(a); }}

// Version 1: the version the TFLite converter gives a custom op.
const OpDef kDef{{kOp, 1, sizeof kInputs / sizeof *kInputs, kNumOutputs, create, nullptr}};
const int kRegistered = register_op(&kDef);

}}  // namespace
'''
