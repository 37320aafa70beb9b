"""The C++ header of an op, rendered from its spec at build time, never kept by hand.

`render(spec)` gives `spec/<module>.h`: the struct `bridge::spec::<Op>` with the
op's name, tensor names, dtypes, documentation, its TensorFlow attributes (with
TF's REGISTER_OP declaration of each) and the com.bridge node's attributes
(`kAttrs`, `kOnnxAttrs`: name, type, default as text), an `Attrs` and an
`OnnxAttrs` struct holding each attribute with its default, and `Read(reader,
&attrs)` that fills one from a host's attribute reader. Where the spec states a
shape rule, the header includes its C++ (bridge/ops/shape_check_cpp.py) and gives
`CheckShapes(attrs, in, &out)`, the rule on abi shapes that a core's Shapes calls.
`render_cores(cores)` gives `spec/cores.h`: every kernel core (bridge/ops/<module>/kernel.h) and the
X-macro BRIDGE_CORES(X) the generic hosts expand once per core.

Every string comes from a spec, which may be a team's: each lands in the source
as bridge.untrusted.cpp_string writes it. Only the standard library: bridge/ops
imports nothing heavier than numpy.
"""
from __future__ import annotations

import math
import re
from typing import Iterable, Sequence, Tuple

from bridge.untrusted import cpp_string

from . import shape_check_cpp
from .spec import Attr, OpSpec

_CPP_TYPES = {"float": "float", "int": "int64_t", "string": "std::string",
              "list(int)": "std::vector<int64_t>", "list(float)": "std::vector<float>"}
_TF_DTYPES = {"float32": "float", "float16": "half", "bfloat16": "bfloat16", "float64": "double"}


def header_name(spec: OpSpec) -> str:
    return f"spec/{spec.module}.h"


def _float_literal(v: float) -> str:
    if math.isnan(v):
        return "std::numeric_limits<float>::quiet_NaN()"
    if math.isinf(v):
        return ("-" if v < 0 else "") + "std::numeric_limits<float>::infinity()"
    text = repr(float(v))
    return text + ("f" if any(c in text for c in ".e") else ".0f")


def _cpp_value(a: Attr, v) -> str:
    if a.type == "float":
        return _float_literal(v)
    if a.type == "int":
        return f"INT64_C({int(v)})"
    if a.type == "string":
        return f"std::string({cpp_string(v)})"
    cast = _float_literal if a.element_type == "float" else (lambda i: f"INT64_C({int(i)})")
    return "{" + ", ".join(cast(i) for i in v) + "}"


def _text(a: Attr, v) -> str:
    """A default as the onnxruntime host's table holds it: lists comma-separated."""
    if a.is_list:
        return ",".join(repr(float(i)) if a.element_type == "float" else str(int(i)) for i in v)
    if a.type == "float":
        return repr(float(v))
    return str(v) if a.type == "int" else v


def _tf_quoted(s: str) -> str:
    """A string in TensorFlow's attr syntax: single quotes, C escapes (absl::CUnescape reads it)."""
    out = []
    for ch in s:
        if ch in "'\\":
            out.append("\\" + ch)
        elif " " <= ch <= "~":
            out.append(ch)
        else:
            out.extend(f"\\{b:03o}" for b in ch.encode())
    return "'" + "".join(out) + "'"


def _tf_default(a: Attr) -> str:
    v = a.default
    if a.type == "string":
        return _tf_quoted(v)
    if a.type == "float":
        return repr(float(v))
    if a.type == "int":
        return str(int(v))
    return "[" + ", ".join(repr(float(i)) if a.element_type == "float" else str(int(i)) for i in v) + "]"


def tf_declaration(a: Attr) -> str:
    """The attribute as REGISTER_OP declares it, e.g. "epsilon: float = 1e-06"."""
    kind = "{" + ", ".join(_tf_quoted(s) for s in a.allowed) + "}" if a.allowed else a.type
    return f"{a.name}: {kind}" + ("" if a.required else f" = {_tf_default(a)}")


def _identifier(name: str, what: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name or ""):
        raise ValueError(f"{what} {name!r} is not a C++ identifier")
    return name


def _attr_block(spec: OpSpec, attrs: Sequence[Attr], struct: str, table: str, tf: bool) -> str:
    rows = [f"{{{cpp_string(a.name)}, {cpp_string(a.type)}, "
            f"{'nullptr' if a.required else cpp_string(_text(a, a.default))}, "
            f"{cpp_string(tf_declaration(a)) if tf else 'nullptr'}}}" for a in attrs]
    fields = [f"    {_CPP_TYPES[a.type]} {_identifier(a.name, 'attribute')}"
              + ("" if a.required else f" = {_cpp_value(a, a.default)}") + ";" for a in attrs]
    reads = [f"    r.Get({cpp_string(a.name)}, &a->{a.name}, {'false' if a.required else 'true'});" for a in attrs]
    return "\n".join([
        f"  static constexpr int kNum{table} = {len(attrs)};",
        f"  static constexpr abi::AttrInfo k{table}[] = {{" + (", ".join(rows) if rows else "{nullptr, nullptr, nullptr, nullptr}") + "};",
        f"  struct {struct} {{", *fields, "  };",
        "  // r.Get(name, &field, has_default): the value, the default left in place, or the reader's error",
        f"  template <typename Reader> static void Read(const Reader& r, {struct}* a) {{",
        *reads, "    (void)r;", "    (void)a;", "  }",
    ])


