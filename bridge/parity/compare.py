"""One output of one runtime against the reference: the numbers and the verdict.

The rule (also in `bridge parity --help`): an element fails only when its error
exceeds BOTH the absolute bound and the relative bound,

    |got - ref| > atol_eff   and   |got - ref| > rtol * |ref|,
    atol_eff = atol * max(1, max|ref|)

so the absolute bound scales with the output's magnitude, as ops.md scales its
per-op tolerances by max(1, |y|); whole models accumulate error through many
layers, hence looser defaults than the per-op ones. Defaults per dtype are in
`DEFAULTS`. NaN in the result always fails; Inf fails unless the reference has
the same Inf at that place. Integer and bool outputs must match exactly.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Dict, Mapping, Optional, Tuple

import numpy as np

# dtype name -> (atol, rtol); atol is scaled by max(1, max|ref|)
DEFAULTS: Dict[str, Tuple[float, float]] = {
    "float64": (1e-4, 1e-4),
    "float32": (1e-4, 1e-4),
    "float16": (1e-2, 1e-2),
    "bfloat16": (5e-2, 5e-2),
}


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float

    @classmethod
    def for_dtype(cls, dtype) -> "Tolerance":
        name = np.dtype(dtype).name if not isinstance(dtype, str) else dtype
        if name in DEFAULTS:
            return cls(*DEFAULTS[name])
        return cls(0.0, 0.0)  # integers, bools: exact

    def with_overrides(self, atol: Optional[float] = None, rtol: Optional[float] = None) -> "Tolerance":
        return Tolerance(self.atol if atol is None else atol, self.rtol if rtol is None else rtol)


@dataclass
class Comparison:
    """Every number `bridge parity` reports for one (runtime, output) pair."""

    passed: bool
    shape: Tuple[int, ...]
    dtype: str
    atol: float                 # the configured atol (before scaling)
    rtol: float
    atol_effective: float       # atol * max(1, max|ref|)
    max_abs_error: float
    max_rel_error: float        # max over elements of |got-ref| / |ref| (elements with ref != 0)
    mean_abs_error: float
    cosine: float
    worst_index: Optional[Tuple[int, ...]]
    worst_got: Optional[float]
    worst_ref: Optional[float]
    failing: int                # number of elements beyond both bounds
    nonfinite: int              # NaN/Inf in the result where the reference is finite (or NaN anywhere)
    note: str = ""

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
    return Comparison(False, tuple(ref.shape), ref.dtype.name, tol.atol, tol.rtol, float("nan"), float("nan"),
                      float("nan"), float("nan"), float("nan"), None, None, None, int(ref.size), 0, reason)


def compare(got, ref, tol: Optional[Tolerance] = None) -> Comparison:
    """Compares `got` with the reference `ref` under `tol` (default: by ref's dtype)."""
    ref = np.asarray(ref)
    got = np.asarray(got)
    tol = tol or Tolerance.for_dtype(ref.dtype)
    if got.shape != ref.shape:
        if got.size == ref.size and got.squeeze().shape == ref.squeeze().shape:
            got = got.reshape(ref.shape)  # a runtime that drops/keeps a size-1 dim is not a numeric fault
        else:
            return mismatch(f"shape {list(got.shape)} != reference {list(ref.shape)}", got, ref, tol)
    if got.size == 0:
        return Comparison(True, tuple(ref.shape), ref.dtype.name, tol.atol, tol.rtol, tol.atol, 0.0, 0.0, 0.0, 1.0,
                          None, None, None, 0, 0, "empty")
    g = got.astype(np.float64)
    r = ref.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        all_finite = np.isfinite(g.sum()) and np.isfinite(r.sum())
    if all_finite:  # no NaN/Inf anywhere (the common case): fewer passes
        return _compare_finite(g, r, ref, tol)
    ref_finite = np.isfinite(r)
    same_inf = np.isinf(g) & np.isinf(r) & (np.sign(g) == np.sign(r))
    bad_nonfinite = (~np.isfinite(g) & ~same_inf) | np.isnan(g)
    finite = np.isfinite(g) & ref_finite
    scale = float(np.max(np.abs(r[ref_finite]))) if ref_finite.any() else 0.0
    atol_eff = tol.atol * max(1.0, scale)

    err = np.zeros_like(r)
    err[finite] = np.abs(g[finite] - r[finite])
    absref = np.where(ref_finite, np.abs(r), 0.0)
    beyond = finite & (err > atol_eff) & (err > tol.rtol * absref)
    if tol.atol == 0 and tol.rtol == 0:
        beyond = finite & (err > 0)
    fail_mask = beyond | bad_nonfinite
    # how far each element is beyond what it is allowed: picks the worst element
    allowed = np.maximum(atol_eff, tol.rtol * absref)
    with np.errstate(divide="ignore", invalid="ignore"):
        excess = np.where(allowed > 0, err / np.where(allowed > 0, allowed, 1.0), np.where(err > 0, np.inf, 0.0))
    excess = np.where(bad_nonfinite, np.inf, excess)
    worst = np.unravel_index(int(np.argmax(excess)), r.shape) if r.ndim else ()
    nz = finite & (absref > 0)
    max_rel = float(np.max(err[nz] / absref[nz])) if nz.any() else 0.0
    return Comparison(
        passed=not bool(fail_mask.any()),
        shape=tuple(ref.shape), dtype=ref.dtype.name, atol=tol.atol, rtol=tol.rtol, atol_effective=atol_eff,
        max_abs_error=float(err[finite].max()) if finite.any() else float("nan"),
        max_rel_error=max_rel,
        mean_abs_error=float(err[finite].mean()) if finite.any() else float("nan"),
        cosine=_cosine(g, r, finite),
        worst_index=tuple(int(i) for i in worst), worst_got=float(g[worst]), worst_ref=float(r[worst]),
        failing=int(fail_mask.sum()), nonfinite=int(bad_nonfinite.sum()),
        note=f"{int(bad_nonfinite.sum())} NaN/Inf" if bad_nonfinite.any() else "")


def _compare_finite(g: np.ndarray, r: np.ndarray, ref: np.ndarray, tol: Tolerance) -> Comparison:
    """`compare` when both sides are finite everywhere: the same numbers in about
    half the passes over the data (per-layer runs compare a few hundred MB per
    runtime). An element fails when err > max(atol_eff, rtol*|ref|), which is
    the rule's "beyond both bounds"."""
    err = np.abs(g - r)
    absref = np.abs(r)
    atol_eff = tol.atol * max(1.0, float(absref.max()))
    allowed = np.maximum(absref * tol.rtol, atol_eff)
    failing = int(np.count_nonzero(err > allowed))
    with np.errstate(divide="ignore", invalid="ignore"):
        if atol_eff > 0:
            excess = err / allowed
        else:  # allowed is 0 where ref is 0: any error there is infinitely beyond
            excess = np.where(allowed > 0, err / np.where(allowed > 0, allowed, 1.0), np.where(err > 0, np.inf, 0.0))
        rel = err / absref
    worst = np.unravel_index(int(np.argmax(excess)), r.shape) if r.ndim else ()
    nz = absref > 0
    max_rel = float(rel[nz].max()) if nz.any() else 0.0
    return Comparison(
        passed=failing == 0,
        shape=tuple(ref.shape), dtype=ref.dtype.name, atol=tol.atol, rtol=tol.rtol, atol_effective=atol_eff,
        max_abs_error=float(err.max()), max_rel_error=max_rel, mean_abs_error=float(err.mean()),
        cosine=_cosine(g, r, None),
        worst_index=tuple(int(i) for i in worst), worst_got=float(g[worst]), worst_ref=float(r[worst]),
        failing=failing, nonfinite=0, note="")


def _cosine(g: np.ndarray, r: np.ndarray, finite: Optional[np.ndarray]) -> float:
    """`finite` None: known to be finite everywhere."""
    if finite is not None and not finite.all():
        return float("nan")
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
    tol = Tolerance(*runtime[name]) if runtime and name in runtime else Tolerance.for_dtype(dtype)
    tol = tol.with_overrides(atol.get(""), rtol.get(""))
    return tol.with_overrides(atol.get(output), rtol.get(output))
