"""What a .tflite file holds: op census (builtin and custom), custom ops with their
attributes, inputs, outputs, signatures, weights by dtype, size.

The flatbuffer is read with the TFLite schema module that ships with ai_edge_litert
(TensorFlow's copy if that is missing), through its table accessors: the generated
object API would copy every weight into Python lists. Custom-op attributes are
FlexBuffers, decoded with `flatbuffers.flexbuffers`. Nothing here imports
TensorFlow when ai_edge_litert is installed, so it works on a deployment box.
"""
from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple, Union

import numpy as np

from bridge.errors import BridgeError
from bridge.modelsource import TensorInfo  # a dynamic dim (shape_signature -1) is None

IDENTIFIER = b"TFL3"  # the flatbuffer file identifier, bytes 4..8


class InspectError(BridgeError, ValueError):
    """The file is not something this inspector can read; the message says why."""


def schema():
    try:
        from ai_edge_litert import schema_py_generated
    except ImportError:  # pragma: no cover - ai_edge_litert is a test dependency
        from tensorflow.lite.python import schema_py_generated
    return schema_py_generated


def is_tflite(data: bytes) -> bool:
    return len(data) >= 8 and data[4:8] == IDENTIFIER


def _names(enum_class) -> Dict[int, str]:
    return {v: k for k, v in vars(enum_class).items() if not k.startswith("_") and isinstance(v, int)}


@dataclass
class CustomOp:
    code: str                  # custom_code: the op type for bridge's fused ops
    attrs: Optional[dict]      # decoded FlexBuffer, or None for another options format
    subgraph: int
    index: int                 # operator index within its subgraph
    version: int = 1           # the operator code's version (what a kernel registers with)

    def to_json(self) -> dict:
        return {"code": self.code, "version": self.version, "attrs": _jsonable(self.attrs), "subgraph": self.subgraph,
                "index": self.index}


@dataclass
class TFLiteSummary:
    path: str
    size: int
    version: int
    description: str
    subgraphs: int
    ops: Counter                           # builtin name or custom code -> count (all subgraphs)
    custom: List[CustomOp]
    inputs: List[TensorInfo]               # of subgraph 0
    outputs: List[TensorInfo]
    signatures: Dict[str, Dict[str, List[str]]] = field(default_factory=dict)  # key -> inputs/outputs
    weights: Dict[str, int] = field(default_factory=dict)  # dtype -> bytes of constant tensors
    tensors: int = 0

    @property
    def custom_codes(self) -> Counter:
        return Counter(c.code for c in self.custom)

    @property
    def builtin_ops(self) -> Counter:
        custom = self.custom_codes
        return Counter({k: v for k, v in self.ops.items() if k not in custom})

    def to_json(self) -> dict:
        return {
            "format": "tflite", "path": self.path, "size": self.size, "version": self.version,
            "description": self.description, "subgraphs": self.subgraphs, "tensors": self.tensors,
            "ops": dict(sorted(self.ops.items(), key=lambda kv: (-kv[1], kv[0]))),
            "builtin_ops": dict(sorted(self.builtin_ops.items())),
            "custom_ops": [c.to_json() for c in self.custom],
            "inputs": [t.to_json() for t in self.inputs], "outputs": [t.to_json() for t in self.outputs],
            "signatures": self.signatures, "weights": self.weights,
        }

    def render(self) -> str:
        from bridge.table import render
        custom = self.custom_codes
        parts = [f"{self.path}: TFLite schema v{self.version}, {_size(self.size)}, {self.subgraphs} subgraph(s), "
                 f"{self.tensors} tensors, {sum(self.ops.values())} ops "
                 f"({sum(custom.values())} custom)"]
        rows = [[name, "custom" if name in custom else "builtin", n]
                for name, n in sorted(self.ops.items(), key=lambda kv: (-kv[1], kv[0]))]
        parts.append(render(["op", "kind", "count"], rows))
        if self.custom:
            parts.append(render(["custom op", "subgraph", "index", "attributes"],
                                [[c.code, c.subgraph, c.index, _attr_text(c.attrs)] for c in self.custom],
                                align="lrrl"))
        parts.append(render(["", "name", "shape", "dtype"],
                            [["input", t.name, _dims(t.shape), t.dtype] for t in self.inputs]
                            + [["output", t.name, _dims(t.shape), t.dtype] for t in self.outputs], align="llll"))
        if self.signatures:
            parts.append(render(["signature", "inputs", "outputs"],
                                [[k, ", ".join(v["inputs"]), ", ".join(v["outputs"])]
                                 for k, v in self.signatures.items()], align="lll"))
        if self.weights:
            parts.append(render(["weights dtype", "bytes"], [[k, _size(v)] for k, v in sorted(self.weights.items())],
                                align="lr"))
        return "\n\n".join(parts)


def inspect_tflite(source: Union[str, os.PathLike, bytes]) -> TFLiteSummary:
    """Reads a .tflite file (a path, or the file's bytes)."""
    if isinstance(source, (bytes, bytearray)):
        data, path = bytes(source), "<bytes>"
    else:
        path = str(source)
        try:
            data = Path(path).read_bytes()
        except OSError as e:
            raise InspectError(f"cannot read {path}: {e.strerror or e}") from e
    if not is_tflite(data):
        raise InspectError(f"{path} is not a TFLite file (no '{IDENTIFIER.decode()}' identifier at bytes 4..8)")
    try:
        return _summarise(data, path)
    except InspectError:
        raise
    except Exception as e:  # a truncated or corrupt flatbuffer fails deep in the accessors
        raise InspectError(f"{path} is not a valid TFLite flatbuffer ({type(e).__name__}: {e})") from e


