"""`bridge.check_cuda(...)`: what `bridge cuda` does, as a function: every CUDA
kernel road of every op against the numpy references, on the GPU when PyTorch
or CuPy sees one, else on the CPU emulator."""
from __future__ import annotations

from typing import Any, Dict

from bridge.api.progress import ProgressArg, sink


def check_cuda(emulate: bool = False, seed: int = 0, progress: ProgressArg = False) -> Dict[str, Any]:
    """{"device": where it ran, "emulated": bool, "rows": [{op, road, dtype, shape,
    excess (error / allowed), verdict}], "failed": count} (`bridge cuda --json`).
    `emulate` runs on the CPU emulator even with a GPU here. Raises BuildError
    when the kernels cannot be built (nvcc, or the CUDA headers, missing)."""
    from bridge import cuda_check as checks
    lines = sink(progress)
    k, dev, where = checks.choose(emulate)
    if lines is not None:
        lines(f"bridge cuda: on {where}")
    rows = checks.run_checks(k, dev, seed=seed, progress=None if lines is None else (lambda what: lines(f"  {what}")))
    return {"device": where, "emulated": dev.emulated, "rows": rows,
            "failed": sum(1 for r in rows if r["verdict"] != "pass")}
