"""Steps every exporter (export_<to>.py) shares: fusing the Keras model, the
TensorFlow outputs the export is judged against, and the per-output verdicts.

Cheap to import (numpy only at module level): the CLI imports every exporter,
and so this module, to build its --help.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Dict, List, Mapping, Optional, Sequence

import numpy as np

from bridge.exporting import Check, ExportError, Progress


def fuse_model(model, progress: Progress, summary: List[str], details: dict, graph: bool = False):
    """`model` rewritten onto the fused ops (bridge.converters.fuse; a TensorFlow
    graph by graph_fuse.fuse_graph), as the "fusing" stage; the fusion report
    goes to `summary` (text) and `details["fusion"]` (JSON)."""
    from bridge import converters
    if graph:
        from .graph_fuse import fuse_graph as fuse
    else:
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
    Keras models only; anything else is exported as saved, and `summary` says so).
    Dims the model leaves open stay open in the export; the progress line says
    at which shape the verification runs (modelsource.ResolvedModel.sample_note)."""
    note = source.sample_note() if hasattr(source, "sample_note") else ""
    if note:
        progress.note(note)
    if fuse and source.is_keras:
        return fuse_model(source.model, progress, summary, details)
    if fuse and getattr(source, "is_graph", False):
        return fuse_model(source.model, progress, summary, details, graph=True)
    if fuse:
        summary.append(f"{source.kind}: exported as saved (fusion rewrites Keras models only)")
    return source.model


def tf_outputs(fn: Callable, feeds: Mapping[str, np.ndarray], order: Sequence[str]) -> Dict[str, np.ndarray]:
    """{output: array} of `fn` (a tf.function returning a dict) on `feeds`, given
    positionally in `order`: the reference an export is verified against."""
    return {k: np.asarray(v) for k, v in fn(*[feeds[n] for n in order]).items()}


def compare_outputs(got: Mapping[str, np.ndarray], ref: Mapping[str, np.ndarray], atol: Optional[float] = None,
                    bound: Optional[float] = None, float64: Optional[Callable[[], Mapping[str, np.ndarray]]] = None,
                    precision: Optional[Mapping[str, str]] = None) -> List[Check]:
    """Per output of `ref`: max |got - ref| under the parity rule
    (bridge.parity.compare): the dtype's default tolerance, or `bound` (atol and
    rtol) for float outputs when given (what quantisation may add); `atol`
    overrides either. A float output that does not pass is judged again against
    `float64()` (the model's float64 answer, asked for at most once; see
    float64_reference) by bridge parity's own rule (bridge.parity.truth.judge:
    as close to float64 as TF float32 itself, within 3x): pass or FAIL, the
    numbers against float64 in the note. Where there is no float64 run the
    plain verdict stands and the note says why. `precision` ({output: dtype},
    by default `float64.precision`): outputs the model computes below float32
    (mixed_float16), judged by that dtype's default bounds."""
    from bridge.parity.compare import Tolerance, compare, default_tolerance
    precision = precision if precision is not None else getattr(float64, "precision", None) or {}
    checks = []
    for name, r in ref.items():
        r = np.asarray(r)
        if name not in got:
            checks.append(Check(name, float("nan"), 0.0, False, f"missing in the export (it has {sorted(got)})"))
            continue
        computed = precision.get(name, r.dtype) if r.dtype.kind == "f" else r.dtype
        tol = Tolerance(bound, bound) if bound is not None and r.dtype.kind == "f" else default_tolerance(computed)
        tol = tol.with_overrides(atol=atol)
        c = compare(np.asarray(got[name]), r, tol)
        # `allowed` is the bound at the element furthest beyond its own (the bound is per element)
        note = c.note or ("" if c.passed else f"{c.failing} elements beyond their bound, worst at "
                          f"{list(c.worst_index)}: {c.excess:.3g}x its bound {c.allowed:.3g}")
        if name in precision and r.dtype.kind == "f":
            why = f"{precision[name]} bounds: the model computes it in {precision[name]}"
            note = f"{why}; {note}" if note else why
        check = Check(name, float(c.max_abs_error), float(c.allowed), bool(c.passed), note, status=c.status)
        # a NaN or Inf where TF float32 is finite fails as it is: float64 could not excuse it
        if c.status != "pass" and not c.nonfinite and r.dtype.kind == "f" and float64 is not None:
            check = _judged_by_float64(check, np.asarray(got[name]), r, tol, float64)
        checks.append(check)
    return checks


def _judged_by_float64(check: Check, got: np.ndarray, ref: np.ndarray, tol, float64) -> Check:
    """`check` (against TF float32) decided again by bridge parity's float64
    rule, TF float32's own distance from float64 (`ref` against it) the floor."""
    from bridge.parity import truth
    from bridge.parity.compare import compare
    from bridge.parity.float64 import NoFloat64
    try:
        wide = np.asarray(float64()[check.output])
    except NoFloat64 as e:
        return dataclasses.replace(check, note=f"{check.note}; no float64 verdict: {e}")
    floor = truth.floor_of(compare(ref, wide, tol))
    v = truth.judge(got, wide, tol, floor)
    why = (f"judged against the model run in float64 ({truth.RULE}): the export is {v.max_abs_error:.2g} from it, "
           f"TF float32 {floor.worst:.2g}")
    if v.passed and v.past_bound:
        why += f" ({v.past_bound} el. past the bound alone)"
    if v.note and not v.note.startswith(truth.RULE):
        why += f"; {v.note}"
    return dataclasses.replace(check, passed=bool(v.passed), status=v.status, note=f"{check.note}; {why}")


def float64_reference(source, feeds: Mapping[str, np.ndarray]) -> Callable[[], Mapping[str, np.ndarray]]:
    """For compare_outputs: a callable giving the source's model (unfused) run in
    float64 on `feeds`, computed once on first call: a Keras model's float64
    twin, a SavedModel's or frozen GraphDef's graph widened
    (bridge.parity.graph_float64); raising NoFloat64 when there is no
    trustworthy twin, or none for the kind (an .onnx MODEL)."""
    from bridge.parity.float64 import NoFloat64, no_verdict, twin_outputs
    if source.is_graph:
        from bridge.parity import graph_float64

        def compute():
            return graph_float64.outputs(graph_float64.graph_of(source.model), source.output_names, feeds)
    elif source.is_keras:
        def compute():
            return twin_outputs(source.model, source.output_names, feeds)
    else:
        from bridge.parity.truth import no_twin

        def compute():
            raise NoFloat64(no_twin(source.kind))
    memo: dict = {}

    def run():
        if "out" not in memo:
            try:
                memo["out"] = compute()
            except Exception as e:  # noqa: BLE001 - no verdict; the check keeps its FAIL and says why
                memo["out"] = e if isinstance(e, NoFloat64) else NoFloat64(no_verdict(e))
        if isinstance(memo["out"], Exception):
            raise memo["out"]
        return memo["out"]
    if source.is_keras:
        from bridge.parity.precision import output_precision
        run.precision = output_precision(source.model, source.output_names)  # compare_outputs' default
    return run
