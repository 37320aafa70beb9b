"""One output of one runtime against the reference: the numbers and the verdict.

The rule (docs/ops.md, also in `bridge parity --help`), element by element: element i
passes when

    |got[i] - ref[i]| <= max(atol * max(1, |ref[i]|), rtol * |ref[i]|)

never scaled by the largest value of the whole output, so a 2 px box is held to
its own size, not to the largest box's. Whole models accumulate error through
many layers, hence looser defaults than the per-op ones (`DEFAULTS`, per dtype).
A NaN or Inf on either side fails unless both sides hold the same one at that
place (bridge.ops.nonfinite); the note then says so. Integer and bool outputs
must match exactly.

`floor` = (cap, per) widens the bound, never below the rule above: element i
then passes when its error is within max(the bound, min(cap, per * max(1,
|ref[i]|))), where the caller derives both from how far TF float32 itself is
from the float64 answer (bridge.parity.truth): its largest error, and its
largest error as a fraction of each element's own magnitude. Neither is a
fraction of the output's largest value.

A third verdict besides pass and FAIL: `status` "ill-conditioned" (counted
apart from both) where the difference does not measure the export and no
float64 run decides it (bridge.parity.conditioning: a saturated softmax whose
arg-max flips).

The numbers beside the verdict are the ones Polygraphy and Ascend's msit
report (their names in bridge.parity.csv): cosine similarity, RMSE, max
absolute and relative error, mean relative error, relative Euclidean distance,
quantiles of the absolute error, and how many elements are past the bound.
Quantiles of tensors over `QUANTILE_SAMPLE` elements are taken on an evenly
strided sample of that many (a 5M-element layer costs 0.1 s exactly, and a
deep model has a hundred of them per runtime).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
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


QUANTILES = (0.5, 0.99, 0.999)
QUANTILE_SAMPLE = 1 << 20
# the report's error histograms: log10 of |got-ref| / max(1, |ref|), in these bins (the ends catch the rest)
HIST_EDGES = tuple(float(e) for e in np.linspace(-10, 2, 49))


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
    rmse: float = float("nan")
    mean_rel_error: float = float("nan")     # mean over elements with ref != 0 of |got-ref| / |ref|
    rel_euclidean: float = float("nan")      # ||got-ref|| / ||ref|| (0 where ref is all zero and got agrees)
    p50: float = float("nan")                # quantiles of |got-ref|
    p99: float = float("nan")
    p999: float = float("nan")
    past_bound: int = 0                      # elements past the bound alone (before `floor` widens it)
    worst_norm: float = float("nan")         # max over elements of |got-ref| / max(1, |ref|)
    mean_norm: float = float("nan")          # mean of the same
    floor: float = 0.0                       # the widening granted, per max(1, |ref|) (see the module doc); 0: none
    floor_cap: float = 0.0                   # ... and at most this much absolute error
    mean_bound: float = float("nan")         # with a floor: the mean of the bound alone over the elements
    size: int = 0                            # elements compared
    detail: Optional[dict] = field(default=None, repr=False, compare=False)  # the report's histogram/heatmap

    def __post_init__(self):
        if not self.status:
            self.status = "pass" if self.passed else "FAIL"

    def to_json(self) -> dict:
        d = asdict(self)
        d.pop("detail")
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
                      nan, None, None, None, int(ref.size), 0, "", reason, past_bound=int(ref.size))


def compare(got, ref, tol: Optional[Tolerance] = None, floor: Tuple[float, float] = (0.0, 0.0),
            detail: bool = False) -> Comparison:
    """Compares `got` with the reference `ref` under `tol` (default: by ref's
    dtype), the bound widened to `floor` (see the module doc). `detail`: keep
    the report's error histogram (and for N,H,W,C tensors a heatmap)."""
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
                          1.0, None, None, None, 0, 0, "", "empty", rmse=0.0, mean_rel_error=0.0, rel_euclidean=0.0,
                          p50=0.0, p99=0.0, p999=0.0, worst_norm=0.0, mean_norm=0.0)
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
        past_bound = int(np.count_nonzero(err > excess))
        mean_bound = float("nan")
        cap, per = floor
        if cap > 0 and per > 0:
            mean_bound = float(np.mean(excess))
            np.maximum(excess, np.minimum(np.maximum(absref, 1.0) * per, cap), out=excess)
        allowed_at = excess.copy() if detail else None
        np.divide(err, excess, out=excess)  # allowed is 0 only where exactness is asked: err/0 -> inf, 0/0 -> nan
    excess[err == 0] = 0.0
    failing = int(np.count_nonzero(excess > 1))
    if bad is not None:
        excess[bad.unmatched.ravel()] = np.inf
        failing += int(bad.unmatched.sum())
        past_bound += int(bad.unmatched.sum())
    flat = int(np.argmax(excess))
    worst = np.unravel_index(flat, ref.shape)
    nz = absref > 0
    rel = err[nz] / absref[nz] if nz.any() else np.zeros(0)
    max_rel = float(rel.max()) if rel.size else 0.0
    n_finite = err.size if finite is None else int(finite.sum())
    norm = err / np.maximum(absref, 1.0)
    if finite is not None:
        norm[~finite] = 0.0
    note, status = (bad.describe(), "") if bad is not None else _conditioning(got, ref, tol) if failing else ("", "")
    stats = _statistics(err, r, norm, rel, n_finite, finite)
    return Comparison(
        passed=failing == 0 or bool(status),
        shape=tuple(ref.shape), dtype=ref.dtype.name, atol=tol.atol, rtol=tol.rtol,
        excess=float(excess[flat]),
        allowed=max(tol.atol, slope * float(absref[flat]), min(floor[1] * max(1.0, float(absref[flat])), floor[0])),
        max_abs_error=float(err.max()) if n_finite else float("nan"),
        max_rel_error=max_rel,
        mean_abs_error=float(err.sum() / n_finite) if n_finite else float("nan"),
        cosine=_cosine(g, r) if n_finite else float("nan"),
        worst_index=tuple(int(i) for i in worst), worst_got=float(got[worst]), worst_ref=float(ref[worst]),
        failing=failing, nonfinite=0 if bad is None else int(bad.unmatched.sum()),
        nonfinite_side="" if bad is None else bad.side,
        note=note, status=status, past_bound=past_bound, floor=float(floor[1]), floor_cap=float(floor[0]),
        mean_bound=mean_bound, size=int(ref.size),
        detail=_detail(norm, err, allowed_at, ref.shape) if detail else None, **stats)


