"""Model-level rewrites for the GE route: the built-in-operator expansion (what
the ParseOpToGraphFn plugins build, as standard ONNX), and moving the custom
nodes between `com.bridge` (new parsers) and the default domain (legacy parsers).
"""
from __future__ import annotations

from typing import Dict, Iterable, List, Optional

from onnx import ModelProto, NodeProto, TensorProto, helper

from bridge import ops
from bridge.ascend.builtin import decomposition
from bridge.ascend.render_onnx import render

DEFAULT_DOMAINS = ("", "ai.onnx")


def is_custom(node: NodeProto) -> bool:
    """One of our ops, in com.bridge or (legacy mode) in the default domain."""
    if node.op_type not in ops.SPECS:
        return False
    return node.domain == ops.SPECS[node.op_type].domain or node.domain in DEFAULT_DOMAINS


def node_attrs(node: NodeProto) -> dict:
    """The node's attributes resolved against the spec (defaults filled in;
    OpError naming the op and attribute when one is unknown, missing or malformed)."""
    spec = ops.SPECS[node.op_type]
    raw = {}
    for a in node.attribute:
        v = helper.get_attribute_value(a)
        raw[a.name] = v.decode() if isinstance(v, bytes) else v
    return spec.resolve_onnx(raw)


def opset_of(model: ModelProto, domain: str = "") -> Optional[int]:
    for imp in model.opset_import:
        if imp.domain == domain or (domain in DEFAULT_DOMAINS and imp.domain in DEFAULT_DOMAINS):
            return imp.version
    return None


def _elem_types(graph) -> Dict[str, int]:
    types = {t.name: t.data_type for t in graph.initializer}
    for vi in list(graph.input) + list(graph.value_info) + list(graph.output):
        if vi.type.HasField("tensor_type"):
            types[vi.name] = vi.type.tensor_type.elem_type
    return types


def _inferred_elem_types(model: ModelProto) -> Dict[str, int]:
    """Element types of every tensor onnx's shape inference reaches (bridge's
    schemas registered, so it types the com.bridge nodes too): a node fed by a
    Cast has no value_info of its own in an exported graph. {} where inference
    fails."""
    try:
        from onnx import shape_inference
        from bridge.onnx_plugins import schemas
        schemas.register_all()
        return _elem_types(shape_inference.infer_shapes(model).graph)
    except Exception:  # noqa: BLE001 - no inferred types: the declared ones decide
        return {}


def expand_builtin(model: ModelProto, opset: Optional[int] = None) -> ModelProto:
    """A copy of `model` with every custom node (com.bridge or legacy default-domain)
    replaced by its built-in-operator decomposition: standard ops only, in the
    model's default-domain opset (or `opset`), no custom domain left."""
    out = ModelProto()
    out.CopyFrom(model)
    opset = opset or opset_of(out) or 11
    graph = out.graph
    types = _elem_types(graph)
    inferred: Optional[Dict[str, int]] = None
    new_nodes: List[NodeProto] = []
    used = set()
    for i, node in enumerate(graph.node):
        if not is_custom(node):
            new_nodes.append(node)
            continue
        spec = ops.SPECS[node.op_type]
        first = types.get(node.input[0]) if node.input else None
        if first in (None, 0) and node.input:  # undeclared (e.g. after a Cast): what inference gives
            if inferred is None:
                inferred = _inferred_elem_types(model)
            first = inferred.get(node.input[0])
        if first not in (None, 0, TensorProto.FLOAT):
            raise ops.OpError(spec.name, spec.inputs[0].name,
                              f"node '{node.name}': the built-in (GE) expansion is float32 only, input "
                              f"'{node.input[0]}' is {TensorProto.DataType.Name(first)}; export float32 and let "
                              f"ATC lower precision (--precision_mode)")
        prefix = node.name or f"{node.op_type}_{i}"
        while prefix in used:
            prefix += "_"
        used.add(prefix)
        nodes, inits = render(decomposition(spec.name), node, node_attrs(node), opset, prefix)
        new_nodes.extend(nodes)
        graph.initializer.extend(inits)
    del graph.node[:]
    graph.node.extend(new_nodes)
    drop_custom_functions(out)
    set_opsets(out, opset, keep_custom=False)
    return out


def drop_custom_functions(model: ModelProto) -> None:
    """Removes the model-local functions of our ops, in place (ATC takes none)."""
    keep = [f for f in model.functions if not (f.name in ops.SPECS and f.domain == ops.SPECS[f.name].domain)]
    del model.functions[:]
    model.functions.extend(keep)


def _custom_domains_in_use(model: ModelProto) -> set:
    return {n.domain for n in model.graph.node if n.domain not in DEFAULT_DOMAINS}


def set_opsets(model: ModelProto, opset: int, keep_custom: bool) -> None:
    """Rewrites opset_import in place: the default domain at `opset` first, then
    every other domain a node or function uses (com.bridge at its version);
    imports nothing uses are dropped unless `keep_custom`."""
    in_use = _custom_domains_in_use(model) | {f.domain for f in model.functions}
    imports = [(imp.domain, imp.version) for imp in model.opset_import
               if imp.domain not in DEFAULT_DOMAINS and (keep_custom or imp.domain in in_use)]
    for d in in_use:
        if d not in {x for x, _ in imports}:
            imports.append((d, ops.DOMAIN_VERSION if d == ops.DOMAIN else 1))
    del model.opset_import[:]
    model.opset_import.extend([helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in imports])


def to_legacy(model: ModelProto) -> ModelProto:
    """Custom nodes moved into the default domain, with a single opset_import, so
    their origin type is `ai.onnx::<opset>::<Op>` (what old ATC parsers accept)."""
    out = ModelProto()
    out.CopyFrom(model)
    for n in out.graph.node:
        if is_custom(n):
            n.domain = ""
    drop_custom_functions(out)
    set_opsets(out, opset_of(out) or 11, keep_custom=False)
    return out


def legacy_to_runnable(model: ModelProto) -> ModelProto:
    """The inverse of `to_legacy`: default-domain custom nodes back in com.bridge
    (and the domain imported), so onnxruntime with the native kernels runs it."""
    out = ModelProto()
    out.CopyFrom(model)
    for n in out.graph.node:
        if is_custom(n):
            n.domain = ops.SPECS[n.op_type].domain
    set_opsets(out, opset_of(out) or 11, keep_custom=True)
    return out


def custom_nodes(model: ModelProto) -> Iterable[NodeProto]:
    return (n for n in model.graph.node if is_custom(n))
