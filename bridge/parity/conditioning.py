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
than the runtime it judges. `bridge parity` therefore judges every runtime
against the model run in float64 (bridge.parity.truth, which gives PASS or
FAIL with FLOAT64_FACTOR below). `against_float64` is the older, coarser rule
that `bridge export`'s own check still applies to an output that failed
against TF float32: the export is excused, as ILL_CONDITIONED, when it is as
close to float64 as TF float32 is (within FLOAT64_FACTOR times TF float32's
own error, in the worst element against its bound and on average), or within
the tolerance of float64 where TF float32 is. A NaN, or a result clearly
worse than TF float32, still fails.
"""
from __future__ import annotations

import numpy as np

# a row sums to 1 within this: a softmax (or any probability vector)
SUM_TOLERANCE = 1e-3

# the status of a comparison excused by one of the rules here: not a pass, not a FAIL
ILL_CONDITIONED = "ill-conditioned"

# a runtime may be this many times further from float64 than TF float32 is: float32 runs of one
# ill-conditioned model land at similar distances, by luck within a few times (ResNet50 with 4-sample
# BN statistics, TF float32 1.5e-3 from float64: onnxruntime 1.2x that, TFLite 1.9x, onnx's reference
# evaluator 2.5x); a 1% error where TF is 3e-4 away is ~30x, and fails
FLOAT64_FACTOR = 3.0


def against_float64(runtime: str, got_vs_f64, tf_vs_f64) -> "tuple[bool, str]":
    """(excused, note) for a runtime's output that failed against TF float32.
    Both arguments are bridge.parity.compare.Comparison results against the
    float64 answer under the output's own tolerance: the runtime's, and TF
    float32's."""
    g, t = got_vs_f64, tf_vs_f64
    if g.nonfinite or not np.isfinite(g.excess) or not np.isfinite(g.mean_abs_error):
        what = "is not finite where float64 is" if g.nonfinite else "cannot be compared with float64"
        return False, f"{runtime} {what} ({g.note or 'NaN/Inf'})"
    if t.nonfinite or not np.isfinite(t.excess) or not np.isfinite(t.mean_abs_error):
        return False, "TF float32 is not finite where float64 is: no float64 verdict"
    if t.passed:  # TF float32 is right within the tolerance: so must the runtime be
        if g.passed:
            return True, (f"{ILL_CONDITIONED}: TF float32 is {t.max_abs_error:.2g} from float64 and {runtime} "
                          f"{g.max_abs_error:.2g}, each within the tolerance of float64")
        return False, (f"{runtime} is {g.max_abs_error:.2g} from float64 ({g.excess:.3g}x allowed) where TF float32 "
                       f"is within the tolerance ({t.max_abs_error:.2g}): a real mismatch")
    worst, mean = g.excess / t.excess, g.mean_abs_error / max(t.mean_abs_error, np.finfo(np.float64).tiny)
    if worst <= FLOAT64_FACTOR and mean <= FLOAT64_FACTOR:
        return True, (f"{ILL_CONDITIONED}: TF float32 itself is {t.max_abs_error:.2g} from float64 "
                      f"({t.excess:.3g}x allowed); {runtime} {g.max_abs_error:.2g} ({worst:.2g}x TF's worst, "
                      f"{mean:.2g}x its mean): float32 cannot resolve this output, compare the layers")
    return False, (f"{runtime} is {g.max_abs_error:.2g} from float64, {max(worst, mean):.2g}x as far as TF float32 "
                   f"({t.max_abs_error:.2g}; at most {FLOAT64_FACTOR:g}x is rounding): a real mismatch")


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
