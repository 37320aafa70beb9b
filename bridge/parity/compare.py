"""One output of one runtime against the reference: the numbers and the verdict.

The rule (ops.md, also in `bridge parity --help`), element by element: element i
passes when

    |got[i] - ref[i]| <= max(atol * max(1, |ref[i]|), rtol * |ref[i]|)

never scaled by the largest value of the whole output, so a 2 px box is held to
its own size, not to the largest box's. Whole models accumulate error through
many layers, hence looser defaults than the per-op ones (`DEFAULTS`, per dtype).
A NaN or Inf on either side fails unless both sides hold the same one at that
place (bridge.ops.nonfinite); the note then says so. Integer and bool outputs
must match exactly.

A third verdict besides pass and FAIL: `status` "ill-conditioned" (counted
apart from both) where the difference does not measure the export
(bridge.parity.conditioning: a saturated softmax whose arg-max flips; a
runtime as close to the float64 answer as TF float32 itself).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Dict, Mapping, Optional, Tuple

import numpy as np

from bridge.ops import nonfinite
from bridge.ops.spec import Tolerance  # one tolerance for ops and whole models: the rule above

# dtype name -> (atol, rtol), element by element (see the rule above)
DEFAULTS: Dict[str, Tuple[float, float]] = {
    "float64": (1e-4, 1e-4),
    "float32": (1e-4, 1e-4),
    "float16": (1e-2, 1e-2),
    "bfloat16": (5e-2, 5e-2),
}


def default_tolerance(dtype) -> Tolerance:
    """A whole-model output's tolerance by its dtype (`DEFAULTS`)."""
    name = np.dtype(dtype).name if not isinstance(dtype, str) else dtype
    if name in DEFAULTS:
        return Tolerance(*DEFAULTS[name])
    return Tolerance(0.0, 0.0)  # integers, bools: exact


@dataclass
class Comparison:
    """Every number `bridge parity` reports for one (runtime, output) pair. The
    error statistics cover the elements finite on both sides."""

    passed: bool
    shape: Tuple[int, ...]
    dtype: str
    atol: float
    rtol: float
    excess: float               # max over elements of |got-ref| / allowed; <= 1 passes (inf: a NaN/Inf mismatch)
    allowed: float              # the error allowed at the worst element, max(atol*max(1,|ref|), rtol*|ref|)
    max_abs_error: float
    max_rel_error: float        # max over elements of |got-ref| / |ref| (elements with ref != 0)
    mean_abs_error: float
    cosine: float
    worst_index: Optional[Tuple[int, ...]]  # the element furthest beyond its bound (the first NaN/Inf mismatch)
    worst_got: Optional[float]
    worst_ref: Optional[float]
    failing: int                # elements beyond their bound, NaN/Inf mismatches included
    nonfinite: int              # NaN/Inf mismatches (non-finite on one side, or different non-finite values)
    nonfinite_side: str = ""    # where the first mismatch is non-finite: result | reference | both
    note: str = ""
    status: str = ""            # pass | FAIL | ill-conditioned (not judged by the tolerance; the note says why)

    def __post_init__(self):
        if not self.status:
            self.status = "pass" if self.passed else "FAIL"

    def to_json(self) -> dict:
        d = asdict(self)
        d["shape"] = list(self.shape)
        d["worst_index"] = None if self.worst_index is None else list(self.worst_index)
        return {k: _json_number(v) for k, v in d.items()}


def _json_number(v):
    if isinstance(v, float) and not np.isfinite(v):
        return None if v != v else ("inf" if v > 0 else "-inf")
    return v


def mismatch(reason: str, got, ref, tol: Tolerance) -> Comparison:
    ref = np.asarray(ref)
    nan = float("nan")
    return Comparison(False, tuple(ref.shape), ref.dtype.name, tol.atol, tol.rtol, float("inf"), nan, nan, nan, nan,
                      nan, None, None, None, int(ref.size), 0, "", reason)


