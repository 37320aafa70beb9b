"""A parity run: resolve the model, make the inputs, run each runtime once,
compare every output (and, per layer, every shared intermediate) against the
reference, and collect the numbers in a `ParityReport`."""
from __future__ import annotations

import dataclasses
import time
import traceback
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from bridge.parity import compare as cmp
from bridge.parity import float64 as float64_mod
from bridge.parity.conditioning import ILL_CONDITIONED
from bridge.parity import inputs as inputs_mod
from bridge.parity import loaded as loaded_mod
from bridge.parity import real_inputs
from bridge.parity import task as task_mod
from bridge.parity import truth as truth_mod
from bridge.parity.inputs import InputError
from bridge.parity.onnx_base import fused_blocks
from bridge.parity.onnx_graph import Candidates, best
from bridge.parity.runtime import Runtime, Unavailable
from bridge.parity.runtimes import discover
from bridge.parity.source import ModelSource, open_source
from bridge.parity.stages import release_heap
from bridge.parity.views import ReportViews


@dataclass
class LayerCheck:
    name: str                   # canonical layer (Keras layer or ONNX tensor)
    comparison: cmp.Comparison
    tensor: str = ""            # where the runtime had it (ONNX tensor), if not the same name
    node: str = ""              # the ONNX node that produced it
    covers: List[str] = field(default_factory=list)  # the source layers of a fused layer standing for this one

    def to_json(self) -> dict:
        return {"layer": self.name, "tensor": self.tensor, "node": self.node, "covers": list(self.covers),
                **self.comparison.to_json()}


@dataclass
class LayerSummary:
    compared: int = 0
    failed: int = 0
    first_fail: Optional[LayerCheck] = None
    last_pass: Optional[LayerCheck] = None   # the last passing layer before the first failure
    checks: List[LayerCheck] = field(default_factory=list)
    unmatched: int = 0                        # layers the runtime had but in another shape
    reference_layers: int = 0                 # layers the reference has (how many could have been matched)

    def to_json(self) -> dict:
        return {"compared": self.compared, "failed": self.failed, "unmatched": self.unmatched,
                "reference_layers": self.reference_layers,
                "first_fail": self.first_fail.to_json() if self.first_fail else None,
                "last_pass": self.last_pass.to_json() if self.last_pass else None,
                "layers": [c.to_json() for c in self.checks]}


@dataclass
class RuntimeResult:
    name: str
    description: str
    status: str                 # reference | ok | unavailable | error | loaded
    reason: str = ""
    prepare_s: float = 0.0
    run_s: float = 0.0
    outputs: Dict[str, cmp.Comparison] = field(default_factory=dict)
    layers: Optional[LayerSummary] = None
    required: bool = False      # asked for by name: not running is a failure

    @property
    def passed(self) -> bool:
        if self.status == "reference":
            return True
        if self.status in ("ok", "loaded"):
            return bool(self.outputs) and all(c.passed for c in self.outputs.values())
        return self.status == "unavailable" and not self.required

    @property
    def compared(self) -> bool:
        return self.status in ("ok", "loaded")

    def to_json(self) -> dict:
        return {"name": self.name, "description": self.description, "status": self.status, "reason": self.reason,
                "passed": self.passed, "prepare_s": round(self.prepare_s, 4), "run_s": round(self.run_s, 4),
                "outputs": {k: v.to_json() for k, v in self.outputs.items()},
                "layers": self.layers.to_json() if self.layers else None}


