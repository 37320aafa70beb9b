"""The CUDA kernels against the numpy float64 references, op by op and road by
road: on the GPU when PyTorch or CuPy sees one, else on the CPU emulator
(bridge.cuda.emulator()). What `bridge cuda` prints.

Each check takes one row of the op's case table (bridge/ops/<op>.py examples():
odd sizes, empty, large H, large means, SAME with an odd pad), runs one kernel
road at one dtype, and measures the largest error as a fraction of the
allowed one (docs/ops.md's bound for the op and dtype, or a bound the op's check
derives from it). A kernel failure is a row too, never an exception. The roads
are the ops' own: CHECKS in each op's companion (bridge/ops/<op>/cuda_harness.py).
"""
from __future__ import annotations

from typing import Callable, List, Optional

import numpy as np

from bridge import cuda
from bridge import ops as specs


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


def _shape(example) -> str:
    return f"{example.id} {'x'.join(map(str, example.shapes[0]))}"


def checks() -> List[tuple]:
    """(op, road, dtypes, check): every road of every op with CUDA kernels, from
    the ops' companions, on the op's case table."""
    return [(c.spec.name, road, tuple(dtypes), check) for c in cuda.companions() for road, dtypes, check in c.checks]


def __getattr__(name: str):
    if name == "CHECKS":  # looked up when asked: a spec loaded later counts too
        return checks()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _rows_of(op: str, dtype: str):
    """The table's rows meant for `dtype` (TF32 takes the float32 rows)."""
    want = "float32" if dtype == "tf32" else dtype
    return [e for e in specs.get(op).examples() if want in e.dtypes]


def run_checks(k: cuda.Harness, dev: Device, seed: int = 0,
               progress: Optional[Callable[[str], None]] = None) -> List[dict]:
    """One row per (op, road, dtype, shape): the largest error / allowed, and a
    verdict ("pass", "FAIL", or "error: ..." when the kernel refused or failed)."""
    rows = []
    for op, road, dtypes, check in checks():
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
