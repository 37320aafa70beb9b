"""The GE ONNX parser plugin of one op, as C++ source: attribute parsing from the
ONNX NodeProto (names, types and defaults from the spec), the ParseOpToGraphFn
built from the op's decomposition (operator names carry the step ids the ONNX
expansion uses), and the registrations of both plugin routes:

- default: `PartitionedCall` + ParseOpToGraphFn onto GE built-in operators (no kernel);
- `-DBRIDGE_GE_CUSTOM_OP`: the GE custom operator `<Op>` (REG_OP in op_proto/),
  attributes copied, for users who bring an Ascend C kernel.

Everything here comes from bridge's own specs, never from a model: a node's name
reaches the plugin only at ATC time, as a std::string it prints with "%s".
"""
from __future__ import annotations

from typing import Dict, List, Sequence

from bridge.ascend.decomposition import CPP_TYPE, Decomposition, Expr, Step, Value, cpp_var
from bridge.ascend.ge_names import ge_op_type
from bridge.ops import OpSpec
from bridge.untrusted import cpp_string

_KIND = {"float": "float", "int": "int", "list(int)": "ints", "list(float)": "floats"}
_PROTO_TYPE = {"float": "FLOAT", "int": "INT", "ints": "INTS", "floats": "FLOATS"}
_GE_DTYPE = {"float32": "ge::DT_FLOAT", "int64": "ge::DT_INT64"}
_ELEM = {"float32": "float", "int64": "int64_t"}

# abstract kind -> (GE built-in operator type, its input port names)
GE_OPS = {
    "Const": ("Const", ()),
    "Add": ("Add", ("x1", "x2")), "Sub": ("Sub", ("x1", "x2")),
    "Mul": ("Mul", ("x1", "x2")), "Div": ("Div", ("x1", "x2")),
    "Sqrt": ("Sqrt", ("x",)), "Sigmoid": ("Sigmoid", ("x",)), "Exp": ("Exp", ("x",)),
    "Erf": ("Erf", ("x",)), "Tanh": ("Tanh", ("x",)), "Relu": ("Relu", ("x",)), "Neg": ("Neg", ("x",)),
    "Abs": ("Abs", ("x",)), "Pow": ("Pow", ("x1", "x2")),
    "LeakyRelu": ("LeakyRelu", ("x",)),
    "Transpose": ("Transpose", ("x",)),
    "Conv": ("Conv2D", ("x", "filter", "bias")),
    "LayerNorm": ("LayerNorm", ("x", "gamma", "beta")),
    "ReduceMean": ("ReduceMean", ("x",)),
    "Shape": ("Shape", ("x",)),
    "Slice": ("StridedSliceV2", ("x", "begin", "end", "axes", "strides")),
    "Gather": ("GatherV2", ("x", "indices")),
    "Range": ("Range", ("start", "limit", "delta")),
    "Cast": ("Cast", ("x",)),
    "Concat": ("ConcatV2", ()),
    "Reshape": ("Reshape", ("x", "shape")),
    "Unsqueeze": ("Unsqueeze", ("x",)),
    "Split": ("SplitV", ("x",)),
}


def origin_literal_list(origins: Sequence[str]) -> str:
    return "std::vector<ge::AscendString>{" + ", ".join(f"ge::AscendString({cpp_string(o)})" for o in origins) + "}"


def _cpp_literal(attr_type: str, value) -> str:
    if attr_type == "float":
        return f"{float(value)!r}f"
    if attr_type == "int":
        return f"static_cast<int64_t>({int(value)})"
    elem = "float" if attr_type == "list(float)" else "int64_t"
    cast = (lambda v: f"{float(v)!r}f") if elem == "float" else (lambda v: str(int(v)))
    return f"std::vector<{elem}>{{" + ", ".join(cast(v) for v in value) + "}"


def _declare_attrs(spec: OpSpec, with_defaults: bool) -> List[str]:
    lines = []
    for a in spec.onnx_attrs:
        kind = _KIND[a.type]
        init = f" = {_cpp_literal(a.type, a.default)}" if with_defaults and not a.required else "{}"
        lines.append(f"  {CPP_TYPE[kind]} {cpp_var(a.name)}{init};")
    return lines


