"""Outputs whose comparison does not measure the export: a softmax saturated to
one-hot whose arg-max is decided by less than the logits' rounding, and a
model whose float32 answer is itself far from its float64 one.

With random weights (or a confident real model) a softmax over large logits is
one-hot: two runtimes whose logits differ by float rounding can pick different
classes when the two largest logits are almost equal, and the probabilities
then differ by ~1 although every layer agrees. Such a difference says nothing
about the export; the logits (the layer before the activation) do.
`explain` says so, for a comparison that failed, so the row points at the
logits and the per-layer run instead of reading as a plain mismatch.

A deep network can amplify float32 rounding past the tolerance (random
weights, a badly calibrated BatchNorm): TF float32 is then no better an answer
than the runtime it judges. `bridge parity` and `bridge export`'s own check
therefore judge against the model run in float64 (bridge.parity.truth, which
gives PASS or FAIL with FLOAT64_FACTOR below).
"""
from __future__ import annotations

import numpy as np

# a row sums to 1 within this: a softmax (or any probability vector)
SUM_TOLERANCE = 1e-3

# the status of a comparison excused by the softmax rule here: not a pass, not a FAIL
ILL_CONDITIONED = "ill-conditioned"

# a runtime may be this many times further from float64 than TF float32 is: float32 runs of an
# ill-conditioned model land within a few times of each other, a real bug tens of times (RESULTS.md)
FLOAT64_FACTOR = 3.0


def explain(got, ref, atol: float) -> str:
    """'' when `ref` is well-conditioned where `got` differs from it, else one
    line: which kind of output, how many rows are saturated or decided by less
    than `atol`, and what to compare instead."""
    ref = np.asarray(ref, dtype=np.float64)
    got = np.asarray(got, dtype=np.float64)
    if ref.shape != got.shape or ref.size < 2 or not np.all(np.isfinite(ref)):
        return ""
    if ref.min() < 0 or ref.max() > 1:
        return ""
    bad = np.abs(got - ref) > atol * np.maximum(1.0, np.abs(ref))
    if not bad.any():
        return ""
    if ref.ndim >= 1 and ref.shape[-1] > 1 and np.all(np.abs(ref.sum(axis=-1) - 1.0) <= SUM_TOLERANCE):
        return _softmax(got, ref, bad, atol)
    # a saturated sigmoid is not one: near 0 and 1 it flattens logit differences, so a difference
    # above the tolerance there means the logits differ a lot (a real mismatch)
    return ""


def _softmax(got, ref, bad, atol) -> str:
    """Rows where both sides are one-hot (saturated) on different classes: the
    two largest logits were within rounding of each other at their magnitude.
    Any other failing row is a real mismatch."""
    n = ref.shape[-1]
    rows_ref, rows_got = ref.reshape(-1, n), got.reshape(-1, n)
    failing = bad.reshape(-1, n).any(axis=1)
    saturated = (rows_ref.max(axis=1) >= 1.0 - atol) & (rows_got.max(axis=1) >= 1.0 - atol)
    # (both one-hot: every other class is within atol of 0 on both sides, so only the two tops can differ)
    ill = failing & saturated & (np.argmax(rows_ref, axis=1) != np.argmax(rows_got, axis=1))
    if not ill.any() or ill.sum() < failing.sum():
        return ""
    return (f"ill-conditioned: a softmax-like output (rows sum to 1) saturated to one-hot, whose arg-max "
            f"differs in {int(ill.sum())} of {len(rows_ref)} rows: the two largest logits are within rounding "
            f"of each other at their magnitude. Compare the logits instead (bridge parity --per-layer shows the "
            f"layer before the softmax)")
