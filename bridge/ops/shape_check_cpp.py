"""An op's shape rule (spec.shape_rule) rendered to one C++ header with no runtime
type in it, for every C++ host that checks shapes: the kernel cores, the TF shape
function, the onnxruntime and LiteRT kernels. GE's InferShape renders the same
statements (shape_rules.cpp_body) through ascend/ge_custom/shape_cpp.py,
so every error has the words of `spec.infer_shapes`.

`render(spec)` gives `shapes/<module>_shapes.h` with, in namespace bridge_shapes,
the value helpers, `<Op>ShapeAttrs` (the com.bridge node's attributes, defaults
written in) and

    template <typename Attrs>
    bool <module>_check_shapes(const int64_t* ranks, const int64_t* const* dims,
                               const Attrs& attrs, std::vector<Dims>* out, std::string* why);

Where the TF op's attributes are not the node's (the spec's `_infer` is a
shape_rules.TfRule: YoloConvBnLeaky's padding), the same header also gives
`<Op>TfShapeAttrs` and `<module>_check_tf_shapes`, the rule in the TF attributes.

`ranks[i]` < 0: input i of unknown rank; `dims[i][k]` < 0: an unknown dim; `Attrs`
any struct with the node's attributes as fields of these names (<Op>ShapeAttrs, or
a host's own); `out` may be null. False with the spec's message in *why.
"""
from __future__ import annotations

import re
from typing import Sequence

from bridge.untrusted import cpp_identifier, cpp_string

from . import shape_rules
from .spec import OpSpec

_CPP_TYPES = {"float": "float", "int": "int64_t", "string": "std::string",
              "list(int)": "std::vector<int64_t>", "list(float)": "std::vector<float>"}


def header_name(spec: OpSpec) -> str:
    return f"shapes/{spec.module}_shapes.h"


def function_name(spec: OpSpec) -> str:
    return f"{spec.module}_check_shapes"


def _default(a) -> str:
    if a.required:
        return "{}"
    if a.type == "string":
        return "{" + cpp_string(a.default) + "}"
    if a.is_list:
        item = (lambda v: f"{float(v)!r}f") if a.element_type == "float" else (lambda v: f"INT64_C({int(v)})")
        return "{" + ", ".join(item(v) for v in a.default) + "}"
    return "{" + (f"{float(a.default)!r}f" if a.type == "float" else f"INT64_C({int(a.default)})") + "}"


def tf_rule(spec: OpSpec):
    """The spec's rule over the TensorFlow op's attributes (a shape_rules.TfRule as its
    `_infer`), or None where the node's attributes are the TF op's own."""
    return spec._infer if isinstance(spec._infer, shape_rules.TfRule) else None


def tf_function_name(spec: OpSpec) -> str:
    return f"{spec.module}_check_tf_shapes"


def _entry(spec: OpSpec, rule, infer: str, function: str, attrs, struct: str, what: str) -> list:
    """The attributes' struct, Infer<...>(in, attrs, out, error) and the ranks/dims entry point."""
    for a in attrs:
        cpp_identifier(a.name, f"{spec.name}: attribute")
    n_in, n_out = len(spec.inputs), len(spec.outputs)
    fields = [f"  {_CPP_TYPES[a.type]} {a.name}{_default(a)};" for a in attrs]
    return [
        "namespace bridge_shapes {", "",
        f"// {what}, with their defaults.",
        f"struct {struct} {{", *fields, "};", "",
        "// Output shapes from input shapes; false with the spec's message in *error.",
        "template <typename Attrs>",
        f"bool {infer}(const std::vector<Dims> &in, const Attrs &attrs, std::vector<Dims> *out,",
        "                 std::string *error) {",
        "  (void)attrs;",
        f"  out->assign({n_out}, Dims());",
        *shape_rules.cpp_body(spec.name, rule), "}", "",
        "}  // namespace bridge_shapes", "",
        "// ranks[i] < 0: input i has an unknown rank; dims[i][k] < 0: an unknown dim; out may be null.",
        "template <typename Attrs>",
        f"bool {function}(const int64_t *ranks, const int64_t *const *dims, const Attrs &attrs,",
        "                        std::vector<bridge_shapes::Dims> *out, std::string *why) {",
        f"  std::vector<bridge_shapes::Dims> in({n_in});",
        f"  for (size_t i = 0; i < {n_in}; ++i) {{",
        "    if (ranks[i] < 0) continue;",
        "    in[i].known_rank = true;",
        "    for (int64_t k = 0; k < ranks[i]; ++k) {",
        "      const int64_t d = dims[i][k];",
        "      in[i].d.push_back(d < 0 ? bridge_shapes::kUnknown : d);",
        "    }", "  }",
        "  std::vector<bridge_shapes::Dims> mine;",
        f"  return bridge_shapes::{infer}(in, attrs, out ? out : &mine, why);", "}", ""]


def render(spec: OpSpec, rule: Sequence = None, tf: Sequence = None) -> str:
    """The header text; `rule` and `tf` (the TF attributes' statements) default to
    the spec's (a test plants others)."""
    rule = spec.shape_rule if rule is None else rule
    if not rule:
        raise ValueError(f"{spec.name}: its spec states no shape rule (shape_rule=), so there is no C++ check")
    cpp_identifier(spec.name, f"{spec.name}: op type")
    if tf is None and tf_rule(spec) is not None:
        tf = tf_rule(spec).statements
    op = spec.name
    guard = f"BRIDGE_SHAPES_{re.sub(r'[^A-Z0-9]', '_', spec.module.upper())}_H_"
    tf_part = [] if not tf else _entry(spec, tf, f"Infer{op}TfShapes", tf_function_name(spec), spec.attrs,
                                       f"{op}TfShapeAttrs", f"The TensorFlow op's attributes of {op}")
    return "\n".join([
        f"// The shape rule of {op} (its spec's shape_rule), in C++. Generated by bridge: do not edit.",
        f"#ifndef {guard}", f"#define {guard}", "",
        *(f"#include <{h}>" for h in ("cmath", "cstdint", "cstdio", "cstdlib", "cstring", "initializer_list",
                                      "limits", "string", "vector")),
        "", "namespace bridge_shapes {", "",
        "#ifndef BRIDGE_SHAPES_VALUE_HELPERS_", "#define BRIDGE_SHAPES_VALUE_HELPERS_",
        shape_rules.VALUE_HELPERS.rstrip(), "#endif  // BRIDGE_SHAPES_VALUE_HELPERS_", "",
        "}  // namespace bridge_shapes", "",
        *_entry(spec, rule, f"Infer{op}Shapes", function_name(spec), spec.onnx_attrs, f"{op}ShapeAttrs",
                f"The com.bridge node's attributes of {op}"),
        *tf_part,
        f"#endif  // {guard}", ""])
