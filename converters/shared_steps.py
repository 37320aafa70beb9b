"""Steps every exporter (export_<to>.py) shares: fusing the Keras model, the
TensorFlow outputs the export is judged against, and the per-output verdicts.

Cheap to import (numpy only at module level): the CLI imports every exporter,
and so this module, to build its --help.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Mapping, Optional, Sequence

import numpy as np

from bridge.exporting import Check, ExportError, Progress


def fuse_model(model, progress: Progress, summary: List[str], details: dict):
    """`model` rewritten onto the fused ops (bridge.converters.fuse), as the
    "fusing" stage; the fusion report goes to `summary` (text) and
    `details["fusion"]` (JSON)."""
    from bridge import converters
    fuse = getattr(converters, "fuse", None)
    if fuse is None:
        raise ExportError("the fusion rewriter (bridge.converters.fuse) is not available; --no-fuse exports the "
                          "model as it is")
    with progress.stage("fusing"):
        fused, report = fuse(model)
    text = report.summary() if callable(getattr(report, "summary", None)) else str(report)
    summary.append(text)
    to_json = getattr(report, "to_json", None)
    details["fusion"] = to_json() if callable(to_json) else text
    return fused


def model_to_export(source, fuse: bool, progress: Progress, summary: List[str], details: dict):
    """The source's model, fused when asked and possible (the rewriter takes
    Keras models only; anything else is exported as saved, and `summary` says so)."""
    if fuse and source.is_keras:
        return fuse_model(source.model, progress, summary, details)
    if fuse:
        summary.append(f"{source.kind}: exported as saved (fusion rewrites Keras models only)")
    return source.model


def tf_outputs(fn: Callable, feeds: Mapping[str, np.ndarray], order: Sequence[str]) -> Dict[str, np.ndarray]:
    """{output: array} of `fn` (a tf.function returning a dict) on `feeds`, given
    positionally in `order`: the reference an export is verified against."""
    return {k: np.asarray(v) for k, v in fn(*[feeds[n] for n in order]).items()}


def compare_outputs(got: Mapping[str, np.ndarray], ref: Mapping[str, np.ndarray], atol: Optional[float] = None,
                    bound: Optional[float] = None) -> List[Check]:
    """Per output of `ref`: max |got - ref| under the parity rule
    (bridge.parity.compare): the dtype's default tolerance, or `bound` (atol and
    rtol) for float outputs when given (what quantisation may add); `atol`
    overrides either."""
    from bridge.parity.compare import Tolerance, compare, default_tolerance
    checks = []
    for name, r in ref.items():
        r = np.asarray(r)
        if name not in got:
            checks.append(Check(name, float("nan"), 0.0, False, f"missing in the export (it has {sorted(got)})"))
            continue
        tol = Tolerance(bound, bound) if bound is not None and r.dtype.kind == "f" else default_tolerance(r.dtype)
        c = compare(np.asarray(got[name]), r, tol.with_overrides(atol=atol))
        # `allowed` is the bound at the element furthest beyond its own (the bound is per element)
        note = c.note or ("" if c.passed else f"{c.failing} elements beyond their bound, worst at "
                          f"{list(c.worst_index)}: {c.excess:.3g}x its bound {c.allowed:.3g}")
        checks.append(Check(name, float(c.max_abs_error), float(c.allowed), bool(c.passed), note))
    return checks
