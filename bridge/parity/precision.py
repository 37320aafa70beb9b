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
"""
from __future__ import annotations

from typing import Dict, Iterable, List, Sequence

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
