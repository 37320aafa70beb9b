"""The float64 truth every runtime is judged against.

A Keras MODEL is run again in float64 (bridge.parity.float64's checked twin:
same weights, every layer in float64), with its layer outputs in per-layer
mode. Every runtime, TF float32 included, is then measured against that
answer, and TF float32's own distance from it sets how much float32 rounding
this model amplifies on each output and each layer (its `Floor`).

The rule, per output and per layer: element i passes when its error against
float64 is within

    max(the bound (docs/ops.md's rule), FACTOR * min(E, R * max(1, |f64[i]|)))

where E is TF float32's largest error on that tensor, max |tf32 - f64|, and R
the largest as a fraction of each element's magnitude, max |tf32 - f64| /
max(1, |f64|): "as close to float64 as TensorFlow float32 itself, within
FACTOR x". TF float32 itself is within both everywhere; the smaller serves
both error shapes: rounding that grows with the value (R), and cancellation
that leaves an error of one size on values of any size (E), where R alone
would let a large value be off by R of itself. No part is a fraction of the
tensor's largest value. A second condition catches a small error spread over
every element where the floor widened the bound: the mean |got - f64| must be
within FACTOR x TF float32's mean, or within the mean bound (which every
element within the bound keeps by itself). A NaN or Inf where float64 is
finite fails; where TF float32 itself is not finite its distance sets no
floor (the bound alone judges).

Without a float64 run (a SavedModel or an .onnx MODEL has no float64 twin, or
the twin was refused) runtimes are judged against the reference as before,
and every output that would have needed the float64 verdict says why there
is none.
"""
from __future__ import annotations

import dataclasses
import gc
import time
from dataclasses import dataclass, field
from typing import Dict, Mapping, Optional, Sequence

import numpy as np

from bridge.parity import compare as cmp
from bridge.parity import float64 as float64_mod
from bridge.parity.conditioning import FLOAT64_FACTOR as FACTOR

NAME = float64_mod.NAME
DESCRIPTION = ("the TF model in float64: the judge of every runtime; this row is TF float32's own distance from it "
               f"(each runtime may be up to {FACTOR:g}x as far, or within the bound)")
RULE = f"as close to float64 as TF float32 itself, within {FACTOR:g}x"


@dataclass(frozen=True)
class Floor:
    """TF float32 against float64 on one tensor: its largest error, largest
    error per max(1, |f64|), and mean error."""
    worst: float
    worst_norm: float
    mean: float
    finite: bool = True     # False: TF float32 is not finite where float64 is; no floor

    @property
    def allowance(self):
        """compare's `floor`: (cap, per max(1, |ref|))."""
        return (FACTOR * self.worst, FACTOR * self.worst_norm) if self.finite else (0.0, 0.0)


def floor_of(tf_vs: cmp.Comparison) -> Floor:
    numbers = (tf_vs.max_abs_error, tf_vs.worst_norm, tf_vs.mean_abs_error)
    if tf_vs.nonfinite or not all(np.isfinite(n) for n in numbers):
        return Floor(0.0, 0.0, 0.0, False)
    return Floor(*numbers)


def judge(got, f64, tol: cmp.Tolerance, floor: Floor, detail: bool = False) -> cmp.Comparison:
    """One runtime's tensor against the float64 answer under the rule above."""
    ref = np.asarray(f64)
    if ref.dtype.kind != "f" or tol.atol == 0:  # ids, masks: exact, float64 adds nothing
        return cmp.compare(got, ref, tol, detail=detail)
    c = cmp.compare(got, ref, tol, floor=floor.allowance, detail=detail)
    if c.nonfinite or c.status not in ("pass", "FAIL") or c.note.startswith("shape"):
        return c
    bound = f"the bound and {FACTOR:g}x TF float32's own error (at most {floor.worst:.2g}, {floor.worst_norm:.2g} of |ref|)"
    mean_limit = max(c.mean_bound, FACTOR * floor.mean)
    if c.passed and c.floor > 0 and c.mean_abs_error > mean_limit:
        ratio = c.mean_abs_error / max(floor.mean, np.finfo(np.float64).tiny)
        return dataclasses.replace(c, passed=False, status="FAIL", note=(
            f"mean error {c.mean_abs_error:.2g} is {ratio:.3g}x TF float32's ({floor.mean:.2g}; at most "
            f"{FACTOR:g}x is rounding): a small error on every element"))
    if not floor.finite:
        extra = "TF float32 is not finite where float64 is: judged by the bound alone"
        return dataclasses.replace(c, note=f"{c.note}; {extra}" if c.note else extra)
    if not c.passed:
        note = f"{c.failing} el. past {bound}, worst {c.excess:.3g}x"
        return dataclasses.replace(c, note=f"{c.note}; {note}" if c.note else note)
    if c.past_bound:
        return dataclasses.replace(c, note=f"{RULE} ({c.past_bound} el. past the bound)")
    return c