@dataclass
class ParityReport(ReportViews):
    model: str
    kind: str
    reference: str
    seed: int
    inputs: Dict[str, Tuple[Tuple[int, ...], str]]
    runtimes: List[RuntimeResult]
    per_layer: bool
    seconds: float = 0.0
    problem: str = ""           # why nothing could be judged (no reference, nothing compared)
    stages: List[dict] = field(default_factory=list)   # bridge.parity.stages rows: time and peak memory
    peak_rss_mb: Optional[float] = None                  # the process's peak resident memory during the run
    task: Optional[task_mod.TaskReport] = None           # --task: answer-level agreement per runtime
    no_float64: str = ""        # why the runtimes are judged against the reference, not the model in float64

    @property
    def passed(self) -> bool:
        if self.problem:
            return False
        return all(r.passed for r in self.runtimes)

    def to_json(self) -> dict:
        return {"model": self.model, "kind": self.kind, "reference": self.reference, "seed": self.seed,
                "passed": self.passed, "problem": self.problem, "seconds": round(self.seconds, 3),
                "ill_conditioned": [r.name for r in self.runtimes if r.status != "reference"
                                    and any(c.status == ILL_CONDITIONED for c in r.outputs.values())],
                "per_layer": self.per_layer,
                "inputs": {k: {"shape": list(s), "dtype": d} for k, (s, d) in self.inputs.items()},
                "runtimes": [r.to_json() for r in self.runtimes],
                "stages": list(self.stages),
                "peak_rss_mb": None if self.peak_rss_mb is None else round(self.peak_rss_mb, 1),
                "task": self.task.to_json() if self.task else None, "no_float64": self.no_float64}


def _built_for(model, inputs: Mapping[str, np.ndarray], config: Optional[dict]) -> Optional[dict]:
    """`config` for a built-in model built for the given inputs' shapes (minilm's
    sequence length, an image size), as --input-shape would build it; else as is."""
    from bridge import modelsource
    config = dict(config or {})
    if isinstance(model, str) and model in modelsource.builtin_names() and "input_size" not in config:
        size = modelsource.input_size_from(inputs_mod.shapes_of({k: np.asarray(v) for k, v in inputs.items()}))
        if size is not None:
            config["input_size"] = size
    return config


def known_runtimes() -> Dict[str, type]:
    return discover()[0]


def run_parity(model, *, runtimes: Optional[Sequence[str]] = None, batch: int = 1,
               input_shapes=None, seed: int = 0,
               atol: Optional[Mapping[str, float]] = None, rtol: Optional[Mapping[str, float]] = None,
               per_layer: bool = False, inputs: Optional[Mapping[str, np.ndarray]] = None,
               save_inputs: Optional[str] = None, load_outputs: Sequence[Tuple[str, str]] = (),
               config: Optional[dict] = None, onnx_file: Optional[str] = None,
               source: Optional[ModelSource] = None, log=None, task: Optional[str] = None) -> ParityReport:
    """The whole parity check. `model`: see `open_source` (or pass `source`).
    `input_shapes`: `--input-shape` items (["image:1,96,96,3"]) or a dict.
    `atol`/`rtol`: {"" : global override, output name: per-output override}.
    Raises InputError (a usage problem) before any runtime runs."""
    start = time.perf_counter()
    log = log or (lambda msg: None)
    atol, rtol = dict(atol or {}), dict(rtol or {})
    adapters, broken = discover()
    loaded = list(load_outputs)
    loaded_names = [n for n, _ in loaded]
    if runtimes is not None:
        unknown = [r for r in runtimes if r not in adapters and r not in broken and r not in loaded_names]
        if unknown:
            raise InputError(f"unknown runtime {unknown[0]!r}; known: {', '.join(list(adapters) + list(broken))}")
    owns_source = source is None
    hint = inputs.shapes_hint() if isinstance(inputs, real_inputs.RealInputs) else inputs  # images: the model's size
    if owns_source and hint is not None and not input_shapes:
        config = _built_for(model, hint, config)
    source = source or open_source(model, config=config, onnx_file=onnx_file, input_shapes=input_shapes)
    try:
        return _run(source, adapters, broken, runtimes, batch, seed, atol, rtol, per_layer,
                    inputs, save_inputs, loaded, start, log, task)
    finally:
        if owns_source:
            source.close()


