"""The ATC pre-flight: every node ATC's ONNX parser would reject, found here
without CANN. What it checks, in ATC's terms:

- an op type whose origin type `ai.onnx::<opset>::<Op>` no package registers
  (E16002; the CSV, narrowed for older releases by `cann`);
- a custom-domain (or legacy default-domain custom) node whose exact origin type
  no plugin registers (E16002);
- a node whose domain is missing from opset_import;
- default-domain nodes in a model with more than one opset_import, under the
  legacy parser (E16005);
- model-local functions (ATC does not take them);
- graph inputs with dynamic dimensions that `input_shapes` does not fix.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Dict, Iterable, List, Optional, Sequence, Set

from onnx import ModelProto

from bridge.ascend import atc_support
from bridge.ascend.origins import model_opsets, node_origin

LEGACY_CANNS = (5, 6)


@dataclass
class Finding:
    code: str        # short key: unregistered-op, no-plugin, missing-domain, mixed-domains, local-function, dynamic-shape
    node: str        # node (or function, or input) name
    op_type: str
    origin_type: str
    problem: str

    def as_dict(self):
        return asdict(self)


def default_parser(cann: int) -> str:
    return "legacy" if cann in LEGACY_CANNS else "new"


def _nodes(graph, path=""):
    for i, n in enumerate(graph.node):
        name = n.name or f"{n.op_type}_{i}"
        yield (f"{path}{name}", n)
        for a in n.attribute:  # If/Loop/Scan bodies are parsed with the same rules
            subs = list(a.g.node and [a.g] or []) + list(a.graphs)
            for sub in subs:
                yield from _nodes(sub, f"{path}{name}/{a.name}/")


def _why_no_plugin(node) -> str:
    """Why bridge generates no plugin for one of its ops ('' when it does, or the
    node is no op of bridge's): its body uses an ONNX op without a GE mapping."""
    from bridge import ops
    from bridge.ascend.builtin import decomposition
    from bridge.ascend.from_body import UnmappedOp
    spec = ops.SPECS.get(node.op_type)
    if spec is None or node.domain not in (spec.domain, "", "ai.onnx"):
        return ""
    try:
        decomposition(spec.name)
    except UnmappedOp as e:
        return f" ({e})"
    return ""


def check(model: ModelProto, *, cann: int = atc_support.DEFAULT_CANN, plugins: Iterable[str] = (),
          parser: Optional[str] = None, input_shapes: Optional[Dict[str, Sequence[int]]] = None) -> List[Finding]:
    """Everything ATC would reject in `model`; empty when clean. `plugins` are the
    origin types custom plugins register (see origins.registered_in_dir)."""
    if cann not in atc_support.CANN_OPSETS:
        raise ValueError(f"cann must be one of {sorted(atc_support.CANN_OPSETS)}, got {cann!r}")
    parser = parser or default_parser(cann)
    registered: Set[str] = set(plugins)
    opsets = model_opsets(model)
    input_shapes = input_shapes or {}
    found: List[Finding] = []

    for f in model.functions:
        found.append(Finding("local-function", f.name, f.name, f"{f.domain}::{f.name}",
                             f"model-local function {f.domain}::{f.name}: ATC does not take ONNX functions; "
                             f"inline it or export without functions"))

    initializers = {t.name for t in model.graph.initializer}
    for inp in model.graph.input:
        if inp.name in initializers or not inp.type.HasField("tensor_type"):
            continue
        dims = inp.type.tensor_type.shape.dim
        dynamic = [i for i, d in enumerate(dims) if not (d.HasField("dim_value") and d.dim_value > 0)]
        if not inp.type.tensor_type.HasField("shape"):
            dynamic = ["rank"]
        if dynamic and inp.name not in input_shapes:
            shown = "[" + ",".join(str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?") for d in dims) + "]"
            found.append(Finding("dynamic-shape", inp.name, "", "",
                                 f"input '{inp.name}' has dynamic shape {shown}: pass --input-shape "
                                 f"{inp.name}:... (ATC --input_shape)"))

    default_nodes = []
    for name, node in _nodes(model.graph):
        origin = node_origin(node, opsets)
        if origin is None:
            found.append(Finding("missing-domain", name, node.op_type, f"{node.domain}::?::{node.op_type}",
                                 f"domain '{node.domain}' is not in the model's opset_import"))
            continue
        if node.domain in ("", "ai.onnx"):
            default_nodes.append(name)
            if origin in registered or (node.op_type == "Constant"):
                continue
            opset = opsets["ai.onnx"]
            if not atc_support.is_registered(node.op_type, opset, cann):
                has = atc_support.describe(node.op_type, cann)
                found.append(Finding("unregistered-op", name, node.op_type, origin,
                                     f"no CANN {cann} package registers {origin} (E16002); "
                                     f"{node.op_type} is registered at {has}{_why_no_plugin(node)}"))
        elif origin not in registered:
            close = sorted(o for o in registered if o.endswith("::" + node.op_type))
            hint = f"; plugins register {', '.join(close)}" if close else "; no plugin registers this op type"
            found.append(Finding("no-plugin", name, node.op_type, origin,
                                 f"no plugin registers {origin} (E16002){hint}{_why_no_plugin(node)}"))

    if parser == "legacy" and default_nodes and len(model.opset_import) > 1:
        domains = ", ".join(f"{imp.domain or 'ai.onnx'}:{imp.version}" for imp in model.opset_import)
        found.append(Finding("mixed-domains", "<model>", "", "",
                             f"default-domain nodes with {len(model.opset_import)} opset_imports ({domains}): "
                             f"legacy ATC parsers (CANN 5/6) reject this (E16005); export with --parser legacy"))
    return found


def parse_input_shapes(text: Optional[str]) -> Dict[str, List[int]]:
    """ATC's --input_shape syntax, "x:1,3,416,416;y:1,128", as a dict; ValueError
    naming the bad part."""
    out: Dict[str, List[int]] = {}
    if not text:
        return out
    for part in text.split(";"):
        if not part.strip():
            continue
        name, sep, dims = part.rpartition(":")
        if not sep or not name:
            raise ValueError(f"--input-shape part {part!r} is not NAME:d0,d1,...")
        try:
            values = [int(d) for d in dims.split(",")] if dims.strip() else []
        except ValueError:
            raise ValueError(f"--input-shape part {part!r}: dimensions must be integers") from None
        if any(v <= 0 for v in values):
            raise ValueError(f"--input-shape part {part!r}: dimensions must be positive (static)")
        out[name.strip()] = values
    return out
