"""The CUDA kernels against the numpy float64 references, op by op and road by
road: on the GPU when PyTorch or CuPy sees one, else on the CPU emulator
(bridge.cuda.emulator()). What `bridge cuda` prints.

Each check takes one row of the op's case table (bridge/ops/<op>.py examples():
odd sizes, empty, large H, large means, SAME with an odd pad), runs one kernel
road at one dtype, and measures the largest error as a fraction of the
allowed one: ops.md's bound for the op and dtype (ten times it for the layer-norm
gradients, sums over rows; TF32's own operand-rounding bound for TF32 products).
A kernel failure is a row too, never an exception.
"""
from __future__ import annotations

from typing import Callable, List, Optional

import numpy as np

from bridge import cuda
from bridge import ops as specs
from bridge.ops.fused_layer_norm import reference_backward
from bridge.ops.yolo_conv_bn_leaky import tf32_error_bound

# The layer-norm gradients' bounds, in multiples of ops.md's forward bound: dgamma
# and dbeta are sums over rows.
BACKWARD_SCALE = {"float32": 10.0, "float16": 2.0}


class Device:
    """numpy <-> the arrays the harness takes: PyTorch or CuPy on a GPU (PyTorch
    first), numpy on the emulator (copied in and out, so a kernel writing out of
    place cannot touch the caller's arrays)."""

    def __init__(self, emulated: bool):
        self.emulated = emulated
        self.torch = self.cupy = None
        if emulated:
            return
        try:
            import torch
            if not torch.cuda.is_available():
                raise ImportError
            self.torch = torch
        except ImportError:
            import cupy
            self.cupy = cupy

    def put(self, a: np.ndarray):
        a = np.ascontiguousarray(a)
        if self.emulated:
            return a.copy()
        if self.torch is not None:
            return self.torch.from_numpy(a).cuda()
        return self.cupy.asarray(a)

    def get(self, a) -> np.ndarray:
        if self.emulated:
            return np.array(a)
        if self.torch is not None:
            return a.cpu().numpy()
        return self.cupy.asnumpy(a)

    def misaligned(self, a: np.ndarray):
        """`a` on the device at an address 1 element past an aligned boundary (the
        allocators' 256 bytes on a GPU, 64 bytes on the emulator)."""
        if self.emulated:
            flat = np.empty(a.size + 64, a.dtype)
            skip = (-flat.ctypes.data % 64) // a.dtype.itemsize + 1
            out = flat[skip: skip + a.size].reshape(a.shape)
            out[...] = a
            return out
        flat = np.concatenate([np.zeros(1, a.dtype), a.ravel()])
        return self.put(flat)[1:].reshape(a.shape)


def _excess(got, want, dtype: str, op: str, scale: float = 1.0) -> float:
    return specs.get(op).tolerance[dtype].excess(got, want) / scale


def _layer_norm(k, dev, rng, example, dtype):
    x, gamma, beta = example.cast(dtype)
    y = dev.get(k.fused_layer_norm(dev.put(x), dev.put(gamma), dev.put(beta), **example.attrs))
    return _excess(y, specs.get("FusedLayerNorm").reference(x, gamma, beta, **example.attrs), dtype, "FusedLayerNorm")


def _layer_norm_backward(k, dev, rng, example, dtype):
    x, gamma, _ = example.cast(dtype)
    dy = rng.normal(size=x.shape).astype(dtype)
    epsilon = specs.get("FusedLayerNorm").resolve(example.attrs)["epsilon"]
    got = [dev.get(a) for a in k.fused_layer_norm_backward(dev.put(dy), dev.put(x), dev.put(gamma), epsilon=epsilon)]
    want = reference_backward(dy, x, gamma, epsilon=epsilon)
    return max(_excess(g, w, dtype, "FusedLayerNorm", scale=BACKWARD_SCALE[dtype]) for g, w in zip(got, want))