def _run(source, adapters, broken, wanted, batch, seed, atol, rtol, per_layer, given_inputs,
         save_inputs, loaded, start, log, task=None) -> ParityReport:
    tasks = task_mod.TaskReport(task) if task else None
    ref_name = next((n for n, c in adapters.items() if source.kind in c.reference_for), None)
    for name in list(wanted or []):
        cls = adapters.get(name)
        if cls is not None and source.kind not in cls.kinds:
            raise InputError(f"runtime {name!r} does not take a {source.kind} MODEL")
    names = [n for n, c in adapters.items() if source.kind in c.kinds]
    names += [n for n in broken if n not in names]
    if wanted is not None:
        names = [n for n in names if n in wanted or n == ref_name]
    else:  # opt-in runtimes (default = False) run only when named
        names = [n for n in names if n not in adapters or getattr(adapters[n], "default", True) or n == ref_name]
    loaded_names = {n for n, _ in loaded}
    names = [n for n in names if n not in loaded_names or n == ref_name]

    # inputs: loaded or generated, then fixed for every runtime
    if isinstance(given_inputs, real_inputs.RealInputs):
        given_inputs = given_inputs.resolve(source.inputs)
    if given_inputs is not None:
        arrays = inputs_mod.check(source.inputs, given_inputs, "--load-inputs")
    else:
        arrays = source.sample_inputs(batch, seed)
        if source.resolved.sample_note(batch):
            log(source.resolved.sample_note(batch))
    source.input_shapes = inputs_mod.shapes_of(arrays)
    source.per_layer = per_layer
    source.requested = set(wanted or ())   # named in --runtimes: opt-in and budgeted runtimes run
    stage = source.stages.stage
    if save_inputs:
        inputs_mod.save(save_inputs, arrays)

    results: List[RuntimeResult] = []
    reference_out: Optional[Dict[str, np.ndarray]] = None
    reference_layers: Dict[str, np.ndarray] = {}
    order = [ref_name] + [n for n in names if n != ref_name] if ref_name in names else names
    problem = ""
    truth: Optional[truth_mod.Truth] = None   # the float64 run every runtime is judged against
    no_truth = ""                            # why there is none
    rt: Optional[Runtime] = None
    for name in order:
        rt = None  # the previous runtime's sessions and interpreters go before the next one starts
        release_heap()
        if name in broken:
            results.append(RuntimeResult(name, "", "error", broken[name], required=bool(wanted and name in wanted)))
            continue
        rt = adapters[name]()
        is_ref = name == ref_name
        res = RuntimeResult(name, rt.description, "reference" if is_ref else "ok",
                            required=bool(wanted and name in wanted))
        results.append(res)
        log(f"{name}: preparing")
        t0 = time.perf_counter()
        try:
            with stage(f"{name}: prepare"):
                rt.prepare(source)
        except Unavailable as e:
            res.status, res.reason = "unavailable", str(e)
            res.prepare_s = time.perf_counter() - t0
            if is_ref:
                problem = f"the reference {name} cannot run: {e}"
            continue
        except Exception as e:  # noqa: BLE001 - one runtime's crash is its own row
            res.status, res.reason = "error", _describe(e)
            res.prepare_s = time.perf_counter() - t0
            if is_ref:
                problem = f"the reference {name} failed: {res.reason}"
            continue
        res.prepare_s = time.perf_counter() - t0
        res.description = rt.description  # an adapter may say more once it knows the model
        if is_ref:
            layer_names = source.layer_order() if per_layer else []
            layer_names = [n for n in layer_names if n in set(rt.layer_names())]
        elif per_layer:
            have = set(rt.layer_names())
            layer_names = [n for n in reference_layers if n in have]
        else:
            layer_names = []
        log(f"{name}: running")
        t0 = time.perf_counter()
        try:
            with stage(f"{name}: run" + (f" ({len(layer_names)} layers marked)" if layer_names else "")):
                if layer_names:
                    outputs, layers = rt.run_with_intermediates(arrays, layer_names)
                else:
                    outputs, layers = rt.run(arrays), {}
        except Unavailable as e:
            res.status, res.reason = "unavailable", str(e)
            continue
        except Exception as e:  # noqa: BLE001
            res.status, res.reason = "error", _describe(e)
            if is_ref:
                problem = f"the reference {name} failed: {res.reason}"
            continue
        finally:
            res.run_s = time.perf_counter() - t0
        if is_ref:
            missing = [k for k in source.output_names if k not in outputs]
            if missing:
                res.status = "error"
                res.reason = (f"the reference returned {sorted(outputs)}, not the outputs {missing} "
                              f"(model outputs: {source.output_names})")
                problem = f"the reference {name} failed: {res.reason}"
                continue
            reference_out = {k: np.asarray(outputs[k]) for k in source.output_names}
            reference_layers = {k: np.asarray(v) for k, v in layers.items()}
            if tasks:
                tasks.start(name, reference_out)
            nan = _first_nan(reference_out)
            if nan:  # the others are still run and compared: their rows say who else has it
                res.status, res.reason = "error", nan
                problem = f"the reference {name} failed: {nan}, so nothing can be judged against it"
                continue
            try:
                truth = truth_mod.establish(source, arrays, reference_out, reference_layers, list(reference_layers), log)
            except Exception as e:  # noqa: BLE001 - judged against the reference instead, saying why
                no_truth = float64_mod.no_verdict(e)
            else:  # TF float32's layers are measured; from here on the float64 ones are the reference
                reference_layers = truth.layers
                if tasks:
                    tasks.attach(res, reference_out, None, truth.outputs)
            outputs = layers = None  # TF float32's layers: measured (truth.tf_layers) or kept as the reference
            continue
        own = _own_tolerance(getattr(rt, "tolerance", None))
        with stage(f"{name}: compare" + (f" ({len(layers)} layers)" if per_layer and layers else "")):
            res.outputs = _compare_outputs(outputs, reference_out, atol, rtol, res, own, truth,
                                           precision=source.output_precision())
            if tasks:
                tasks.attach(res, outputs, reference_out, truth.outputs if truth else None,
                             getattr(rt, "quantize", None))
            if per_layer and reference_layers:
                res.layers = _compare_layers(layers, reference_layers, atol, rtol, own, truth)
        # only the numbers stay: this runtime's tensors go before the next one runs
        outputs = layers = None

    if reference_out is not None:
        for name, path in loaded:
            order, aliases, how = _loaded_layout(adapters.get(name), source)
            res = RuntimeResult(name, f"outputs loaded from {path}{how}", "loaded")
            got = loaded_mod.load_outputs(path, reference_out, f"--load-outputs {name}", order=order, aliases=aliases)
            res.outputs = _compare_outputs(got, reference_out, atol, rtol, res, truth=truth,
                                           precision=source.output_precision())
            if tasks:
                tasks.attach(res, got, reference_out, truth.outputs if truth else None)
            results.append(res)
        if truth is not None:  # its row: TF float32's own distance from float64, per output and per layer
            row = RuntimeResult(truth_mod.NAME, truth_mod.DESCRIPTION, "reference", run_s=truth.seconds)
            row.outputs = dict(truth.tf_outputs)
            if per_layer and truth.tf_layers:
                row.layers = LayerSummary(compared=len(truth.tf_layers),
                                          checks=[LayerCheck(n, c) for n, c in truth.tf_layers.items()])
            results.append(row)
        elif no_truth and not problem:
            truth_mod.no_verdict_notes([r for r in results if r.status != "reference"], no_truth)
    elif not problem:
        problem = f"no reference runtime for a {source.kind} MODEL"
    if per_layer and source.kind == "keras" and any(r.layers and r.layers.checks for r in results):
        blocks = fused_blocks(source)
        for r in results:
            for check in (r.layers.checks if r.layers and r.name not in ("tf", truth_mod.NAME) else ()):
                fused, covers = blocks.get(check.name, ("", []))
                # the fused layer's tensor (tf-fused's, or an ONNX node in its scope), not one of another export
                if fused and (r.name == "tf-fused" or f"/{fused}" in f"/{check.node}"):
                    check.covers = list(covers)
    if not problem and not any(r.compared for r in results):
        problem = "no runtime besides the reference could run, so nothing was compared"
    return ParityReport(source.label, source.kind, ref_name or "", seed,
                        {k: (tuple(v.shape), v.dtype.name) for k, v in arrays.items()}, results, per_layer,
                        time.perf_counter() - start, problem, source.stages.to_json(), source.stages.peak_mb(),
                        task=tasks, no_float64=no_truth)


