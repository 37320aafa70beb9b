"""int8 ONNX for onnxruntime (`bridge export --to onnx --quantize dynamic|static`),
through onnxruntime's own quantizer (onnxruntime.quantization): bridge adds the
choices a user would otherwise look up, and a verdict.

- dynamic: the weights of MatMul/Gemm nodes with a constant B become int8 (or
  uint8, see weight_type) with a scale per output channel, their activations
  are quantized at run time
  (DynamicQuantizeLinear + MatMulInteger). bridge's own ops stay float32 and keep
  their native kernels; nothing is calibrated.
- static: QDQ around every quantizable node (Conv with per-channel weights,
  MatMul, Gemm, Add, Mul, ...), activation ranges calibrated (MinMax) on the
  inputs the user gives. onnxruntime's calibrator runs a plain session, without
  bridge's kernels, so the model quantized is the lowered export: a fused op is
  quantized as its standard decomposition (YoloConvBnLeaky: its Conv, with the
  BatchNorm folded into the weights, and LeakyRelu).

Neither keeps elementwise bounds a float32 export keeps: the exporter judges the
result by task agreement (bridge.parity.task), never by a wider bound.
"""
from __future__ import annotations

import os
import tempfile
from typing import Iterable, List, Mapping, Optional, Sequence

import numpy as np

MODES = ("none", "dynamic", "static")
DYNAMIC_OPS = ("MatMul", "Gemm")


def cpu_has_vnni() -> bool:
    """Whether this x86 CPU has VNNI (AVX512-VNNI or AVX-VNNI): int8 x int8 dot
    products in one instruction. /proc/cpuinfo's flags; False where unreadable."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return bool({"avx512_vnni", "avx_vnni"} & flags)
    except OSError:
        pass
    return False


def weight_type() -> str:
    """"int8" on a CPU with VNNI, else "uint8": onnxruntime's u8u8 kernels are the
    fast ones on AVX2 without VNNI (benchmarks/int8.py measures both)."""
    return "int8" if cpu_has_vnni() else "uint8"


def _qtype(name: str):
    from onnxruntime.quantization import QuantType
    return {"int8": QuantType.QInt8, "uint8": QuantType.QUInt8}[name]


def _through_files(model, work: str):
    """`model` saved in `work` (external data beside it when large); its path."""
    import onnx
    path = os.path.join(work, "float.onnx")
    large = model.ByteSize() > (1 << 30) if hasattr(model, "ByteSize") else False
    onnx.save_model(model, path, save_as_external_data=large, location="float.onnx.data" if large else None)
    return path, large


def _load(path: str):
    import onnx
    return onnx.load(path)  # external data read back in: the caller writes its own file


def dynamic(model, weights: Optional[str] = None):
    """`model` (a ModelProto) with its constant-weight MatMul/Gemm nodes int8,
    activations quantized at run time. `weights`: "int8" | "uint8" (default:
    weight_type())."""
    from onnxruntime.quantization import quantize_dynamic
    import onnx
    with tempfile.TemporaryDirectory(prefix="bridge-int8-") as work:
        src, large = _through_files(model, work)
        out = os.path.join(work, "int8.onnx")
        # per-channel scales: a transformer's embeddings stay much closer (MiniLM: benchmarks/RESULTS.md)
        quantize_dynamic(src, out, op_types_to_quantize=list(DYNAMIC_OPS), per_channel=True,
                         weight_type=_qtype(weights or weight_type()), use_external_data_format=large,
                         extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT, "MatMulConstBOnly": True})
        return _load(out)


def _constant_weights(src: str, work: str, large: bool) -> str:
    """`src` with what is computed from initializers alone folded into
    initializers (onnxruntime's own pre-processing: its basic graph optimizer):
    a lowered fused op computes its Conv filter from the stored one (a Transpose,
    the BatchNorm fold), and only a constant filter gets per-channel scales."""
    from onnxruntime.quantization.shape_inference import quant_pre_process
    out = os.path.join(work, "folded.onnx")
    quant_pre_process(src, out, skip_symbolic_shape=True, save_as_external_data=large)
    return out


class _Reader:
    """onnxruntime's CalibrationDataReader over a list of feed dicts."""

    def __init__(self, feeds: Sequence[Mapping[str, np.ndarray]], names: Sequence[str]):
        self._items = [{n: np.ascontiguousarray(f[n]) for n in names} for f in feeds]
        self._it = iter(self._items)

    def get_next(self):
        return next(self._it, None)

    def rewind(self):
        self._it = iter(self._items)


def batches(arrays: Mapping[str, np.ndarray], size: int = 1) -> List[Mapping[str, np.ndarray]]:
    """{input: [N, ...]} as feed dicts of `size` samples each (the calibrator's steps)."""
    n = min(int(np.shape(a)[0]) if np.ndim(a) else 1 for a in arrays.values())
    return [{k: v[i:i + size] for k, v in arrays.items()} for i in range(0, n, size)] or [dict(arrays)]


def static(model, feeds: Iterable[Mapping[str, np.ndarray]]):
    """`model` (a ModelProto of standard ops) as QDQ int8: per-channel int8
    weights, uint8 activations whose ranges come from running `feeds` (MinMax)."""
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static
    import onnx
    custom = sorted({n.domain for n in model.graph.node if n.domain not in ("", "ai.onnx")})
    if custom:  # the calibrator's plain session has no kernel for them
        raise ValueError(f"static quantization takes a model of standard ops; this one has nodes of {custom}")
    feeds = list(feeds)
    with tempfile.TemporaryDirectory(prefix="bridge-int8-") as work:
        src, large = _through_files(model, work)
        src = _constant_weights(src, work, large)
        out = os.path.join(work, "int8.onnx")
        names = [i.name for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}]
        quantize_static(src, out, _Reader(feeds, names), quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                        calibrate_method=CalibrationMethod.MinMax, use_external_data_format=large,
                        extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
        return _load(out)


def counts(model) -> Mapping[str, int]:
    """How many nodes of each int8 kind the model holds (its summary line)."""
    kinds = ("MatMulInteger", "DynamicQuantizeLinear", "QuantizeLinear", "DequantizeLinear", "QLinearConv",
             "QLinearMatMul", "ConvInteger")
    got: dict = {}
    for n in model.graph.node:
        if n.op_type in kinds:
            got[n.op_type] = got.get(n.op_type, 0) + 1
    return got