@dataclass
class Truth:
    """The float64 answer of one run and TF float32's distance from it."""
    outputs: Dict[str, np.ndarray]
    layers: Dict[str, np.ndarray]                       # in the reference's (topological) order
    tf_outputs: Dict[str, cmp.Comparison]               # TF float32 against float64
    tf_layers: Dict[str, cmp.Comparison] = field(default_factory=dict)
    dtypes: Dict[str, np.dtype] = field(default_factory=dict)   # each layer's dtype in TF: its bound's
    seconds: float = 0.0

    def floor(self, name: str, layer: bool = False) -> Floor:
        c = (self.tf_layers if layer else self.tf_outputs).get(name)
        return floor_of(c) if c is not None else Floor(0.0, 0.0, 0.0, False)

    def output(self, name: str, got, tol: cmp.Tolerance, detail: bool = False) -> cmp.Comparison:
        return self._as_tf(name, judge(got, self.outputs[name], tol, self.floor(name), detail))

    def layer(self, name: str, got, ref, tol: cmp.Tolerance) -> cmp.Comparison:
        """`ref`: this layer's float64 tensor, read in the runtime's layout (onnx_graph.best)."""
        return self._as_tf(name, judge(got, ref, tol, self.floor(name, layer=True)))

    def _as_tf(self, name: str, c: cmp.Comparison) -> cmp.Comparison:
        """The row names the tensor's dtype in the model (TF's), not float64's."""
        dtype = self.dtypes.get(name)
        return dataclasses.replace(c, dtype=np.dtype(dtype).name) if dtype is not None else c


def establish(source, arrays: Mapping[str, np.ndarray], tf_outputs: Mapping[str, np.ndarray],
              tf_layers: Mapping[str, np.ndarray], layer_names: Sequence[str], log=None) -> Truth:
    """The float64 run of `source` on `arrays` (outputs, and the layers named),
    measured against TF float32's own outputs and layers. NoFloat64 (or the
    error that ended the run) when there is none."""
    (log or (lambda msg: None))(f"{NAME}: running")
    t0 = time.perf_counter()
    names = list(source.output_names)
    if source.kind == "savedmodel":  # a SavedModel or frozen GraphDef: its graph widened (outputs only)
        from bridge.parity import graph_float64
        with source.stages.stage(f"{NAME}: run (the graph widened to float64)"):
            outputs = graph_float64.outputs(source.frozen_graph(), names, arrays)
        layers = {}
    elif source.kind != "keras":
        raise float64_mod.NoFloat64(no_twin(source.kind))
    else:
        outputs, layers = _keras_run(source, arrays, tf_outputs, layer_names, names)
    gc.collect()
    with source.stages.stage(f"{NAME}: TF float32 against it" + (f" ({len(layers)} layers)" if layers else "")):
        truth = Truth(outputs, {}, {k: cmp.compare(tf_outputs[k], outputs[k], _bound(tf_outputs[k]), detail=True)
                                    for k in names})
        # an output and its last layer share a name and a tensor: one dtype per name
        truth.dtypes.update({k: np.asarray(tf_outputs[k]).dtype for k in names})
        truth.tf_outputs = {k: truth._as_tf(k, c) for k, c in truth.tf_outputs.items()}
        for n in tf_layers:  # a float64 layer with a NaN compares as a mismatch below: not a judge
            if n in layers and np.asarray(layers[n]).dtype.kind == "f" and not np.isnan(layers[n]).any():
                truth.layers[n] = np.asarray(layers[n])
                truth.dtypes[n] = np.asarray(tf_layers[n]).dtype
                truth.tf_layers[n] = truth._as_tf(n, cmp.compare(tf_layers[n], truth.layers[n],
                                                                 _bound(tf_layers[n])))
    truth.seconds = time.perf_counter() - t0
    return truth


def _keras_run(source, arrays, tf_outputs, layer_names, names):
    """(outputs, layers) of the Keras model's float64 twin."""
    from bridge.parity.tf_common import KerasRunner
    with source.stages.stage(f"{NAME}: run" + (f" ({len(layer_names)} layers marked)" if layer_names else "")):
        twin = float64_mod.checked_twin(source.keras_model(), names, arrays, mine=tf_outputs)
        runner = KerasRunner(source, twin)
        wide = float64_mod.wide(arrays)
        wanted = [n for n in layer_names if n in set(runner.layer_names())]
        if wanted:
            outputs, layers = runner.run_with_intermediates(wide, wanted)
        else:
            outputs, layers = runner.run(wide), {}
        outputs = float64_mod.checked_outputs(outputs, names)
        del twin, runner  # 2x the weights in float64: gone before the next runtime (they hold reference cycles)
    return outputs, layers


def no_twin(kind: str) -> str:
    """Why a model of this kind (not Keras) has no float64 run."""
    what = {"onnx": "an .onnx MODEL", "savedmodel": "a SavedModel (a graph fixed at float32)",
            "graphdef": "a frozen GraphDef (a graph fixed at float32)"}.get(kind, kind)
    return f"{what} has no float64 twin (Keras models only)"


def _bound(tf_tensor) -> cmp.Tolerance:
    return cmp.default_tolerance(np.asarray(tf_tensor).dtype)


def no_verdict_notes(results, why: str) -> None:
    """Without a float64 run: every runtime's float output that failed against
    the reference (or that only the saturated-softmax rule excused) says why
    there is no float64 verdict."""
    for res in results:
        res.outputs = {k: _with_note(c, f"no float64 verdict: {why}") if _needs(c) else c
                       for k, c in res.outputs.items()}


def _needs(c: cmp.Comparison) -> bool:
    return np.dtype(c.dtype).kind == "f" and c.status != "pass" and not c.nonfinite


def _with_note(c: cmp.Comparison, extra: str) -> cmp.Comparison:
    return dataclasses.replace(c, note=f"{c.note}; {extra}" if c.note else extra)


def row_layers(truth: Truth, summary_cls, check_cls):
    """TF float32's own per-layer distance from float64, as a LayerSummary (the floor curve)."""
    if not truth.tf_layers:
        return None
    s = summary_cls()
    for name, c in truth.tf_layers.items():
        s.checks.append(check_cls(name, c))
        s.compared += 1
    return s

