"""A decomposition as standard ONNX nodes for one custom node (the expansion the
`ge` parity runtime runs). Node and initializer names carry the step id
(`<node>/<step>_<kind>`), the same id the C++ gives the GE operator, so a test
can match the two renderings step by step."""
from __future__ import annotations

from typing import Dict, List, Tuple

import numpy as np
from onnx import NodeProto, TensorProto, helper, numpy_helper

from bridge.ascend.decomposition import Decomposition, Step, Value, const_array
from bridge.ops.shape_rules import Expr
from bridge.ascend.from_body import SAME_KIND

_ONNX_DTYPE = {"float32": TensorProto.FLOAT, "int64": TensorProto.INT64}


def render(g: Decomposition, node: NodeProto, attrs: Dict, opset: int, prefix: str
           ) -> Tuple[List[NodeProto], List[TensorProto]]:
    """Nodes and initializers computing `node` (whose resolved attributes are
    `attrs`) from its inputs into its outputs, for default-domain `opset`."""
    nodes: List[NodeProto] = []
    inits: List[TensorProto] = []
    produced: Dict[Tuple[str, int], str] = {}
    for i, name in enumerate(node.input):
        produced[(f"in{i}", 0)] = name
    final = {(v.step, v.index): node.output[k] for k, v in enumerate(g.outputs) if k < len(node.output) and node.output[k]}

    def name_of(v: Value) -> str:
        return produced[(v.step, v.index)]

    for step in g.steps:
        base = f"{prefix}/{step.id}_{step.kind}"
        outs = [final.get((step.id, i), base if step.n_out == 1 else f"{base}:{i}") for i in range(step.n_out)]
        for i, o in enumerate(outs):
            produced[(step.id, i)] = o
        ins = [name_of(v) for v in step.inputs]
        if step.kind == "Const":
            inits.append(numpy_helper.from_array(const_array(step, attrs), outs[0]))
            continue
        _emit(step, ins, outs, base, attrs, opset, nodes, inits)
    for k, v in enumerate(g.outputs):  # an output that is an input or an aliased value
        want = node.output[k] if k < len(node.output) else ""
        if want and produced[(v.step, v.index)] != want:
            nodes.append(helper.make_node("Identity", [produced[(v.step, v.index)]], [want], name=f"{prefix}/out{k}_Identity"))
    return nodes, inits


def _emit(step: Step, ins, outs, base, attrs, opset, nodes, inits):
    p = {k: (v.value(attrs) if isinstance(v, Expr) else v) for k, v in step.params.items()}
    k = step.kind

    def node(op_type, inputs, outputs, suffix="", **kw):
        nodes.append(helper.make_node(op_type, inputs, outputs, name=base + suffix, **kw))

    def const(suffix, array):
        name = f"{base}{suffix}"
        inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def mean(src, dst, suffix, axes, keepdims):
        if opset >= 18:  # axes became an input in opset 18
            node("ReduceMean", [src, const(f"{suffix}:axes", np.asarray(axes, np.int64))], [dst], suffix,
                 keepdims=keepdims)
        else:
            node("ReduceMean", [src], [dst], suffix, axes=list(axes), keepdims=keepdims)

    if k in SAME_KIND:
        node(k, ins, outs)
    elif k == "Unsqueeze":
        axes = [int(a) for a in p["axes"]]
        if opset >= 13:  # axes became an input in opset 13
            node("Unsqueeze", [ins[0], const(":axes", np.asarray(axes, np.int64))], outs)
        else:
            node("Unsqueeze", ins, outs, axes=axes)
    elif k == "ReduceMean":
        mean(ins[0], outs[0], "", [int(a) for a in p["axes"]], int(p["keepdims"]))
    elif k == "LeakyRelu":
        node("LeakyRelu", ins, outs, alpha=float(p["alpha"]))
    elif k == "Transpose":
        node("Transpose", ins, outs, perm=list(p["perm"]))
    elif k == "Conv":
        node("Conv", ins, outs, strides=list(p["strides"]), pads=list(p["pads"]), dilations=list(p["dilations"]))
    elif k == "Gather":
        node("Gather", ins, outs, axis=int(p["axis"]))
    elif k == "Cast":
        node("Cast", ins, outs, to=_ONNX_DTYPE[p["to"]])
    elif k == "Concat":
        node("Concat", ins, outs, axis=int(p["axis"]))
    elif k == "Split":
        sizes = [int(s) for s in p["sizes"]]
        if opset >= 13:  # `split` became an input in opset 13
            node("Split", [ins[0], const(":sizes", np.asarray(sizes, np.int64))], outs, axis=int(p["axis"]))
        else:
            node("Split", ins, outs, axis=int(p["axis"]), split=sizes)
    elif k == "LayerNorm":
        eps = float(p["epsilon"])
        if opset >= 17:
            node("LayerNormalization", ins, outs, axis=-1, epsilon=eps)
            return
        # Below 17 there is no LayerNormalization: the explicit decomposition.
        # Pow(d, 2) (not Mul(d, d)) lets onnxruntime fuse it back into one kernel.
        x, gamma, beta = ins
        t = lambda s: f"{base}{s}"
        mean(x, t(":mean"), ":mean", [-1], 1)
        node("Sub", [x, t(":mean")], [t(":d")], ":d")
        node("Pow", [t(":d"), const(":two", np.asarray(2.0, np.float32))], [t(":sq")], ":sq")
        mean(t(":sq"), t(":var"), ":var", [-1], 1)
        node("Add", [t(":var"), const(":eps", np.asarray(eps, np.float32))], [t(":vareps")], ":vareps")
        node("Sqrt", [t(":vareps")], [t(":std")], ":std")
        node("Div", [t(":d"), t(":std")], [t(":norm")], ":norm")
        node("Mul", [t(":norm"), gamma], [t(":scaled")], ":scaled")
        node("Add", [t(":scaled"), beta], outs, "")
    else:  # pragma: no cover - KINDS and this table are kept together
        raise NotImplementedError(f"no ONNX rendering for step kind {k}")


def step_of(node_name: str, prefix: str):
    """(step id, kind) from a rendered node's name, or None."""
    if not node_name.startswith(prefix + "/"):
        return None
    rest = node_name[len(prefix) + 1:].split(":")[0]
    sid, _, kind = rest.partition("_")
    return sid, kind
