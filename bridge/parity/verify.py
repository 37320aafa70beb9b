"""`bridge export`'s one verifier: the written artefact run on the parity
runtime of its target (bridge/parity/runtimes: `ort` or `ort-lowered` for
--to onnx, `tflite` or `tflite-custom` for --to tflite, `ge` and `ge-builtin`
for --to ge), judged against the source model as given (unfused: the fusion is
part of what is checked) by parity's rule, with the float64 twin deciding the
float outputs that fail against TF float32 (bridge.parity.truth.judge).

The exporters (bridge.converters.export_<to>) only write: they take a
`Verifier` as their `verify` argument and call it on the staged artefact
before it is moved into place, so a file that fails its check is never
written. They never import this module (converters sit below parity).
"""
from __future__ import annotations

import dataclasses
import os
from typing import Callable, Dict, List, Mapping, Optional, Sequence

import numpy as np

from bridge.exporting import Check, ExportError
from bridge.parity import truth
from bridge.parity.compare import Tolerance, compare, default_tolerance
from bridge.parity.float64 import NoFloat64, no_verdict, twin_outputs
from bridge.parity.runtime import Runtime


# -- the reference ---------------------------------------------------------------
def tf_outputs(fn: Callable, feeds: Mapping[str, np.ndarray], order: Sequence[str]) -> Dict[str, np.ndarray]:
    """{output: array} of `fn` (a tf.function returning a dict) on `feeds`, given
    positionally in `order`: the reference an export is verified against."""
    return {k: np.asarray(v) for k, v in fn(*[feeds[n] for n in order]).items()}


def float64_reference(source, feeds: Mapping[str, np.ndarray]) -> Callable[[], Mapping[str, np.ndarray]]:
    """For compare_outputs: a callable giving the source's model (unfused) run in
    float64 on `feeds`, computed once on first call: a Keras model's float64
    twin, a SavedModel's or frozen GraphDef's graph widened
    (bridge.parity.graph_float64); raising NoFloat64 when there is no
    trustworthy twin, or none for the kind (an .onnx MODEL)."""
    if source.is_graph:
        from bridge.parity import graph_float64

        def compute():
            return graph_float64.outputs(graph_float64.graph_of(source.model), source.output_names, feeds)
    elif source.is_keras:
        def compute():
            return twin_outputs(source.model, source.output_names, feeds)
    else:
        def compute():
            raise NoFloat64(truth.no_twin(source.kind))
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
        from bridge.precision import output_precision
        run.precision = output_precision(source.model, source.output_names)  # compare_outputs' default
    return run


# -- the verdicts ----------------------------------------------------------------
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


# -- the runtimes ----------------------------------------------------------------
class _Outputs:
    """What a parity runtime's output mapping reads of its source: the reference's names."""

    def __init__(self, names: Sequence[str]):
        self.output_names = list(names)


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:300]}" if text else type(e).__name__


def onnx_runtime(mode: str) -> Runtime:
    """The parity row of an ONNX export: `ort` (bridge's kernels) for custom mode, else `ort-lowered`."""
    from bridge.parity.runtimes.ort import Ort
    from bridge.parity.runtimes.ort_lowered import OrtLowered
    return Ort() if mode == "custom" else OrtLowered()


def tflite_runtime(custom: bool) -> Runtime:
    """The parity row of a TFLite export: `tflite-custom` (bridge's LiteRT kernels) or `tflite`."""
    from bridge.parity.runtimes.tflite import TFLite
    from bridge.parity.runtimes.tflite_custom import TFLiteCustom
    return TFLiteCustom() if custom else TFLite()


def ge_runtimes(route: str) -> Dict[str, Runtime]:
    """The parity rows of a GE bundle: `ge` (the plugin route's nodes on bridge's
    kernels) and, for the built-in route, `ge-builtin` (the expansion)."""
    from bridge.parity.runtimes.ge import GE
    from bridge.parity.runtimes.ge_builtin import GEBuiltin
    rows: Dict[str, Runtime] = {"custom": GE()}
    if route == "builtin":
        rows["builtin"] = GEBuiltin()
    return rows


def ge_routes(model, feeds: Mapping[str, np.ndarray], route: str = "builtin") -> Dict[str, Dict[str, np.ndarray]]:
    """{route: {the model's output name: array}}: the GE-bound model on the parity rows of its plugin routes."""
    names = [o.name for o in model.graph.output]
    out = {}
    for run, rt in ge_runtimes(route).items():
        rt.attach(_Outputs(names), model)
        out[run] = rt.run(feeds)
    return out