def _summarise(data: bytes, path: str) -> TFLiteSummary:
    s = schema()
    builtin_names = _names(s.BuiltinOperator)
    type_names = {k: v.lower() for k, v in _names(s.TensorType).items()}
    model = s.Model.GetRootAs(data, 0)

    codes: List[Tuple[bool, str]] = []  # (is_custom, name) per operator code
    versions: List[int] = []
    for i in range(model.OperatorCodesLength()):
        oc = model.OperatorCodes(i)
        # Builtin codes above 127 live only in builtin_code; older writers filled
        # only the deprecated int8 field, so the larger of the two is the code.
        code = max(oc.BuiltinCode(), oc.DeprecatedBuiltinCode())
        versions.append(oc.Version() or 1)
        if code == s.BuiltinOperator.CUSTOM:
            codes.append((True, (oc.CustomCode() or b"").decode("utf-8", "replace")))
        else:
            codes.append((False, builtin_names.get(code, f"BUILTIN_{code}")))

    buffer_sizes = []
    for i in range(model.BuffersLength()):
        b = model.Buffers(i)
        # Buffers past 2 GB sit after the flatbuffer, addressed by offset/size.
        buffer_sizes.append(b.DataLength() or (b.Size() if b.Offset() > 1 else 0))

    ops: Counter = Counter()
    custom: List[CustomOp] = []
    weights: Counter = Counter()
    inputs: List[TensorInfo] = []
    outputs: List[TensorInfo] = []
    tensors = 0
    if model.SubgraphsLength() == 0:
        raise InspectError(f"{path} has no subgraph")
    for g in range(model.SubgraphsLength()):
        sg = model.Subgraphs(g)
        tensors += sg.TensorsLength()
        for j in range(sg.OperatorsLength()):
            op = sg.Operators(j)
            is_custom, name = codes[op.OpcodeIndex()]
            ops[name] += 1
            if is_custom:
                custom.append(CustomOp(name, _custom_options(s, op), g, j, versions[op.OpcodeIndex()]))
        for t in range(sg.TensorsLength()):
            tensor = sg.Tensors(t)
            b = tensor.Buffer()
            if 0 < b < len(buffer_sizes) and buffer_sizes[b]:
                weights[type_names.get(tensor.Type(), str(tensor.Type()))] += buffer_sizes[b]
        if g == 0:
            inputs = [_tensor(sg.Tensors(int(k)), type_names) for k in sg.InputsAsNumpy()] if sg.InputsLength() else []
            outputs = [_tensor(sg.Tensors(int(k)), type_names) for k in sg.OutputsAsNumpy()] if sg.OutputsLength() else []

    signatures = {}
    for i in range(model.SignatureDefsLength()):
        sd = model.SignatureDefs(i)
        signatures[(sd.SignatureKey() or b"").decode()] = {
            "inputs": [(sd.Inputs(k).Name() or b"").decode() for k in range(sd.InputsLength())],
            "outputs": [(sd.Outputs(k).Name() or b"").decode() for k in range(sd.OutputsLength())]}

    return TFLiteSummary(path=path, size=len(data), version=model.Version(),
                         description=(model.Description() or b"").decode("utf-8", "replace"),
                         subgraphs=model.SubgraphsLength(), ops=ops, custom=custom, inputs=inputs,
                         outputs=outputs, signatures=signatures, weights=dict(weights), tensors=tensors)


def _tensor(t, type_names) -> TensorInfo:
    shape = [int(d) for d in t.ShapeAsNumpy()] if t.ShapeLength() else []
    if t.ShapeSignatureLength():
        shape = [None if int(d) < 0 else int(d) for d in t.ShapeSignatureAsNumpy()]
    return TensorInfo((t.Name() or b"").decode("utf-8", "replace"), tuple(shape),
                      type_names.get(t.Type(), str(t.Type())))


def _custom_options(s, op) -> Optional[dict]:
    if op.CustomOptionsLength() == 0:
        return {}
    if op.CustomOptionsFormat() != s.CustomOptionsFormat.FLEXBUFFERS:
        return None
    from flatbuffers import flexbuffers
    decoded = flexbuffers.Loads(bytes(op.CustomOptionsAsNumpy()))
    return {k: _plain(v) for k, v in decoded.items()} if isinstance(decoded, dict) else {"value": _plain(decoded)}


def _plain(v):
    if isinstance(v, (bytes, bytearray)):
        return bytes(v).decode("utf-8", "replace")
    if isinstance(v, (list, tuple, np.ndarray)):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and np.isfinite(v) and float(np.float32(v)) == v:
        # FlexBuffers often store float32: 0.1, not 0.10000000149011612
        return float(str(np.float32(v)))
    return v


def _jsonable(v):
    return _plain(v) if v is not None else None


def _attr_text(attrs: Optional[dict]) -> str:
    if attrs is None:
        return "(not a FlexBuffer)"
    return ", ".join(f"{k}={v}" for k, v in sorted(attrs.items())) or "-"


def _dims(shape) -> str:
    return "[" + ",".join("?" if d is None else str(d) for d in shape) + "]"


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover
