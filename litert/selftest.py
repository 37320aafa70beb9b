"""The self-test each LiteRT kernel build runs once (litert/runtime.py,
in a subprocess so that an ABI mismatch is a failed test, not a crash): one
FusedLayerNorm node on LiteRT against the numpy reference. Exit 0 and one line
of numbers on success; else the reason on stderr."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np


def main() -> int:
    from bridge import ops
    from bridge.litert import runtime
    from bridge.litert.one_op import one_op_model
    lib = Path(os.environ["BRIDGE_LITERT_SELFTEST_LIB"])
    rng = np.random.default_rng(0)
    gamma, beta = rng.uniform(0.5, 1.5, 5).astype(np.float32), rng.standard_normal(5).astype(np.float32)
    data = one_op_model("FusedLayerNorm", [("x", [-1, 5]), ("gamma", gamma), ("beta", beta)], ["y"],
                        {"T": 0, "epsilon": 1e-5})
    x = rng.standard_normal((3, 5)).astype(np.float32)
    try:
        got = runtime.Model(data, lib=lib).run({"x": x})["y"]
    except runtime.LiteRTError as e:
        print(f"the self-test model did not run: {e}", file=sys.stderr)
        return 1
    ref = ops.get("FusedLayerNorm").reference(x, gamma, beta, epsilon=1e-5)
    err = float(np.max(np.abs(got - ref))) if got.shape == ref.shape else float("inf")
    if not err <= 1e-5:
        print(f"the self-test model gave wrong numbers: max |error| {err}, shape {got.shape} vs {ref.shape}",
              file=sys.stderr)
        return 1
    print(f"FusedLayerNorm [3,5]: max |error| {err:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
