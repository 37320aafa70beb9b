"""What an .onnx file holds: opsets, op census by domain, custom-domain nodes with
their attributes, model-local functions, inputs, outputs, initializers and external
data. Needs only the `onnx` package (no TensorFlow, no onnxruntime).

The model is loaded without its external data: the inspector reports where that
data lives (and whether the files are there) instead of reading gigabytes.
"""
from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from bridge.modelsource import TensorInfo
from bridge.tflite_inspect import InspectError, _dims, _size

# Domains that every ONNX runtime knows; any other domain is a custom domain.
STANDARD_DOMAINS = ("", "ai.onnx", "ai.onnx.ml", "ai.onnx.preview.training")


@dataclass
class CustomNode:
    domain: str
    op_type: str
    name: str
    attrs: dict

    def to_json(self) -> dict:
        return {"domain": self.domain, "op_type": self.op_type, "name": self.name, "attrs": self.attrs}


@dataclass
class FunctionInfo:
    domain: str
    name: str
    nodes: int
    opsets: Dict[str, int]
    attributes: List[str]

    def to_json(self) -> dict:
        return {"domain": self.domain, "name": self.name, "nodes": self.nodes, "opsets": self.opsets,
                "attributes": self.attributes}


@dataclass
class ExternalFile:
    location: str
    tensors: int
    bytes: int
    present: bool

    def to_json(self) -> dict:
        return {"location": self.location, "tensors": self.tensors, "bytes": self.bytes, "present": self.present}


@dataclass
class OnnxSummary:
    path: str
    size: int
    ir_version: int
    producer: str
    opsets: Dict[str, int]                 # domain ("" is ai.onnx) -> version
    ops: Counter                           # (domain, op_type) -> count in the main graph and its subgraphs
    custom: List[CustomNode]
    functions: List[FunctionInfo]
    inputs: List[TensorInfo]
    outputs: List[TensorInfo]
    initializers: int = 0
    initializer_bytes: int = 0
    external: List[ExternalFile] = field(default_factory=list)

    @property
    def custom_ops(self) -> Counter:
        return Counter({k: v for k, v in self.ops.items() if k[0] not in STANDARD_DOMAINS})

    def to_json(self) -> dict:
        return {
            "format": "onnx", "path": self.path, "size": self.size, "ir_version": self.ir_version,
            "producer": self.producer, "opsets": self.opsets,
            "ops": [{"domain": d, "op_type": t, "count": n} for (d, t), n in _ordered(self.ops)],
            "custom_nodes": [c.to_json() for c in self.custom],
            "functions": [f.to_json() for f in self.functions],
            "inputs": [t.to_json() for t in self.inputs], "outputs": [t.to_json() for t in self.outputs],
            "initializers": self.initializers, "initializer_bytes": self.initializer_bytes,
            "external_data": [e.to_json() for e in self.external],
        }

    def render(self) -> str:
        from bridge.table import render
        opsets = ", ".join(f"{d or 'ai.onnx'} {v}" for d, v in sorted(self.opsets.items()))
        parts = [f"{self.path}: ONNX IR v{self.ir_version}, {_size(self.size)}, opsets: {opsets}; "
                 f"{sum(self.ops.values())} nodes ({sum(self.custom_ops.values())} in custom domains), "
                 f"{self.initializers} initializers ({_size(self.initializer_bytes)})"
                 + (f"; producer {self.producer}" if self.producer else "")]
        parts.append(render(["domain", "op", "count"], [[d or "ai.onnx", t, n] for (d, t), n in _ordered(self.ops)]))
        if self.custom:
            parts.append(render(["custom node", "domain", "name", "attributes"],
                                [[c.op_type, c.domain, c.name, ", ".join(f"{k}={v}" for k, v in sorted(c.attrs.items()))]
                                 for c in self.custom], align="llll"))
        if self.functions:
            parts.append(render(["function", "domain", "nodes", "opsets", "attributes"],
                                [[f.name, f.domain, f.nodes, ", ".join(f"{d or 'ai.onnx'} {v}" for d, v in f.opsets.items()),
                                  ", ".join(f.attributes) or "-"] for f in self.functions], align="llrll"))
        parts.append(render(["", "name", "shape", "dtype"],
                            [["input", t.name, _dims(t.shape), t.dtype] for t in self.inputs]
                            + [["output", t.name, _dims(t.shape), t.dtype] for t in self.outputs], align="llll"))
        if self.external:
            parts.append(render(["external data", "tensors", "bytes", "present"],
                                [[e.location, e.tensors, _size(e.bytes), "yes" if e.present else "MISSING"]
                                 for e in self.external], align="lrrl"))
        return "\n\n".join(parts)