def compare(got, ref, tol: Optional[Tolerance] = None) -> Comparison:
    """Compares `got` with the reference `ref` under `tol` (default: by ref's dtype)."""
    ref = np.asarray(ref)
    got = np.asarray(got)
    tol = tol or default_tolerance(ref.dtype)
    if got.shape != ref.shape:
        if got.size == ref.size and got.squeeze().shape == ref.squeeze().shape:
            got = got.reshape(ref.shape)  # a runtime that drops/keeps a size-1 dim is not a numeric fault
        else:
            return mismatch(f"shape {list(got.shape)} != reference {list(ref.shape)}", got, ref, tol)
    if got.size == 0:
        return Comparison(True, tuple(ref.shape), ref.dtype.name, tol.atol, tol.rtol, 0.0, tol.atol, 0.0, 0.0, 0.0,
                          1.0, None, None, None, 0, 0, "", "empty")
    g = got.astype(np.float64)
    r = ref.astype(np.float64)
    bad = nonfinite.check(g, r)
    finite = None if bad is None else ~(bad.matched | bad.unmatched).ravel()
    g, r = g.ravel(), r.ravel()  # flat: numpy keeps 0-d results as scalars, which `out=` refuses
    if finite is not None:  # the statistics cover what is finite on both sides
        g, r = np.where(finite, g, 0.0), np.where(finite, r, 0.0)
    err = g - r
    np.abs(err, out=err)
    absref = np.abs(r)
    # max(atol * max(1, |ref|), rtol * |ref|) == max(atol, max(atol, rtol) * |ref|): one buffer
    slope = max(tol.atol, tol.rtol)
    excess = np.maximum(absref * slope, tol.atol)
    with np.errstate(divide="ignore", invalid="ignore"):
        np.divide(err, excess, out=excess)  # allowed is 0 only where exactness is asked: err/0 -> inf, 0/0 -> nan
    excess[err == 0] = 0.0
    failing = int(np.count_nonzero(excess > 1))
    if bad is not None:
        excess[bad.unmatched.ravel()] = np.inf
        failing += int(bad.unmatched.sum())
    flat = int(np.argmax(excess))
    worst = np.unravel_index(flat, ref.shape)
    nz = absref > 0
    max_rel = float(np.max(err[nz] / absref[nz])) if nz.any() else 0.0
    n_finite = err.size if finite is None else int(finite.sum())
    note, status = (bad.describe(), "") if bad is not None else _conditioning(got, ref, tol) if failing else ("", "")
    return Comparison(
        passed=failing == 0 or bool(status),
        shape=tuple(ref.shape), dtype=ref.dtype.name, atol=tol.atol, rtol=tol.rtol,
        excess=float(excess[flat]), allowed=max(tol.atol, slope * float(absref[flat])),
        max_abs_error=float(err.max()) if n_finite else float("nan"),
        max_rel_error=max_rel,
        mean_abs_error=float(err.sum() / n_finite) if n_finite else float("nan"),
        cosine=_cosine(g, r) if n_finite else float("nan"),
        worst_index=tuple(int(i) for i in worst), worst_got=float(got[worst]), worst_ref=float(ref[worst]),
        failing=failing, nonfinite=0 if bad is None else int(bad.unmatched.sum()),
        nonfinite_side="" if bad is None else bad.side,
        note=note, status=status)


def _conditioning(got, ref, tol) -> Tuple[str, str]:
    """(note, status) of a failing comparison: ("", "") for a plain mismatch."""
    from bridge.parity.conditioning import ILL_CONDITIONED, explain
    note = explain(got, ref, tol.atol)
    return note, ILL_CONDITIONED if note else ""


def _cosine(g: np.ndarray, r: np.ndarray) -> float:
    a, b = g.ravel(), r.ravel()
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na == 0 and nb == 0:
        return 1.0
    if na == 0 or nb == 0:
        return 0.0
    return float(np.dot(a, b) / (na * nb))


def resolve_tolerance(output: str, dtype, atol: Mapping[str, float], rtol: Mapping[str, float],
                      runtime: Optional[Mapping[str, Tuple[float, float]]] = None) -> Tolerance:
    """The tolerance of one output: dtype default (or the runtime's own default
    for that dtype), then a global override (key ""), then a per-output override
    (key = output name)."""
    name = np.dtype(dtype).name
    tol = Tolerance(*runtime[name]) if runtime and name in runtime else default_tolerance(dtype)
    tol = tol.with_overrides(atol.get(""), rtol.get(""))
    return tol.with_overrides(atol.get(output), rtol.get(output))