def parse_params(spec: OpSpec, origins: Sequence[str]) -> str:
    """ParseParamsFn: the NodeProto's attributes, type-checked, onto the GE operator."""
    fn = f"ParseParams{spec.name}"
    body = [f"static domi::Status {fn}(const google::protobuf::Message *op_src, ge::Operator &op_dest) {{",
            "  const auto *node = dynamic_cast<const ge::onnx::NodeProto *>(op_src);",
            f'  if (node == nullptr) return bridge::Fail("{spec.name}", "?", "op_src is not an ONNX NodeProto");',
            "  const std::string &node_name = node->name();"]
    body += _declare_attrs(spec, with_defaults=True)
    for a in spec.onnx_attrs:
        if a.required:
            body.append(f"  bool seen_{a.name} = false;")
    body.append("  for (const auto &attr : node->attribute()) {")
    first = True
    for a in spec.onnx_attrs:
        kind = _KIND[a.type]
        cond = "if" if first else "} else if"
        first = False
        body.append(f'    {cond} (attr.name() == "{a.name}") {{')
        body.append(f"      if (attr.type() != ge::onnx::AttributeProto::{_PROTO_TYPE[kind]}) {{")
        body.append(f'        return bridge::Fail("{spec.name}", node_name, "attribute \'{a.name}\' must be {a.type}");')
        body.append("      }")
        var = cpp_var(a.name)
        if kind == "float":
            body.append(f"      {var} = attr.f();")
        elif kind == "int":
            body.append(f"      {var} = attr.i();")
        elif kind == "ints":
            body.append(f"      {var}.assign(attr.ints().begin(), attr.ints().end());")
        else:
            body.append(f"      {var}.assign(attr.floats().begin(), attr.floats().end());")
        if a.required:
            body.append(f"      seen_{a.name} = true;")
    unknown = f'return bridge::Fail("{spec.name}", node_name, "unknown attribute \'" + attr.name() + "\'");'
    if spec.onnx_attrs:
        body += ["    } else {", f"      {unknown}", "    }", "  }"]
    else:  # an op without attributes (a team's FusedBiasGelu) refuses any
        body += [f"    {unknown}", "  }", "  (void)op_dest;"]
    for a in spec.onnx_attrs:
        if a.required:
            body.append(f'  if (!seen_{a.name}) return bridge::Fail("{spec.name}", node_name, '
                        f'"required attribute \'{a.name}\' is missing");')
    for a in spec.onnx_attrs:
        if a.is_list and not a.required and len(a.default):  # fixed-length lists: strides, pads, ...
            body.append(f"  if ({cpp_var(a.name)}.size() != {len(a.default)}) return bridge::Fail(\"{spec.name}\", node_name, "
                        f"\"attribute '{a.name}' needs {len(a.default)} values, got \" + std::to_string({cpp_var(a.name)}.size()));")
    for a in spec.onnx_attrs:
        body.append(f'  op_dest.SetAttr("{a.name}", {cpp_var(a.name)});')
    body += ["#ifndef BRIDGE_GE_CUSTOM_OP",
             "  // PartitionedCall: ParseOpToGraphFn expands it; it needs the node's name and arity.",
             '  op_dest.SetAttr("name", ge::AscendString(node_name.c_str()));',
             f'  op_dest.SetAttr("original_type", "{origins[0]}");',
             f'  op_dest.DynamicInputRegister("args", {len(spec.inputs)});',
             f'  op_dest.DynamicOutputRegister("output", {len(spec.outputs)});',
             "#endif",
             "  return domi::SUCCESS;",
             "}"]
    return "\n".join(body)


def _value(v: Value, ops: Dict[str, str]) -> str:
    return ops[v.step]


def _expr_vec(expr: Expr, dtype: str) -> str:
    elem = _ELEM[dtype]
    if expr.value_kind in ("ints", "floats"):
        return f"bridge::Vec<{elem}>({expr.value_cpp()})"
    return f"bridge::Scalar<{elem}>({expr.value_cpp()})"


def _lit_vec(values, dtype: str) -> str:
    elem = _ELEM[dtype]
    return f"std::vector<{elem}>{{" + ", ".join(str(int(v)) for v in values) + "}"


