"""NaN and Inf in a comparison (docs/ops.md): a non-finite value on either side fails,
unless both sides hold the same non-finite value at that place. Shared by the
spec tolerances, the test helpers and `bridge parity`, so all three judge alike."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np


@dataclass(frozen=True)
class NonFinite:
    """The non-finite places of one (result, reference) pair."""

    matched: np.ndarray          # bool, ref's shape: the same NaN/Inf on both sides
    unmatched: np.ndarray        # bool: non-finite on one side, or different non-finite values
    index: Optional[Tuple[int, ...]]   # the first unmatched element (C order), None when all match
    side: str                    # where that element is non-finite: "result", "reference" or "both"
    got: float                   # the two values there (NaN when there is none)
    ref: float

    @property
    def failed(self) -> bool:
        return self.index is not None

    def describe(self) -> str:
        """One line for a table row or an assertion."""
        if not self.failed:
            n = int(self.matched.sum())
            return f"{n} NaN/Inf on both sides at the same places"
        value = self.ref if self.side == "reference" else self.got
        where = "in both (different values)" if self.side == "both" else f"in the {self.side}"
        return (f"{_name(value)} at [{','.join(map(str, self.index))}] {where} "
                f"(got {self.got:g}, ref {self.ref:g}; {int(self.unmatched.sum())} non-finite mismatches)")


def _name(v: float) -> str:
    return "NaN" if v != v else "Inf" if v > 0 else "-Inf"


def check(got: np.ndarray, ref: np.ndarray) -> Optional[NonFinite]:
    """None when both sides are finite everywhere (the common case, one cheap pass
    each); otherwise where they are not. `got` and `ref`: float arrays, one shape."""
    with np.errstate(invalid="ignore", over="ignore"):
        if np.isfinite(np.sum(got)) and np.isfinite(np.sum(ref)):
            return None
    bad_g, bad_r = ~np.isfinite(got), ~np.isfinite(ref)
    if not (bad_g.any() or bad_r.any()):  # the sums overflowed, the values did not
        return None
    same = bad_g & bad_r & ((got == ref) | (np.isnan(got) & np.isnan(ref)))
    unmatched = (bad_g | bad_r) & ~same
    if not unmatched.any():
        return NonFinite(same, unmatched, None, "", float("nan"), float("nan"))
    first = np.unravel_index(int(np.argmax(unmatched)), unmatched.shape) if unmatched.ndim else ()
    side = "both" if bad_g[first] and bad_r[first] else "result" if bad_g[first] else "reference"
    return NonFinite(same, unmatched, tuple(int(i) for i in first), side, float(got[first]), float(ref[first]))