# -- the verifier ----------------------------------------------------------------
@dataclasses.dataclass
class Verifier:
    """Verifies one export of `source` (a bridge.modelsource.ResolvedModel) on the
    sample inputs of `seed`; `atol` overrides the bounds. Called by the exporter
    of its target: `onnx(path, mode)`, `tflite(data, custom, quantize, bound)`,
    `ge(model, route)`, each giving the per-output checks."""
    source: object
    seed: int = 0
    atol: Optional[float] = None

    def __post_init__(self):
        self._memo: dict = {}

    def feeds(self) -> Dict[str, np.ndarray]:
        if "feeds" not in self._memo:
            self._memo["feeds"] = self.source.sample_inputs(seed=self.seed)
        return self._memo["feeds"]

    def reference(self) -> Dict[str, np.ndarray]:
        """The source model as given (unfused), in TF float32: parity's reference."""
        if "ref" not in self._memo:
            self._memo["ref"] = tf_outputs(self.source.function(), self.feeds(), [i.name for i in self.source.inputs])
        return self._memo["ref"]

    def float64(self):
        if "f64" not in self._memo:
            self._memo["f64"] = float64_reference(self.source, self.feeds())
        return self._memo["f64"]

    def judged(self, got: Mapping[str, np.ndarray], bound: Optional[float] = None) -> List[Check]:
        return compare_outputs(got, self.reference(), self.atol, bound=bound, float64=self.float64())

    def _run(self, rt: Runtime, model, path=None) -> Dict[str, np.ndarray]:
        rt.attach(_Outputs(self.reference()), model, path)
        return rt.run(self.feeds())

    def use_inputs(self, arrays: Mapping[str, np.ndarray]) -> None:
        """Verify on `arrays` (an int8 export's --calibration inputs) instead of the sample."""
        self._memo = {"feeds": dict(arrays)}

    def onnx(self, path: str, mode: str, quantize: str = "none", task: Optional[str] = None,
             inputs: Optional[Mapping[str, np.ndarray]] = None) -> List[Check]:
        """`quantize` dynamic|static: an int8 export, judged by `task` (see by_task)."""
        import onnx
        if inputs is not None:
            self.use_inputs(inputs)
        model = onnx.load(path, load_external_data=False)
        try:
            got = self._run(onnx_runtime(mode), model, path)
        except Exception as e:  # onnxruntime's own errors (e.g. a Reshape tf2onnx's optimizer got wrong)
            raise ExportError(f"onnxruntime cannot run the export (not written): {_first_line(e)}. This is a "
                              f"fault of the converted graph, not of the model: try another --opset, and "
                              f"report it with the model") from None
        checks = self.judged(got)
        return checks if quantize == "none" else self.by_task(checks, got, task, quantize)

    def by_task(self, checks: List[Check], got: Mapping[str, np.ndarray], task: str, quantize: str) -> List[Check]:
        """A quantized export's checks decided by its answers (bridge.parity.task)
        against the model in float64 where it has a float64 run, else TF float32:
        each output the task reads passes exactly when every agreement does,
        whatever its elementwise error (reported beside). An output the task does
        not read keeps its elementwise verdict; a NaN or Inf never passes."""
        from bridge.parity import task as task_mod
        from bridge.parity.inputs import InputError
        ref = self.reference()
        try:
            names = task_mod.outputs_for(task, ref)
        except InputError as e:
            raise ExportError(f"{e} (the quantized export is judged by it)") from None
        judge, against = ref, "tf"
        try:
            judge, against = dict(self.float64()()), truth.NAME
        except NoFloat64:
            pass
        rows = task_mod.agreements(task, names, got, judge, against)
        ok = bool(rows) and all(a.passed for a in rows)
        said = "; ".join(f"{a.metric} {a.value:.4g} {'>=' if a.passed else '<'} {a.threshold:g} vs {a.against}"
                         + (f" ({a.note})" if a.note else "") for a in rows)
        read = set(names)  # every agreement is over these outputs
        out = []
        for c in checks:
            mine = np.asarray(got.get(c.output, np.nan))
            if c.output not in read or (mine.dtype.kind == "f" and not np.isfinite(mine).all()):
                out.append(c)
                continue
            elementwise = f"elementwise {c.max_abs_error:.3g} (float32 bound {c.allowed:.3g})"
            out.append(dataclasses.replace(c, passed=ok, status=task_mod.JUDGED_BY_TASK if ok else "FAIL",
                                           note=f"{quantize} int8, {task_mod.JUDGED_BY_TASK} {task}: {said}; "
                                                f"{elementwise}"))
        return out

    def tflite(self, data: bytes, custom: bool, bound: Optional[float] = None) -> List[Check]:
        return self.judged(self._run(tflite_runtime(custom), data), bound=bound)

    def ge(self, model, route: str) -> List[Check]:
        checks = []
        for run, rt in ge_runtimes(route).items():
            for c in self.judged(self._run(rt, model)):
                c.output = f"{c.output} [{run}]"
                checks.append(c)
        return checks


def export(exporter, source, output: str, *, seed: int = 0, atol: Optional[float] = None, verify: bool = True,
           **options):
    """`exporter.export` (a bridge.converters.export_<to> module) with this verifier, as `bridge export` runs it."""
    verifier = Verifier(source, seed=seed, atol=atol) if verify else None
    if options.get("quantize") in ("static", "dynamic") and isinstance(options.get("calibration"), (str, os.PathLike)):
        options["calibration"] = calibration_inputs(source, options["calibration"])
    return exporter.export(source, output, seed=seed, atol=atol, verify=verifier, **options)


def calibration_inputs(source, path) -> Dict[str, np.ndarray]:
    """`--calibration DIR|FILE` read for the model's inputs as `--inputs` is
    (bridge.parity.real_inputs: names, ranks, fixed dims, finite values checked)."""
    from bridge.exporting import OptionError
    from bridge.parity.inputs import InputError
    from bridge.parity.real_inputs import open_inputs
    try:
        return open_inputs(path, None, "--calibration").resolve(source.inputs)
    except InputError as e:
        raise OptionError(str(e)) from None