def _step_cpp(step: Step, ops: Dict[str, str]) -> List[str]:
    ge_type, ports = GE_OPS[step.kind]
    var = step.id
    ops[step.id] = var
    sid = f'"{step.id}_{step.kind}"'
    p = step.params
    out: List[str] = []
    if step.kind == "Const":
        shape = "std::vector<int64_t>{" + ", ".join(str(int(d)) for d in p["shape"]) + "}"
        out.append(f"  ge::Operator {var} = b.Const({sid}, {_expr_vec(p['value'], p['dtype'])}, {shape}, "
                   f"{_GE_DTYPE[p['dtype']]});")
        return out
    out.append(f'  ge::Operator {var} = b.Make({sid}, "{ge_type}");')
    for port, v in zip(ports, step.inputs):
        out.append(f'  {var}.SetInput("{port}", {_value(v, ops)}, {v.index}U);')

    def aux_const(suffix, values_cpp, shape_cpp, dtype):
        name = f"{var}_{suffix}"
        out.insert(0, f'  ge::Operator {name} = b.Const("{step.id}_{step.kind}:{suffix}", {values_cpp}, '
                      f'{shape_cpp}, {_GE_DTYPE[dtype]});')
        return name

    k = step.kind
    if k == "LeakyRelu":
        out.append(f'  {var}.SetAttr("negative_slope", {p["alpha"].value_cpp()});')
    elif k == "Transpose":
        perm = aux_const("perm", _lit_vec(p["perm"], "int64"), f"std::vector<int64_t>{{{len(p['perm'])}}}", "int64")
        out.append(f'  {var}.SetInput("perm", {perm}, 0U);')
    elif k == "Conv":
        s, pads, d = p["strides"].value_cpp(), p["pads"].value_cpp(), p["dilations"].value_cpp()
        # GE's Conv2D takes NCHW 4-vectors and pads as [top, bottom, left, right];
        # ONNX (and the node) give [sh, sw] and [top, left, bottom, right].
        out.append(f'  {var}.SetAttr("strides", std::vector<int64_t>{{1, 1, {s}[0], {s}[1]}});')
        out.append(f'  {var}.SetAttr("pads", std::vector<int64_t>{{{pads}[0], {pads}[2], {pads}[1], {pads}[3]}});')
        out.append(f'  {var}.SetAttr("dilations", std::vector<int64_t>{{1, 1, {d}[0], {d}[1]}});')
        out.append(f'  {var}.SetAttr("groups", static_cast<int64_t>(1));')
        out.append(f'  {var}.SetAttr("data_format", "NCHW");')
        out.append(f'  bridge::SetFormat({var}, "x", true, ge::FORMAT_NCHW);')
        out.append(f'  bridge::SetFormat({var}, "filter", true, ge::FORMAT_NCHW);')
        out.append(f'  bridge::SetFormat({var}, "y", false, ge::FORMAT_NCHW);')
    elif k == "LayerNorm":
        out.append(f'  {var}.SetAttr("begin_norm_axis", static_cast<int64_t>(-1));')
        out.append(f'  {var}.SetAttr("begin_params_axis", static_cast<int64_t>(-1));')
        out.append(f'  {var}.SetAttr("epsilon", {p["epsilon"].value_cpp()});')
    elif k == "ReduceMean":
        axes = p["axes"]
        axes_const = aux_const("axes", _lit_vec(axes, "int64"), f"std::vector<int64_t>{{{len(axes)}}}", "int64")
        out.append(f'  {var}.SetInput("axes", {axes_const}, 0U);')
        out.append(f'  {var}.SetAttr("keep_dims", {"true" if int(p["keepdims"]) else "false"});')
    elif k == "Unsqueeze":
        out.append(f'  {var}.SetAttr("axes", {_lit_vec(p["axes"], "int64")});')
    elif k == "Shape":
        out.append(f'  {var}.SetAttr("dtype", static_cast<int64_t>(ge::DT_INT64));')
    elif k == "Gather":
        axis = aux_const("axis", f"std::vector<int64_t>{{{int(p['axis'])}}}", "std::vector<int64_t>{}", "int64")
        out.append(f'  {var}.SetInput("axis", {axis}, 0U);')
    elif k == "Cast":
        out.append(f'  {var}.SetAttr("dst_type", static_cast<int64_t>({_GE_DTYPE[p["to"]]}));')
    elif k == "Concat":
        n = len(step.inputs)
        out.append(f'  {var}.DynamicInputRegister("x", {n});')
        for i, v in enumerate(step.inputs):
            if v.index != 0:  # SetInput(name, index, src) takes the source's output 0
                raise NotImplementedError("Concat of a multi-output step")
            out.append(f'  {var}.SetInput("x", {i}U, {_value(v, ops)});')
        dim = aux_const("concat_dim", f"std::vector<int64_t>{{{int(p['axis'])}}}", "std::vector<int64_t>{}", "int64")
        out.append(f'  {var}.SetInput("concat_dim", {dim}, 0U);')
        out.append(f'  {var}.SetAttr("N", static_cast<int64_t>({n}));')
    elif k == "Split":
        sizes = aux_const("size_splits", _expr_vec(p["sizes"], "int64"), f"std::vector<int64_t>{{{step.n_out}}}", "int64")
        dim = aux_const("split_dim", f"std::vector<int64_t>{{{int(p['axis'])}}}", "std::vector<int64_t>{}", "int64")
        out.append(f'  {var}.SetInput("size_splits", {sizes}, 0U);')
        out.append(f'  {var}.SetInput("split_dim", {dim}, 0U);')
        out.append(f'  {var}.SetAttr("num_split", static_cast<int64_t>({step.n_out}));')
        out.append(f'  {var}.DynamicOutputRegister("y", {step.n_out});')
    return out


