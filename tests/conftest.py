"""Shared test helpers. Every numeric check compares against the numpy float64
reference of bridge.ops (or another independent library), never a backend
against itself alone."""
from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from bridge import ops as specs  # noqa: E402
from bridge.ops import nonfinite  # noqa: E402


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def assert_close(op: str, got, ref, dtype="float32", scale: float = 1.0, what: str = ""):
    """Asserts ops.md's tolerance for `op` at `dtype` (times `scale`): element by
    element |got - ref| <= atol * max(1, |ref|). A NaN or Inf on either side fails
    unless both sides hold the same one at that place (bridge.ops.nonfinite)."""
    spec = specs.get(op)
    tol = spec.tolerance[np.dtype(dtype).name]
    got = np.asarray(got)
    ref = np.asarray(ref)
    assert got.shape == ref.shape, f"{op} {what}: shape {got.shape} != reference {ref.shape}"
    g, r = got.astype(np.float64), ref.astype(np.float64)
    bad = nonfinite.check(g, r)
    assert bad is None or not bad.failed, f"{op} {what} ({dtype}): {bad.describe()}"
    excess = tol.excess(got, ref) / scale
    if excess > 1:
        with np.errstate(invalid="ignore"):
            ratio = np.abs(g - r) / np.maximum(1.0, np.abs(r))
        if bad is not None:
            ratio = np.where(bad.matched, 0.0, ratio)
        i = np.unravel_index(np.argmax(ratio), ratio.shape)
        raise AssertionError(f"{op} {what} ({dtype}): error {abs(g[i] - r[i]):.3g} at {i} (got {got[i]!r}, "
                             f"ref {ref[i]!r}) exceeds {tol.atol * scale:g} * max(1, |ref|) by {excess:.2f}x")


@pytest.fixture
def close():
    return assert_close