def _loaded_layout(cls, source) -> Tuple[Optional[List[str]], Dict[str, str], str]:
    """(canonical names in the order of the files, {own name: canonical}, a note)
    for outputs loaded under a runtime's name: that runtime's own output layout
    (e.g. ge: the GE model's output order, which msame keeps); the reference's
    order for any other name."""
    if cls is None or cls.output_layout is Runtime.output_layout:
        return None, {}, ""
    try:
        rt = cls()
        with source.stages.stage(f"{cls.name}: output layout"):
            order, aliases = rt.output_layout(source)
    except Exception as e:  # noqa: BLE001 - say it and fall back to the reference's order
        return None, {}, f" (in the reference's output order: {cls.name}'s own layout failed: {_describe(e)})"
    return list(order), dict(aliases), f" (in {cls.name}'s output order)"


def _own_tolerance(value) -> Dict[str, Tuple[float, float]]:
    """A runtime's own bounds as {dtype: (atol, rtol)}; a bare pair covers every float dtype."""
    if not value:
        return {}
    if isinstance(value, dict):
        return {str(k): (float(a), float(r)) for k, (a, r) in value.items()}
    atol, rtol = value
    return {d: (float(atol), float(rtol)) for d in cmp.DEFAULTS}


def _first_nan(outputs: Mapping[str, np.ndarray]) -> str:
    """Where the first NaN of the reference's outputs is ("" when there is none).
    Random inputs of a healthy model give no NaN; an Inf may be legitimate (an
    overflowing exp) and is judged element by element like any value."""
    for name, value in outputs.items():
        if value.dtype.kind not in "fc" or value.size == 0:
            continue
        mask = np.isnan(value)
        if mask.any():
            at = np.unravel_index(int(np.argmax(mask)), mask.shape)
            return (f"it produced NaN in output {name!r} at [{','.join(str(int(i)) for i in at)}] "
                    f"({int(mask.sum())} of {mask.size} elements)")
    return ""