def parse_op_to_graph(spec: OpSpec, g: Decomposition) -> str:
    fn = f"ParseOpToGraph{spec.name}"
    lines = [f"static domi::Status {fn}(const ge::Operator &op, ge::Graph &graph) {{",
             "  ge::AscendString node_name;",
             f'  if (op.GetAttr("name", node_name) != ge::GRAPH_SUCCESS) '
             f'return bridge::Fail("{spec.name}", "?", "the parsed operator has no name");']
    lines += _declare_attrs(spec, with_defaults=False)
    for a in spec.onnx_attrs:
        lines.append(f'  if (op.GetAttr("{a.name}", {cpp_var(a.name)}) != ge::GRAPH_SUCCESS) '
                     f'return bridge::Fail("{spec.name}", node_name.GetString(), "attribute \'{a.name}\' was not parsed");')
    lines.append(f'  bridge::Builder b("{spec.name}", node_name.GetString());')
    ops: Dict[str, str] = {}
    for i, v in enumerate(g.inputs):
        ops[v.step] = v.step
        lines.append(f'  ge::Operator {v.step} = b.Data("{v.step}_Data", {i});')
    for step in g.steps:
        lines.append(f"  // {step.id}: {step.kind}")
        lines += _step_cpp(step, ops)
    lines.append("  if (!b.ok()) return domi::FAILED;")
    inputs = ", ".join(v.step for v in g.inputs)
    outputs = ", ".join(f"{{{_value(v, ops)}, std::vector<size_t>{{{v.index}}}}}" for v in g.outputs)
    lines.append(f"  graph.SetInputs(std::vector<ge::Operator>{{{inputs}}})")
    lines.append(f"      .SetOutputs(std::vector<std::pair<ge::Operator, std::vector<size_t>>>{{{outputs}}});")
    lines += ["  return domi::SUCCESS;", "}"]
    return "\n".join(lines)


def plugin_source(spec: OpSpec, g: Decomposition, origins: Sequence[str]) -> str:
    origin_list = origin_literal_list(origins)
    return "\n".join([
        f"// The GE ONNX parser plugin of {spec.name}. Generated by bridge from the op spec",
        "// (bridge/ops) and the GE decomposition of its ONNX body (ascend/from_body.py): do not edit.",
        '#include "bridge_plugin_common.h"',
        "",
        "namespace domi {",
        "namespace {",
        parse_params(spec, origins),
        "",
        "#ifndef BRIDGE_GE_CUSTOM_OP",
        parse_op_to_graph(spec, g),
        "#endif",
        "}  // namespace",
        "",
        "#ifdef BRIDGE_GE_CUSTOM_OP",
        f"// Route 2: the GE custom operator {spec.name} (op_proto/{spec.module}.h); needs your Ascend C kernel.",
        f"REGISTER_CUSTOM_OP({cpp_string(ge_op_type(spec))})",
        "    .FrameworkType(ONNX)",
        f"    .OriginOpType({origin_list})",
        f"    .ParseParamsFn(ParseParams{spec.name})",
        "    .ImplyType(ImplyType::TVM);",
        "#else",
        "// Route 1 (default): expanded onto GE built-in operators; no custom kernel.",
        'REGISTER_CUSTOM_OP("PartitionedCall")',
        "    .FrameworkType(ONNX)",
        f"    .OriginOpType({origin_list})",
        f"    .ParseParamsFn(ParseParams{spec.name})",
        f"    .ParseOpToGraphFn(ParseOpToGraph{spec.name})",
        "    .ImplyType(ImplyType::TVM);",
        "#endif",
        "}  // namespace domi",
        ""])


