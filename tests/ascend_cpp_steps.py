"""The two renderings of a built-in (ParseOpToGraphFn) expansion, read back into one form
so a test can compare them step by step: kind, inputs (which step's which output, in the
ONNX operator's input order), attributes and constants (values for one node's attributes).

- `cpp_steps` reads the generated C++ of ParseOpToGraph<Op>: every statement must be one
  the reader knows (an unknown one fails, so nothing is skipped), GE's operator types,
  ports and attribute spellings are mapped back to ONNX's by the tables below (stated here
  from GE's operator documentation, not taken from ascend/render_cpp.py), and the
  C++ expressions of constants and attributes are evaluated with float32 arithmetic by a
  small whitelisting evaluator (no eval);
- `onnx_steps` reads the expanded ONNX model (ascend/render_onnx.py's output).
"""
from __future__ import annotations

import ast
import re
from typing import Dict, List, Tuple

import numpy as np
from onnx import numpy_helper

# ONNX operator -> the GE built-in operator, and its input ports in ONNX's input order
GE_OF = {"Conv": "Conv2D", "LayerNormalization": "LayerNorm", "Slice": "StridedSliceV2", "Gather": "GatherV2",
         "Concat": "ConcatV2", "Split": "SplitV"}
BINARY = ("x1", "x2")
GE_PORTS = {"Add": BINARY, "Sub": BINARY, "Mul": BINARY, "Div": BINARY, "Pow": BINARY,
            "Conv2D": ("x", "filter", "bias"), "LayerNorm": ("x", "gamma", "beta"),
            "StridedSliceV2": ("x", "begin", "end", "axes", "strides"), "GatherV2": ("x", "indices"),
            "Range": ("start", "limit", "delta"), "Reshape": ("x", "shape")}
GE_DTYPE = {"ge::DT_FLOAT": 0, "ge::DT_INT64": 9}          # ge::DataType's numbers
ONNX_CAST = {1: "float32", 7: "int64"}                      # TensorProto.DataType
GE_CAST = {0: "float32", 9: "int64"}


# -- C++ expressions ------------------------------------------------------------------------
def _f32(v):
    return np.asarray(v, np.float32) if isinstance(v, (list, tuple, np.ndarray)) else np.float32(v)


def _i64(v):
    return np.asarray(v, np.int64) if isinstance(v, (list, tuple, np.ndarray)) else np.int64(v)


_CALLS = {"F": _f32, "I": _i64, "VF": lambda v: np.atleast_1d(_f32(v)), "VI": lambda v: np.atleast_1d(_i64(v)),
          "SF": lambda v: np.atleast_1d(_f32(v)), "SI": lambda v: np.atleast_1d(_i64(v)), "U": int}
_TO_PY = [(r"static_cast<float>\(", "F("), (r"static_cast<int64_t>\(", "I("),
          (r"bridge::Vec<float>\(", "VF("), (r"bridge::Vec<int64_t>\(", "VI("),
          (r"bridge::Scalar<float>\(", "SF("), (r"bridge::Scalar<int64_t>\(", "SI("),
          (r"std::vector<float>\{", "VF(["), (r"std::vector<int64_t>\{", "VI(["),
          (r"std::vector<size_t>\{", "VI(["),
          (r"\b(\d+(?:\.\d*)?(?:e[-+]?\d+)?)f\b", r"F(\1)"), (r"\b(\d+)U\b", r"U(\1)"),
          (r"\btrue\b", "True"), (r"\bfalse\b", "False"), (r"ge::(DT_\w+)", r"\1")]


def _braces_to_calls(text: str) -> str:
    """`VF([a, b}` (from `std::vector<float>{a, b}`) closed as `VF([a, b])`; plain `{...}`
    (an initializer list) as a Python list."""
    out, stack = [], []
    for ch in text:
        if ch == "[" and out and out[-1] == "(":
            stack.append("call")
            out.append(ch)
        elif ch == "{":
            stack.append("list")
            out.append("[")
        elif ch == "}":
            out.append("])" if stack.pop() == "call" else "]")
        else:
            out.append(ch)
    return "".join(out)