def inspect_onnx(path) -> OnnxSummary:
    import onnx
    from bridge.onnx_plugins.functions import all_nodes
    path = str(path)
    try:
        size = os.path.getsize(path)
        model = onnx.load(path, load_external_data=False)
    except OSError as e:
        raise InspectError(f"cannot read {path}: {e.strerror or e}") from e
    except Exception as e:  # protobuf's DecodeError and friends
        raise InspectError(f"{path} is not a valid ONNX model ({type(e).__name__}: {e})") from e
    if not model.HasField("graph"):
        raise InspectError(f"{path} is not a valid ONNX model (no graph)")

    ops: Counter = Counter()
    custom: List[CustomNode] = []
    for node in all_nodes(model.graph):
        ops[(node.domain, node.op_type)] += 1
        if node.domain not in STANDARD_DOMAINS:
            custom.append(CustomNode(node.domain, node.op_type, node.name,
                                     {a.name: _attr(a) for a in node.attribute}))

    functions = [FunctionInfo(f.domain, f.name, len(f.node), {o.domain: o.version for o in f.opset_import},
                              list(f.attribute) + [a.name for a in f.attribute_proto])
                 for f in model.functions]

    base = Path(path).resolve().parent
    external: Dict[str, List[int]] = {}
    n_bytes = 0
    for t in _initializers(model.graph):
        nbytes = _tensor_bytes(t)
        n_bytes += nbytes
        if t.data_location == onnx.TensorProto.EXTERNAL:
            info = {e.key: e.value for e in t.external_data}
            entry = external.setdefault(info.get("location", "?"), [0, 0])
            entry[0] += 1
            entry[1] += int(info["length"]) if "length" in info else nbytes
    return OnnxSummary(
        path=path, size=size, ir_version=model.ir_version,
        producer=" ".join(x for x in (model.producer_name, model.producer_version) if x),
        opsets={o.domain: o.version for o in model.opset_import}, ops=ops, custom=custom, functions=functions,
        inputs=[_value_info(v) for v in model.graph.input if v.name not in {i.name for i in model.graph.initializer}],
        outputs=[_value_info(v) for v in model.graph.output],
        initializers=len(model.graph.initializer), initializer_bytes=n_bytes,
        external=[ExternalFile(loc, n, b, (base / loc).is_file()) for loc, (n, b) in sorted(external.items())])


def _initializers(graph):
    import onnx
    yield from graph.initializer
    for node in graph.node:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from _initializers(a.g)


def _tensor_bytes(t) -> int:
    import numpy as np
    import onnx
    if t.raw_data:
        return len(t.raw_data)
    n = int(np.prod(t.dims)) if len(t.dims) else 1
    try:
        item = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.data_type)).itemsize
    except Exception:
        item = 1
    return n * item


def _attr(a):
    import onnx
    v = onnx.helper.get_attribute_value(a)
    if a.type in (onnx.AttributeProto.FLOAT, onnx.AttributeProto.FLOATS):
        # ONNX stores float32: print 1e-06, not 9.999999974752427e-07
        import numpy as np
        return float(str(np.float32(v))) if a.type == onnx.AttributeProto.FLOAT else [float(str(np.float32(x))) for x in v]
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, (list, tuple)):
        return [x.decode("utf-8", "replace") if isinstance(x, bytes) else x for x in v
                if isinstance(x, (bytes, int, float, str))]
    if isinstance(v, (int, float, str)):
        return v
    return f"<{onnx.AttributeProto.AttributeType.Name(a.type).lower()}>"


def _value_info(v) -> TensorInfo:
    import onnx
    tt = v.type.tensor_type
    dtype = onnx.TensorProto.DataType.Name(tt.elem_type).lower() if tt.elem_type else "?"
    if not tt.HasField("shape"):
        return TensorInfo(v.name, (), dtype + " (unknown rank)")
    shape: Tuple[Optional[int], ...] = tuple(d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim)
    return TensorInfo(v.name, shape, dtype)


def _ordered(ops: Counter):
    return sorted(ops.items(), key=lambda kv: (kv[0][0] in STANDARD_DOMAINS, -kv[1], kv[0]))