COMMON_HEADER = r'''// Shared helpers of the bridge ONNX parser plugins. Generated by bridge: do not edit.
#ifndef BRIDGE_PLUGIN_COMMON_H_
#define BRIDGE_PLUGIN_COMMON_H_

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "graph/graph.h"
#include "graph/operator.h"
#include "graph/operator_factory.h"
#include "graph/tensor.h"
#include "graph/types.h"
#include "proto/onnx/ge_onnx.pb.h"
#include "register/register.h"

namespace bridge {

// ATC prints the plugin's failure as a parse error of the node; this line says which
// op, node and attribute.
inline domi::Status Fail(const char *op, const std::string &node, const std::string &what) {
  std::fprintf(stderr, "[bridge plugin] %s node '%s': %s\n", op, node.c_str(), what.c_str());
  return domi::FAILED;
}

template <typename T, typename U>
std::vector<T> Vec(const std::vector<U> &values) {
  return std::vector<T>(values.begin(), values.end());
}

template <typename T, typename U>
std::vector<T> Scalar(U value) {
  return std::vector<T>{static_cast<T>(value)};
}

inline void SetFormat(ge::Operator &op, const char *port, bool is_input, ge::Format format) {
  ge::TensorDesc desc = is_input ? op.GetInputDescByName(port) : op.GetOutputDescByName(port);
  desc.SetFormat(format);
  desc.SetOriginFormat(format);
  if (is_input) {
    (void)op.UpdateInputDesc(port, desc);
  } else {
    (void)op.UpdateOutputDesc(port, desc);
  }
}

// Creates the operators of one expansion, named "<node>/<step>_<kind>" (the names the
// ONNX expansion checked by `bridge parity` uses), and remembers any failure.
class Builder {
 public:
  Builder(const char *op, std::string node) : op_(op), node_(std::move(node)) {}

  ge::Operator Make(const std::string &id, const char *type) {
    ge::Operator made = ge::OperatorFactory::CreateOperator((node_ + "/" + id).c_str(), type);
    if (made.IsEmpty()) {
      ok_ = false;
      Fail(op_, node_, std::string("this CANN has no built-in operator ") + type +
                           "; build the plugin with -DBRIDGE_GE_CUSTOM_OP=ON and bring a kernel");
    }
    return made;
  }

  ge::Operator Data(const std::string &id, int64_t index) {
    ge::Operator data = Make(id, "Data");
    data.SetAttr("index", index);
    return data;
  }

  // `shape` may hold one -1, resolved from the number of values (e.g. anchors as [-1, 2]).
  template <typename T>
  ge::Operator Const(const std::string &id, const std::vector<T> &values, std::vector<int64_t> shape,
                     ge::DataType dtype) {
    int64_t known = 1;
    int64_t unknown = -1;
    for (size_t i = 0; i < shape.size(); ++i) {
      if (shape[i] < 0) {
        unknown = static_cast<int64_t>(i);
      } else {
        known *= shape[i];
      }
    }
    const int64_t count = static_cast<int64_t>(values.size());
    if (unknown >= 0 && known > 0 && count % known == 0) {
      shape[static_cast<size_t>(unknown)] = count / known;
    } else if (unknown >= 0 || known != count) {
      ok_ = false;
      Fail(op_, node_, id + ": " + std::to_string(count) + " values do not fill the constant's shape");
    }
    ge::TensorDesc desc(ge::Shape(shape), ge::FORMAT_ND, dtype);
    ge::Tensor tensor(desc, reinterpret_cast<const uint8_t *>(values.data()), values.size() * sizeof(T));
    ge::Operator made = Make(id, "Const");
    made.SetAttr("value", tensor);
    return made;
  }

  bool ok() const { return ok_; }

 private:
  const char *op_;
  std::string node_;
  bool ok_ = true;
};

}  // namespace bridge

#endif  // BRIDGE_PLUGIN_COMMON_H_
'''


def custom_route_plugin_source(spec: OpSpec, origins: Sequence[str]) -> str:
    """The plugin of the custom-operator route only: the node onto the GE custom
    operator of the same name (op_graph/), attributes copied; no decomposition."""
    ge_type = ge_op_type(spec)
    return "\n".join([
        f"// The GE ONNX parser plugin of {spec.name}, custom-operator route: the node becomes the GE custom",
        f"// operator {ge_type} (op_graph/include/{spec.module}.h, REG_AUTO_MAPPING_OP in op_graph/src/).",
        "// Generated by bridge from the op spec: do not edit, regenerate.",
        "#ifndef BRIDGE_GE_CUSTOM_OP",
        "#define BRIDGE_GE_CUSTOM_OP",
        "#endif",
        '#include "bridge_plugin_common.h"',
        "",
        "namespace domi {",
        "namespace {",
        parse_params(spec, origins),
        "}  // namespace",
        "",
        f"REGISTER_CUSTOM_OP({cpp_string(ge_type)})",
        "    .FrameworkType(ONNX)",
        f"    .OriginOpType({origin_literal_list(origins)})",
        f"    .ParseParamsFn(ParseParams{spec.name});",
        "}  // namespace domi",
        ""])