def cpp_value(text: str, env: Dict[str, object]):
    """The value of one generated C++ expression, attributes from `env` (attr_<name>)."""
    py = text
    for pat, rep in _TO_PY:
        py = re.sub(pat, rep, py)
    tree = ast.parse(_braces_to_calls(py), mode="eval")

    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, bool, str)):
            return node.value
        if isinstance(node, ast.Name):
            if node.id in env:
                return env[node.id]
            if node.id in ("DT_FLOAT", "DT_INT64"):
                return GE_DTYPE["ge::" + node.id]
            raise KeyError(f"unknown name {node.id} in {text!r}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _CALLS:
            assert len(node.args) == 1 and not node.keywords, text
            return _CALLS[node.func.id](ev(node.args[0]))
        if isinstance(node, ast.List):
            return [ev(e) for e in node.elts]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        if isinstance(node, ast.BinOp) and type(node.op) in (ast.Add, ast.Sub, ast.Mult, ast.Div):
            a, b = ev(node.left), ev(node.right)
            ufunc = {ast.Add: np.add, ast.Sub: np.subtract, ast.Mult: np.multiply, ast.Div: np.divide}[type(node.op)]
            return ufunc(a, b)
        if isinstance(node, ast.Subscript):
            return ev(node.value)[ev(node.slice)]
        raise ValueError(f"not a generated expression: {text!r}")
    return ev(tree)


def _args(text: str) -> List[str]:
    """Top-level comma-separated arguments of a call's argument text."""
    out, depth, cur = [], 0, []
    for ch in text:
        if ch in "({[<":
            depth += 1
        elif ch in ")}]>":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur).strip())
    return out


def _str(text: str) -> str:
    assert text.startswith('"') and text.endswith('"'), text
    return text[1:-1]


# -- the C++ rendering ----------------------------------------------------------------------
_IGNORED = re.compile(r"^\s*(//.*|ge::AscendString node_name;|if \(.*\) return .*;|(float|int64_t|std::vector<\w+>) "
                      r"attr_\w+\{\};|bridge::Builder b\(.*\);|return domi::SUCCESS;|\}|)$")


def _const(values, shape):
    arr = np.asarray(values)
    shape = [int(d) for d in shape]
    if -1 in shape:
        known = int(np.prod([d for d in shape if d != -1])) if len(shape) > 1 else 1
        shape[shape.index(-1)] = arr.size // known
    return arr.reshape(shape)


def cpp_steps(source: str, op: str, env: Dict[str, object]) -> Tuple[Dict[str, dict], List[tuple]]:
    """{step id: {"kind", "ge_type", "ports", "dynamic", "attrs", "consts", "formats", ...}}
    and the graph's outputs [(step, index)], from ParseOpToGraph<op> in `source`."""
    body = source[source.index(f"static domi::Status ParseOpToGraph{op}("):]
    body = body[body.index("\n") + 1:body.index("\n#endif")]
    steps: Dict[str, dict] = {}
    var_step: Dict[str, str] = {}
    aux: Dict[str, np.ndarray] = {}   # "<var>_<suffix>" -> value of a step's own constant
    outputs: List[tuple] = []
    stmt = ""
    for line in body.splitlines():
        if _IGNORED.match(line) and not stmt:
            continue
        stmt += line.strip()
        if not stmt.endswith(";"):
            continue
        s, stmt = stmt, ""
        m = re.fullmatch(r'ge::Operator (\w+) = b\.(Make|Const|Data)\((.*)\);', s)
        if m:
            var, how, args = m.group(1), m.group(2), _args(m.group(3))
            ident = _str(args[0])
            if how == "Data":
                assert ident == f"{var}_Data" and var == f"in{int(cpp_value(args[1], env))}", s
                var_step[var] = var
                continue
            if ":" in ident:  # a step's own constant (axes, perm, concat_dim, ...)
                assert how == "Const" and var == f"{ident.split('_')[0]}_{ident.split(':')[1]}", s
                aux[var] = (_const(cpp_value(args[1], env), cpp_value(args[2], env)), args[3])
                continue
            sid, kind = ident.split("_", 1)
            assert var == sid, s
            step = steps[sid] = {"kind": kind, "ports": {}, "dynamic": {}, "attrs": {}, "formats": {}}
            var_step[var] = sid
            if how == "Make":
                step["ge_type"] = _str(args[1])
            else:
                step["ge_type"] = "Const"
                step["value"] = _const(cpp_value(args[1], env), cpp_value(args[2], env))
                step["dtype"] = {"ge::DT_FLOAT": "float32", "ge::DT_INT64": "int64"}[args[3]]
            continue
        m = re.fullmatch(r'(\w+)\.SetInput\((.*)\);', s)
        if m:
            step, args = steps[m.group(1)], _args(m.group(2))
            if args[1] in aux:  # a step's own constant on a port
                assert int(cpp_value(args[2], env)) == 0, s
                step["ports"][_str(args[0])] = ("aux", aux.pop(args[1]))
            elif args[2] in var_step:  # SetInput(port, index, source): a dynamic input, output 0
                step["dynamic"].setdefault(_str(args[0]), {})[int(cpp_value(args[1], env))] = (var_step[args[2]], 0)
            else:
                step["ports"][_str(args[0])] = (var_step[args[1]], int(cpp_value(args[2], env)))
            continue
        m = re.fullmatch(r'(\w+)\.SetAttr\("(\w+)", (.*)\);', s)
        if m:
            value = m.group(3)
            steps[m.group(1)]["attrs"][m.group(2)] = _str(value) if value.startswith('"') else cpp_value(value, env)
            continue
        m = re.fullmatch(r'(\w+)\.(DynamicInputRegister|DynamicOutputRegister)\("(\w+)", (\d+)\);', s)
        if m:
            steps[m.group(1)]["attrs"][f"{m.group(2)}:{m.group(3)}"] = int(m.group(4))
            continue
        m = re.fullmatch(r'bridge::SetFormat\((\w+), "(\w+)", (true|false), ge::(FORMAT_\w+)\);', s)
        if m:
            steps[m.group(1)]["formats"][m.group(2)] = m.group(4)
            continue
        m = re.fullmatch(r"graph\.SetInputs\(std::vector<ge::Operator>\{([\w, ]*)\}\)"
                         r"\.SetOutputs\(std::vector<std::pair<ge::Operator, std::vector<size_t>>>\{(.*)\}\);", s)
        if m:
            assert [x.strip() for x in m.group(1).split(",")] == sorted(
                (v for v in var_step if v.startswith("in")), key=lambda v: int(v[2:])), s
            for pair in re.findall(r"\{(\w+), std::vector<size_t>\{(\d+)\}\}", m.group(2)):
                outputs.append((var_step[pair[0]], int(pair[1])))
            continue
        raise AssertionError(f"a statement the reader does not know: {s}")
    assert not aux, f"constants made and never used: {sorted(aux)}"
    return steps, outputs