def _check_shapes(spec: OpSpec) -> list:
    """CheckShapes (and CheckTfShapes where the TF attributes have a rule of their own):
    the spec's rendered shape rule on abi shapes, what a core's Shapes calls."""
    if not spec.shape_rule:
        return []
    entries = [("CheckShapes", shape_check_cpp.function_name(spec), "the com.bridge node's attributes",
                "OnnxAttrs")]
    if shape_check_cpp.tf_rule(spec) is not None:
        entries.append(("CheckTfShapes", shape_check_cpp.tf_function_name(spec), "the TensorFlow op's attributes",
                        "Attrs"))
    lines = []
    for method, function, what, struct in entries:
        lines += [
            "  // The spec's shape rule (shapes/<module>_shapes.h, rendered from it) on abi shapes:",
            f"  // `attrs` is any struct with {what} as fields of their names",
            f"  // ({struct}, or a core's Params); `out` may be null.",
            "  template <typename A>",
            f"  static abi::Status {method}(const A& attrs, const std::vector<abi::Shape>& in,",
            "                                 std::vector<abi::Shape>* out = nullptr) {",
            "    return abi::RuleShapes<::bridge_shapes::Dims>(",
            "        kName, in, out, [&attrs](const int64_t* ranks, const int64_t* const* dims,",
            "                                 std::vector<::bridge_shapes::Dims>* got, std::string* why) {",
            f"          return ::{function}(ranks, dims, attrs, got, why);",
            "        });",
            "  }",
        ]
    return lines


def render(spec: OpSpec) -> str:
    """spec/<module>.h for one op (with its shape rule's header, where it states one)."""
    name = _identifier(spec.name, "op name")
    names = lambda args: ", ".join(cpp_string(a.name) for a in args)
    tf_types = ", ".join(_TF_DTYPES[d] for d in spec.dtypes)
    return "\n".join([
        f"// Rendered from the spec of {re.sub(r'[^A-Za-z0-9_]', '_', spec.name)} by bridge/ops/cpp_header.py: "
        "do not edit, change the spec.",
        "#pragma once",
        "#include <cstdint>", "#include <limits>", "#include <string>", "#include <vector>", "",
        '#include "kernels/abi.h"',
        *([f'#include "{shape_check_cpp.header_name(spec)}"'] if spec.shape_rule else []), "",
        "namespace bridge {", "namespace spec {", "",
        f"struct {name} {{",
        f"  static constexpr const char* kName = {cpp_string(spec.name)};",
        f"  static constexpr const char* kModule = {cpp_string(spec.module)};",
        f"  static constexpr const char* kDomain = {cpp_string(spec.domain)};",
        f"  static constexpr const char* kDoc = {cpp_string(spec.doc)};",
        f"  static constexpr int kNumInputs = {len(spec.inputs)}, kNumOutputs = {len(spec.outputs)};",
        f"  static constexpr const char* kInputs[] = {{{names(spec.inputs)}}};",
        f"  static constexpr const char* kOutputs[] = {{{names(spec.outputs)}}};",
        f"  static constexpr bool kFloat16 = {'true' if 'float16' in spec.dtypes else 'false'};",
        f"  static constexpr const char* kTfTypes = {cpp_string(tf_types)};  // T's allowed types in REGISTER_OP",
        _attr_block(spec, spec.attrs, "Attrs", "Attrs", tf=True),
        _attr_block(spec, spec.onnx_attrs, "OnnxAttrs", "OnnxAttrs", tf=False),
        *_check_shapes(spec),
        "};", "",
        "}  // namespace spec", "}  // namespace bridge", "",
    ])


def _include_path(path: str) -> str:
    # An #include's header name has no escapes: a path that needs one is refused.
    if not re.fullmatch(r"[A-Za-z0-9_./+\-]+", path):
        raise ValueError(f"kernel core path {path!r} has characters an #include cannot carry "
                         f"(letters, digits and _ . / + - only)")
    return path


def render_cores(cores: Iterable[Tuple[OpSpec, str]]) -> str:
    """spec/cores.h: each (spec, kernel.h include path) and BRIDGE_CORES(X)."""
    cores = sorted(cores, key=lambda c: c[0].name)
    return "\n".join([
        "// The kernel cores of this build, rendered by bridge/ops/cpp_header.py: do not edit.",
        "#pragma once",
        *[f'#include "{_include_path(path)}"' for _, path in cores], "",
        "#define BRIDGE_CORES(X) " + " ".join(f"X({_identifier(s.name, 'op name')})" for s, _ in cores), "",
    ])


def render_all(cores: Sequence[Tuple[OpSpec, str]], others: Sequence[OpSpec] = ()) -> dict:
    """{relative file name: text} of every header a build needs: each core's
    spec, the `others` (ops with adapters of their own read their names and
    attributes from it too), the shape rule of each that states one (its spec
    header includes it) and cores.h."""
    specs = [*others, *(s for s, _ in cores)]
    files = {header_name(spec): render(spec) for spec in specs}
    files.update({shape_check_cpp.header_name(spec): shape_check_cpp.render(spec) for spec in specs if spec.shape_rule})
    files["spec/cores.h"] = render_cores(cores)
    return files