def conv_inputs(rng, dtype, xs, fs):
    """x, filter and the five [Cout] parameters for YoloConvBnLeaky: random, with
    |y| near 1 and positive variances."""
    cout = fs[3]
    x = rng.normal(size=xs)
    filt = rng.normal(size=fs) / np.sqrt(max(1, fs[0] * fs[1] * fs[2]))  # keeps |y| near 1
    params = [rng.normal(size=cout) * 0.1, rng.normal(size=cout), rng.normal(size=cout) * 0.1,
              rng.normal(size=cout) * 0.1, rng.uniform(0.5, 2.0, size=cout)]
    return [a.astype(dtype) for a in [x, filt, *params]]


def _conv(road: str):
    def check(k, dev, rng, example, dtype):
        tf32 = dtype == "tf32"
        arrays = list(example.cast("float32" if tf32 else dtype))
        attrs = example.attrs
        y = dev.get(k.yolo_conv_bn_leaky(*(dev.put(a) for a in arrays), allow_tf32=tf32,
                                         tensor_cores=road == "tensor cores", **attrs))
        spec = specs.get("YoloConvBnLeaky")
        want = spec.reference(*arrays, **attrs)
        # TF32: float32's bound plus what rounding the operands to TF32 may cost
        extra = tf32_error_bound(*arrays, **spec.resolve(attrs)) if tf32 else 0.0
        return spec.tolerance["float32" if tf32 else dtype].excess(y, want, extra=extra)
    return check


def _decode(k, dev, rng, example, dtype):
    (raw,) = example.cast(dtype)
    got = [dev.get(o) for o in k.yolo_decode(dev.put(raw), **example.attrs)]
    want = specs.get("YoloDecode").reference(raw, **example.attrs)
    return max(_excess(g, r, dtype, "YoloDecode") for g, r in zip(got, want))


def _shape(example) -> str:
    return f"{example.id} {'x'.join(map(str, example.shapes[0]))}"


# (op, road, dtypes, check): every op, every road, on the op's case table
# (bridge/ops/<op>.py examples(): odd sizes, empty, large H, large means, ...).
CHECKS = [
    ("FusedLayerNorm", "forward", ("float32", "float16"), _layer_norm),
    ("FusedLayerNorm", "backward", ("float32", "float16"), _layer_norm_backward),
    ("YoloConvBnLeaky", "im2col + cuBLASLt", ("float32", "tf32", "float16"), _conv("im2col")),
    ("YoloConvBnLeaky", "tensor cores", ("tf32", "float16"), _conv("tensor cores")),
    ("YoloDecode", "elementwise", ("float32", "float16"), _decode),
]


def _rows_of(op: str, dtype: str):
    """The table's rows meant for `dtype` (TF32 takes the float32 rows)."""
    want = "float32" if dtype == "tf32" else dtype
    return [e for e in specs.get(op).examples() if want in e.dtypes]


def run_checks(k: cuda.Harness, dev: Device, seed: int = 0,
               progress: Optional[Callable[[str], None]] = None) -> List[dict]:
    """One row per (op, road, dtype, shape): the largest error / allowed, and a
    verdict ("pass", "FAIL", or "error: ..." when the kernel refused or failed)."""
    rows = []
    for op, road, dtypes, check in CHECKS:
        for dtype in dtypes:
            for example in _rows_of(op, dtype):
                rng = np.random.default_rng(seed + len(rows))
                if progress:
                    progress(f"{op} {road} {dtype} {_shape(example)}")
                row = {"op": op, "road": road, "dtype": dtype, "shape": _shape(example)}
                try:
                    excess = float(check(k, dev, rng, example, dtype))
                    row.update(excess=excess, verdict="pass" if excess <= 1.0 else "FAIL")
                except Exception as e:  # a refusal or a failed launch is a finding, reported in the row
                    row.update(excess=None, verdict=f"error: {str(e).splitlines()[0][:160]}")
                rows.append(row)
    return rows


def choose(emulate: bool):
    """(harness, device, where): the GPU's when one is here and `emulate` is not
    asked for, else the CPU emulator's."""
    if not emulate:
        ok, what = cuda.gpu_status()
        if ok:
            return cuda.harness(), Device(emulated=False), what
    return cuda.emulator(), Device(emulated=True), "the CPU emulator (no GPU timing; kernels as the GPU runs them)"
