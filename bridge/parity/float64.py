"""The float64 judge: where a runtime's output fails against TF float32 (or
is excused only by the saturated-softmax rule), the same Keras model is run
again in float64 (its config with every float32 dtype policy made float64,
the weights copied) and each doubtful output is decided by
bridge.parity.conditioning.against_float64: is the runtime as close to the
float64 answer as TF float32 is? A deep model can amplify float32 rounding past
the tolerance; TF float32 is then no better an answer than the runtime it
judges, and only a more precise run can tell rounding from a bug.

Only Keras models (a SavedModel's graph is fixed at float32), and only when
every layer of the copy computes in float64; otherwise the rows stay as they
were, with a note that says why there is no float64 verdict.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Callable, Dict, List, Mapping, Optional, Sequence

import numpy as np

from bridge.parity import compare as cmp
from bridge.parity import conditioning

NAME = "tf-float64"
DESCRIPTION = "the TF model in float64 (judges outputs that differ from TF float32; see the notes)"


class NoFloat64(Exception):
    """The model has no float64 twin here; the message says why."""


def doubtful(outputs: Mapping[str, cmp.Comparison]) -> bool:
    """Whether a runtime's comparisons need the float64 run: a float output
    that failed, or that only the saturated-softmax rule excused."""
    return any(_needs(c) for c in outputs.values())


def _needs(c: cmp.Comparison) -> bool:
    return np.dtype(c.dtype).kind == "f" and c.status != "pass" and not c.nonfinite


# The float dtypes and dtype policies a layer's config may name, all made float64:
# a mixed_float16 model's layers compute in float16 and keep float32 variables;
# its float64 twin computes every layer in float64 (the same weights, widened)
FLOAT_POLICIES = ("float32", "float16", "bfloat16", "mixed_float16", "mixed_bfloat16")


def _is_float_policy(v) -> bool:
    if isinstance(v, str):
        return v in FLOAT_POLICIES
    return (isinstance(v, dict) and v.get("class_name") in ("DTypePolicy", "FloatDTypePolicy")
            and isinstance(v.get("config"), dict) and v["config"].get("name") in FLOAT_POLICIES)


def _float64_config(obj, to: str = "float64"):
    """A Keras config with every float dtype (policy: float32, float16,
    bfloat16, mixed_float16, mixed_bfloat16) made `to`."""
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if k == "dtype" and _is_float_policy(v):
                out[k] = to
            else:
                out[k] = _float64_config(v, to)
        return out
    if isinstance(obj, list):
        return [_float64_config(v, to) for v in obj]
    return obj


def _rebuilt(model, config, dtype: str):
    """`model.__class__` from `config` with the model's weights (floats as `dtype`)."""
    try:
        twin = model.__class__.from_config(config)
    except Exception as e:  # noqa: BLE001 - a model that does not rebuild from its config
        raise NoFloat64(f"the model does not rebuild from its config in {dtype} ({type(e).__name__}: "
                        f"{str(e).splitlines()[0][:120] if str(e) else ''})") from None
    weights = model.get_weights()
    theirs = twin.get_weights()
    if len(weights) != len(theirs) or any(np.shape(a) != np.shape(b) for a, b in zip(weights, theirs)):
        raise NoFloat64(f"its {dtype} copy has other weights than the model")
    twin.set_weights([np.asarray(w, dtype) if np.asarray(w).dtype.kind == "f" else w for w in weights])
    return twin


def keras_float64(model, dtype="float64"):
    """The same model computing in float64, its weights copied; NoFloat64 when
    the copy would not be the same model in float64. `dtype="float32"` rebuilds
    the copy the same way at float32 (to check it is the model)."""
    try:
        config = model.get_config()
    except Exception as e:  # noqa: BLE001 - a model without a config
        raise NoFloat64(f"the model does not rebuild from its config in float64 ({type(e).__name__}: "
                        f"{str(e).splitlines()[0][:120] if str(e) else ''})") from None
    twin = _rebuilt(model, _float64_config(config) if dtype == "float64" else config, dtype)
    if dtype != "float64":
        return twin
    import keras
    lower = [layer.name for layer in twin._flatten_layers(include_self=False, recursive=True)
             if not isinstance(layer, keras.Model)  # a nested model's own policy is not what its layers run
             and getattr(layer, "compute_dtype", "float64") not in ("float64", None)
             and any(np.dtype(w.dtype).kind == "f" for w in layer.weights)]
    if lower:
        raise NoFloat64(f"layer {lower[0]!r} does not compute in float64")
    return twin


def keras_float32(model):
    """The model with every layer computing in float32 (a mixed_float16 model's
    float16 layers too), its weights copied: for a road with no float16 kernels
    (TFLite). NoFloat64 (the message says why) when it does not rebuild."""
    return _rebuilt(model, _float64_config(model.get_config(), "float32"), "float32")