def _describe(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    where = traceback.extract_tb(e.__traceback__)[-1] if e.__traceback__ else None
    loc = f" ({where.filename.rsplit('/', 1)[-1]}:{where.lineno})" if where else ""
    return f"{type(e).__name__}: {text[0] if text else ''}{loc}"


def _compare_outputs(outputs, reference, atol, rtol, res: RuntimeResult, own=None,
                     truth: Optional[truth_mod.Truth] = None,
                     precision: Optional[Mapping[str, Tuple[str, str]]] = None) -> Dict[str, cmp.Comparison]:
    """`precision`: {output: (dtype, why)}: outputs computed below float32 (a
    mixed_float16 model; bridge.precision) get that dtype's bounds, and say so."""
    out = {}
    for name, ref in reference.items():
        computed, why = (precision or {}).get(name, (ref.dtype, ""))
        tol = cmp.resolve_tolerance(name, computed, atol, rtol, own)
        if name not in outputs:
            out[name] = cmp.mismatch(f"{res.name} has no output {name!r}", None, ref, tol)
            continue
        c = truth.output(name, outputs[name], tol, detail=True) if truth else cmp.compare(outputs[name], ref, tol)
        out[name] = dataclasses.replace(c, note=f"{why}; {c.note}" if c.note else why) if why else c
    return out


def _compare_layers(layers, reference, atol, rtol, own=None, truth: Optional[truth_mod.Truth] = None) -> LayerSummary:
    """`reference`: the float64 layers where `truth` is given (the TF ones otherwise)."""
    summary = LayerSummary(reference_layers=len(reference))
    for name, ref in reference.items():  # topological order
        if name not in layers:
            continue
        dtype = truth.dtypes.get(name, ref.dtype) if truth else ref.dtype
        tol = cmp.resolve_tolerance("", dtype, atol, rtol, own)
        if np.dtype(ref.dtype).kind not in "fc":
            continue
        got = layers[name]
        if truth:
            comparison, idx = best(got, ref, lambda g, r: truth.layer(name, g, r, tol))
        else:
            comparison, idx = best(got, ref, lambda g, r: cmp.compare(g, r, tol))
        if comparison is None:
            summary.unmatched += 1
            continue
        tensor = node = ""
        if isinstance(got, Candidates) and got.names:
            tensor, node = got.names[idx], got.nodes[idx] if got.nodes else ""
        check = LayerCheck(name, comparison, tensor, node)
        summary.checks.append(check)
        summary.compared += 1
        if comparison.passed:
            if summary.first_fail is None:
                summary.last_pass = check
        else:
            summary.failed += 1
            if summary.first_fail is None:
                summary.first_fail = check
    return summary
