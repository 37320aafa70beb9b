"""Shared test helpers. Every numeric check compares against the numpy float64
reference of bridge.ops (or another independent library), never a backend
against itself alone."""
from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from bridge import ops as specs  # noqa: E402


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def assert_close(op: str, got, ref, dtype="float32", scale: float = 1.0, what: str = ""):
    """Asserts ops.md's tolerance for `op` at `dtype` (times `scale`): element by
    element |got - ref| <= atol * max(1, |ref|). NaN or Inf in `got` fails."""
    spec = specs.get(op)
    tol = spec.tolerance[np.dtype(dtype).name]
    got = np.asarray(got)
    ref = np.asarray(ref)
    assert got.shape == ref.shape, f"{op} {what}: shape {got.shape} != reference {ref.shape}"
    assert np.all(np.isfinite(got)), f"{op} {what}: non-finite values in the output"
    excess = tol.excess(got, ref) / scale
    if excess > 1:
        diff = np.abs(got.astype(np.float64) - ref)
        i = np.unravel_index(np.argmax(diff), diff.shape)
        raise AssertionError(f"{op} {what} ({dtype}): error {diff[i]:.3g} at {i} (got {got[i]!r}, "
                             f"ref {ref[i]!r}) exceeds {tol.atol * scale:g} * max(1, |ref|) by {excess:.2f}x")


@pytest.fixture
def close():
    return assert_close
