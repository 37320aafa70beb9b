"""bridge parity on ill-conditioned outputs: a saturated softmax whose arg-max
flips between runtimes is named as such (and still fails), a real mismatch of
a probability output is not excused."""
from __future__ import annotations

import numpy as np
import pytest

from bridge.parity.compare import compare, default_tolerance
from bridge.parity.conditioning import explain


def _softmax(z):
    z = np.asarray(z, np.float64)
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)


TOL = default_tolerance(np.float32)


@pytest.mark.parametrize("classes", [2, 7, 1000])
def test_saturated_softmax_whose_argmax_flips(classes, rng):
    logits = rng.standard_normal((3, classes))
    logits[:, 0] = 1e4
    logits[:, 1] = 1e4 + 16.0          # one-hot at class 1 ...
    flipped = logits.copy()
    flipped[:, 1] = 1e4 - 16.0         # ... at class 0 after a 3e-3 relative error in one logit
    c = compare(_softmax(flipped), _softmax(logits), TOL)
    assert not c.passed                 # still a failure: the note says what it means
    assert c.note.startswith("ill-conditioned: a softmax-like output") and "differs in 3 of 3 rows" in c.note


def test_unsaturated_flip_is_a_mismatch():
    ref = np.array([[0.3, 0.7, 0.0]], np.float32)
    got = np.array([[0.7, 0.3, 0.0]], np.float32)
    assert explain(got, ref, 1e-4) == ""


def test_flip_to_an_unsaturated_row_is_a_mismatch():
    ref = np.array([[0.0, 1.0, 0.0]], np.float32)
    got = np.array([[0.999, 0.0, 0.001]], np.float32)   # not one-hot: its logits are not within rounding
    assert explain(got, ref, 1e-4) == ""
    got[0] = [1.0, 0.0, 0.0]
    assert explain(got, ref, 1e-4).startswith("ill-conditioned")


@pytest.mark.parametrize("case", ["wrong class", "one ill row, one wrong row", "not probabilities", "passes"])
def test_real_mismatches_are_not_excused(case, rng):
    logits = rng.standard_normal((2, 5)) * 2
    ref = _softmax(logits)
    if case == "wrong class":
        got = ref[:, ::-1].copy()
    elif case == "one ill row, one wrong row":
        logits[0, :2] = [1e4, 1e4 + 16]
        ref = _softmax(logits)
        got = ref.copy()
        got[0, :2] = ref[0, 1::-1]     # ill-conditioned
        got[1] = ref[1, ::-1]          # wrong
    elif case == "not probabilities":
        ref = logits.astype(np.float32)
        got = ref + 1.0
    else:
        got = ref.copy()
    c = compare(got, ref, TOL)
    assert c.passed == (case == "passes")
    assert "ill-conditioned" not in c.note