def cpp_form(step: dict) -> tuple:
    """One C++ step in the common form: (kind, inputs in ONNX order, parameters)."""
    kind, ge, ports, attrs = step["kind"], step["ge_type"], step["ports"], dict(step["attrs"])
    onnx_type = "LayerNormalization" if kind == "LayerNorm" else kind
    assert ge == GE_OF.get(onnx_type, onnx_type), (kind, ge)
    order = GE_PORTS.get(ge, ("x",))
    refs = {p: v for p, v in ports.items() if v[0] != "aux"}
    consts = {p: v[1] for p, v in ports.items() if v[0] == "aux"}
    n = len(refs)
    assert set(refs) == set(order[:n]), (kind, sorted(refs))  # the ports are a prefix of GE's, in order
    inputs = tuple(refs[p] for p in order[:n])
    params: dict = {}

    def take(name):
        return attrs.pop(name)

    def const_of(port, shape_rank=None):
        arr, dtype = consts.pop(port)
        assert dtype == "ge::DT_INT64", (kind, port, dtype)
        if shape_rank is not None:
            assert arr.ndim == shape_rank, (kind, port, arr.shape)
        return tuple(int(v) for v in np.ravel(arr))

    if ge == "Const":
        return (kind, (), {"value": step["value"], "dtype": step["dtype"]})
    if kind == "LeakyRelu":
        params["alpha"] = np.float32(take("negative_slope"))
    elif kind == "Transpose":
        params["perm"] = const_of("perm", 1)
    elif kind == "Conv":
        s, p, d = take("strides"), take("pads"), take("dilations")
        assert list(s[:2]) == [1, 1] and list(d[:2]) == [1, 1], (s, d)
        params.update(strides=tuple(int(v) for v in s[2:]), dilations=tuple(int(v) for v in d[2:]),
                      pads=(int(p[0]), int(p[2]), int(p[1]), int(p[3])))  # GE [t, b, l, r] -> ONNX [t, l, b, r]
        assert int(take("groups")) == 1 and take("data_format") == "NCHW"
        assert step["formats"] == {"x": "FORMAT_NCHW", "filter": "FORMAT_NCHW", "y": "FORMAT_NCHW"}, step["formats"]
        params["group"] = 1
    elif kind == "LayerNorm":
        assert int(take("begin_norm_axis")) == -1 and int(take("begin_params_axis")) == -1
        params.update(axis=-1, epsilon=np.float32(take("epsilon")))
    elif kind == "ReduceMean":
        params.update(axes=const_of("axes", 1), keepdims=bool(take("keep_dims")))
    elif kind == "Unsqueeze":
        params["axes"] = tuple(int(v) for v in take("axes"))
    elif kind == "Shape":
        assert int(take("dtype")) == GE_DTYPE["ge::DT_INT64"]
    elif kind == "Gather":
        params["axis"] = const_of("axis", 0)[0]
    elif kind == "Cast":
        params["to"] = GE_CAST[int(take("dst_type"))]
    elif kind == "Concat":
        dyn = step["dynamic"].pop("x")
        assert sorted(dyn) == list(range(len(dyn))) == list(range(int(take("N")))), dyn
        assert take("DynamicInputRegister:x") == len(dyn)
        inputs = tuple(dyn[i] for i in range(len(dyn)))
        params["axis"] = const_of("concat_dim", 0)[0]
    elif kind == "Split":
        params.update(sizes=const_of("size_splits", 1), axis=const_of("split_dim", 0)[0])
        n_out = int(take("num_split"))
        assert take("DynamicOutputRegister:y") == n_out
        params["n_out"] = n_out
    assert not attrs and not consts and not step["dynamic"] and (kind == "Conv" or not step["formats"]), \
        (kind, attrs, consts, step["dynamic"])
    return (kind, inputs, params)


