"""The float64 twin of a Keras model: its config with every float dtype
policy made float64, the weights copied, checked to be the model (the copy
made the same way at float32 must give the model's answer). A deep model can
amplify float32 rounding past the tolerance; TF float32 is then no better an
answer than the runtime it judges, and only a more precise run can tell
rounding from a bug: bridge.parity.truth judges every runtime against this
twin's answer, and `bridge export`'s check asks it about the outputs that fail.

Only Keras models (a SavedModel's graph is fixed at float32), and only when
every layer of the copy computes in float64; otherwise NoFloat64 says why
there is no float64 verdict.
"""
from __future__ import annotations

from typing import Dict, Mapping, Optional, Sequence

import numpy as np

from bridge.parity import compare as cmp

NAME = "tf-float64"


class NoFloat64(Exception):
    """The model has no float64 twin here; the message says why."""


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