def _statistics(err, r, norm, rel, n, finite) -> dict:
    """The msit/Polygraphy numbers over the elements finite on both sides."""
    nan = float("nan")
    if not n:
        return dict(rmse=nan, mean_rel_error=nan, rel_euclidean=nan, p50=nan, p99=nan, p999=nan,
                    worst_norm=nan, mean_norm=nan)
    sq = float(np.dot(err, err))
    ref_sq = float(np.dot(r, r))
    e = err if finite is None else err[finite]
    if e.size > QUANTILE_SAMPLE:
        e = e[::-(-e.size // QUANTILE_SAMPLE)]
    q = np.quantile(e, QUANTILES) if e.size else [nan] * 3
    return dict(rmse=float(np.sqrt(sq / n)), mean_rel_error=float(rel.mean()) if rel.size else 0.0,
                rel_euclidean=float(np.sqrt(sq / ref_sq)) if ref_sq > 0 else (0.0 if sq == 0 else float("inf")),
                p50=float(q[0]), p99=float(q[1]), p999=float(q[2]),
                worst_norm=float(norm.max()), mean_norm=float(norm.sum() / n))


def _detail(norm, err, allowed, shape) -> dict:
    """The report's pictures of one comparison: a histogram of log10(error
    relative to max(1, |ref|)) in HIST_EDGES, and for an N,H,W,C tensor the
    mean over N and C of error / allowed per pixel."""
    with np.errstate(divide="ignore"):
        logs = np.log10(norm)
    logs = np.clip(logs, HIST_EDGES[0], HIST_EDGES[-1])  # 0 error lands in the first bin, not nowhere
    counts, _ = np.histogram(logs, bins=np.asarray(HIST_EDGES))
    out = {"hist": counts.tolist()}
    if len(shape) == 4 and shape[1] > 1 and shape[2] > 1:
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(err == 0, 0.0, err / allowed).reshape(shape)
        out["heat"] = np.nanmean(np.minimum(ratio, 1e6), axis=(0, 3))
    return out


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
