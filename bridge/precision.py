"""The precision each output of a Keras model is computed in, so that it is
judged by that precision's bounds rather than by its dtype's.

A `mixed_float16` model keeps its variables and (often) its logits in float32
but computes its layers in float16: TF float32 is then itself a float16
computation, ~1e-3 from any other run of the same graph, and a float32 bound
(1e-4) would fail every runtime on rounding alone. An output reached through
any layer that computes in float16 (bfloat16) gets that dtype's default bounds
(bridge.parity.compare.DEFAULTS), and its row says so; an output reached only
through float32 layers keeps its own dtype's. The bound stays per element and
is never scaled by the output's values.

Keras models only (a SavedModel's or an ONNX model's precision is its graph's
own dtypes, which the output dtype already states). Imports no TensorFlow: the
model given is already loaded.

Also the rebuild of a Keras model at another precision (keras_float64: parity's
float64 twin, bridge.parity.float64; keras_float32: what the float32-only roads
export, bridge.converters.road_limits): here, below both, so that an exporter
needs nothing of parity.
"""
from __future__ import annotations

from typing import Dict, Iterable, List, Sequence

import numpy as np

LOWER = ("float16", "bfloat16")   # compute dtypes below float32, lowest first


def output_precision(model, output_names: Sequence[str]) -> Dict[str, str]:
    """{output: "float16" | "bfloat16"} for each output computed through a
    layer whose compute dtype is below float32 (the lowest on its way); outputs
    computed in float32 or wider are left out. A model whose graph cannot be
    walked per output gives every output the lowest dtype of all its layers."""
    names = list(output_names)
    outputs = list(getattr(model, "outputs", None) or [])
    per_output: List[List[object]]
    if outputs and len(outputs) == len(names):
        try:
            per_output = [list(_upstream_layers(t)) for t in outputs]
        except Exception:  # noqa: BLE001 - a graph this walk does not know: judge the model as a whole
            per_output = [_all_layers(model)] * len(names)
    else:
        per_output = [_all_layers(model)] * len(names)
    out = {}
    for name, layers in zip(names, per_output):
        low = lowest(layers)
        if low:
            out[name] = low
    return out


def _computes(layer) -> bool:
    # an InputLayer takes the global policy (mixed_float16 too) but computes nothing
    return type(layer).__name__ != "InputLayer"


def lowest(layers: Iterable[object]) -> str:
    """The lowest compute dtype below float32 among `layers` ("" if none)."""
    found = {getattr(layer, "compute_dtype", None) for layer in layers if _computes(layer)}
    return next((d for d in LOWER if d in found), "")


def policies(model) -> List[str]:
    """The dtype policy names of the layers computing below float32, e.g. ["mixed_float16"]."""
    seen = []
    for layer in _all_layers(model):
        if _computes(layer) and getattr(layer, "compute_dtype", None) in LOWER:
            name = getattr(getattr(layer, "dtype_policy", None), "name", None) or layer.compute_dtype
            if name not in seen:
                seen.append(name)
    return seen


def note(dtype: str, model) -> str:
    """What the row says about an output judged at `dtype`'s bounds."""
    first = next((layer.name for layer in _all_layers(model)
                  if _computes(layer) and getattr(layer, "compute_dtype", None) == dtype), "")
    policy = ", ".join(policies(model)) or dtype
    return f"{dtype} bounds: computed in {dtype} ({policy} layers{f', e.g. {first!r}' if first else ''})"


def _all_layers(model) -> List[object]:
    flatten = getattr(model, "_flatten_layers", None)
    if flatten is None:
        return list(getattr(model, "layers", []))
    return [layer for layer in flatten(include_self=False, recursive=True)]


def _upstream_layers(tensor) -> Iterable[object]:
    """Every layer a functional model's output tensor is computed through
    (a nested model: all its layers)."""
    seen, stack = set(), [tensor]
    while stack:
        t = stack.pop()
        history = getattr(t, "_keras_history", None)
        if history is None:
            continue
        op, node_index = history[0], history[1]
        if (id(op), node_index) in seen:
            continue
        seen.add((id(op), node_index))
        yield op
        if hasattr(op, "_flatten_layers") and getattr(op, "layers", None) is not None:
            yield from _all_layers(op)
        nodes = getattr(op, "_inbound_nodes", None) or []
        if node_index < len(nodes):
            stack.extend(getattr(nodes[node_index], "input_tensors", None) or [])


# -- rebuilding at another precision ------------------------------------------------
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