# -- the ONNX rendering ---------------------------------------------------------------------
def onnx_steps(model, prefix: str, n_inputs: int) -> Tuple[Dict[str, tuple], List[tuple]]:
    """{step id: (kind, inputs [(step, index)], parameters)} and the graph's outputs, from
    the expansion of node `prefix` (opset 13 or later, below 18: Unsqueeze's axes and
    Split's sizes are inputs, ReduceMean's axes an attribute)."""
    g = model.graph
    inits = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    producer = {i.name: (f"in{k}", 0) for k, i in enumerate(list(g.input)[:n_inputs])}
    main = {}
    for n in g.node:
        assert n.name.startswith(prefix + "/"), n.name
        sid, _, rest = n.name[len(prefix) + 1:].partition("_")
        kind, _, suffix = rest.partition(":")
        assert not suffix, f"{n.name}: a step rendered as more than one node"
        main[sid] = (kind, n)
        for k, o in enumerate(n.output):
            producer[o] = (sid, k)
    consts = {}
    for name, arr in inits.items():
        sid, _, rest = name[len(prefix) + 1:].partition("_")
        if ":" not in rest:
            consts[sid] = (rest, arr)
            producer[name] = (sid, 0)
    out = {}
    for sid, (kind, arr) in consts.items():
        out[sid] = (kind, (), {"value": arr, "dtype": str(arr.dtype)})
    for sid, (kind, n) in main.items():
        assert n.op_type == ("LayerNormalization" if kind == "LayerNorm" else kind), (n.name, n.op_type)
        attrs = {a.name: a for a in n.attribute}
        ins = list(n.input)
        params: dict = {}

        def own(i, suffix):
            name = ins[i]
            assert name == f"{prefix}/{sid}_{kind}:{suffix}", (name, suffix)
            return tuple(int(v) for v in np.ravel(inits[name]))
        if kind == "LeakyRelu":
            params["alpha"] = np.float32(attrs.pop("alpha").f)
        elif kind == "Transpose":
            params["perm"] = tuple(attrs.pop("perm").ints)
        elif kind == "Conv":
            params.update(strides=tuple(attrs.pop("strides").ints), dilations=tuple(attrs.pop("dilations").ints),
                          pads=tuple(attrs.pop("pads").ints), group=attrs.pop("group").i if "group" in attrs else 1)
        elif kind == "LayerNorm":
            params.update(axis=attrs.pop("axis").i, epsilon=np.float32(attrs.pop("epsilon").f))
        elif kind == "ReduceMean":
            params.update(axes=tuple(attrs.pop("axes").ints), keepdims=bool(attrs.pop("keepdims").i))
        elif kind == "Unsqueeze":
            params["axes"] = own(1, "axes")
            ins = ins[:1]
        elif kind == "Gather":
            params["axis"] = attrs.pop("axis").i
        elif kind == "Cast":
            params["to"] = ONNX_CAST[attrs.pop("to").i]
        elif kind == "Concat":
            params["axis"] = attrs.pop("axis").i
        elif kind == "Split":
            params.update(sizes=own(1, "sizes"), axis=attrs.pop("axis").i, n_out=len(n.output))
            ins = ins[:1]
        assert not attrs, (n.name, sorted(attrs))
        out[sid] = (kind, tuple(producer[i] for i in ins), params)
    return out, [producer[o.name] for o in g.output]