def no_verdict(e: BaseException) -> str:
    """Why a float64 run gave no verdict, in one line: NoFloat64's own words, or
    the error that ended the run."""
    if isinstance(e, NoFloat64):
        return str(e)
    return f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"


def float64_outputs(source, arrays: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """The float64 answer of a parity source's Keras model (NoFloat64 for other kinds)."""
    if source.kind != "keras":
        raise NoFloat64(f"a {source.kind} model has no float64 twin (Keras models only)")
    return twin_outputs(source.keras_model(), source.output_names, arrays)


def twin_outputs(model, output_names: Sequence[str], arrays: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """{output: float64 answer} of the Keras `model` on `arrays`; NoFloat64 when
    it has no trustworthy float64 twin."""
    from bridge.parity.tf_common import run_keras
    out = run_keras(checked_twin(model, output_names, arrays), output_names, wide(arrays))
    return checked_outputs(out, output_names)


def checked_twin(model, output_names: Sequence[str], arrays: Mapping[str, np.ndarray],
                 mine: Optional[Mapping[str, np.ndarray]] = None):
    """`model`'s float64 twin (keras_float64), once its copy made the same way
    at float32 gives the model's own answer on `arrays` (`mine`, when the caller
    has it): else it is not the model (a config that does not rebuild what
    runs), and a distance from it would excuse anything."""
    from bridge.parity.tf_common import run_keras
    same = run_keras(keras_float64(model, "float32"), output_names, dict(arrays))
    mine = mine if mine is not None else run_keras(model, output_names, dict(arrays))
    for k in output_names:
        a, b = np.asarray(same.get(k)), np.asarray(mine.get(k))
        if a.shape != b.shape or (a.dtype.kind == "f" and not cmp.compare(b, a, cmp.Tolerance(1e-5)).passed):
            raise NoFloat64(f"its copy rebuilt from the config does not compute what the model does (output {k!r})")
    return keras_float64(model)


def wide(arrays: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """The inputs of a float64 run: float inputs widened, ids as they are."""
    return {k: v.astype(np.float64) if v.dtype.kind == "f" else v for k, v in arrays.items()}


def checked_outputs(out: Mapping[str, np.ndarray], output_names: Sequence[str]) -> Dict[str, np.ndarray]:
    """A float64 run's outputs, or NoFloat64 when one is missing or NaN."""
    missing = [k for k in output_names if k not in out]
    if missing:
        raise NoFloat64(f"the float64 run has no output {missing[0]!r}")
    nan = [k for k in output_names if np.asarray(out[k]).dtype.kind == "f" and np.isnan(out[k]).any()]
    if nan:
        raise NoFloat64(f"the float64 run produced NaN in {nan[0]!r}")
    return {k: np.asarray(out[k]) for k in output_names}


def rejudge(source, arrays: Mapping[str, np.ndarray], reference: Mapping[str, np.ndarray],
            kept: Mapping[str, Mapping[str, np.ndarray]], results: List, make_row: Callable, log=None) -> None:
    """Decides the doubtful outputs of the runtimes in `kept` ({runtime:
    its outputs}) against the float64 run, in place in `results` (the
    RuntimeResults); appends the float64 run's own row (made by `make_row`,
    the RuntimeResult class) with TF float32's distance from it per output."""
    (log or (lambda msg: None))(f"{NAME}: running")
    t0 = time.perf_counter()
    try:
        with source.stages.stage(f"{NAME}: run"):
            f64 = float64_outputs(source, arrays)
    except Exception as e:  # noqa: BLE001 - no float64 verdict: the rows stay as they are, saying why
        why = no_verdict(e)
        for res in results:
            if res.name in kept:
                res.outputs = {k: _with_note(c, f"no float64 verdict: {why}") if _needs(c) else c
                               for k, c in res.outputs.items()}
        return
    tf_vs = {k: cmp.compare(reference[k], f64[k], _tolerance(c)) for r in results if r.name in kept
             for k, c in r.outputs.items() if _needs(c)}
    for res in results:
        if res.name not in kept:
            continue
        for k, c in list(res.outputs.items()):
            if not _needs(c):
                continue
            mine = cmp.compare(kept[res.name][k], f64[k], _tolerance(c))
            excused, note = conditioning.against_float64(res.name, mine, tf_vs[k])
            res.outputs[k] = dataclasses.replace(c, passed=excused,
                                                 status=conditioning.ILL_CONDITIONED if excused else "FAIL",
                                                 note=note)
    row = make_row(NAME, DESCRIPTION, "reference", run_s=time.perf_counter() - t0)
    row.outputs = tf_vs  # TF float32 against float64: the model's own float32 error
    results.append(row)


def _tolerance(c: cmp.Comparison):
    return cmp.Tolerance(c.atol, c.rtol)


def _with_note(c: cmp.Comparison, extra: str) -> cmp.Comparison:
    return dataclasses.replace(c, note=f"{c.note}; {extra}" if c.note else extra)
