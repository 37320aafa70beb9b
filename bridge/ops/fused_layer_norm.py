"""FusedLayerNorm: layer normalization over the last axis (ops.md)."""
from __future__ import annotations

import numpy as np

from .spec import Arg, Attr, OpError, OpSpec, Tolerance, dims

NAME = "FusedLayerNorm"


def _infer(x, gamma, beta, *, epsilon):
    if x is not None and len(x) == 0:
        raise OpError(NAME, "x", "must have rank >= 1, got a scalar (shape [])")
    h = None if x is None else x[-1]
    for arg, shape in (("gamma", gamma), ("beta", beta)):
        if shape is None:
            continue
        if len(shape) != 1:
            raise OpError(NAME, arg, f"must have shape [H]={dims((h,))} (the last dim of x {dims(x)}), got {dims(shape)}")
        if h is not None and shape[0] is not None and shape[0] != h:
            raise OpError(NAME, arg, f"must have shape [H]=[{h}] (the last dim of x {dims(x)}), got {dims(shape)}")
    return (x,)


def _reference(x, gamma, beta, *, epsilon):
    if x.shape[-1] == 0:  # rows of nothing: nothing to normalise (and no mean of an empty row)
        return np.zeros(x.shape, np.result_type(x, gamma, beta))
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return gamma * (x - mean) / np.sqrt(var + epsilon) + beta


def reference_backward(dy, x, gamma, *, epsilon):
    """(dx, dgamma, dbeta) in float64 for the output gradient dy (biased variance,
    as the forward): dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma."""
    dy, x, gamma = (np.asarray(a, dtype=np.float64) for a in (dy, x, gamma))
    h = x.shape[-1]
    if h == 0 or x.size == 0:
        return np.zeros(x.shape), np.zeros(h), np.zeros(h)
    mean = x.mean(axis=-1, keepdims=True)
    rstd = 1.0 / np.sqrt(((x - mean) ** 2).mean(axis=-1, keepdims=True) + epsilon)
    xhat = (x - mean) * rstd
    g = dy * gamma
    dx = rstd * (g - g.mean(axis=-1, keepdims=True) - xhat * (g * xhat).mean(axis=-1, keepdims=True))
    return dx, (dy * xhat).reshape(-1, h).sum(axis=0), dy.reshape(-1, h).sum(axis=0)


def _same(_shapes=None, **attrs):
    return dict(attrs)


SPEC = OpSpec(
    name=NAME,
    module="fused_layer_norm",
    doc="Layer normalization over the last axis, fused into one pass over memory.",
    inputs=(Arg("x", "[..., H], rank >= 1"), Arg("gamma", "[H]"), Arg("beta", "[H]")),
    outputs=(Arg("y", "same shape as x"),),
    attrs=(Attr("epsilon", "float", 1e-6, doc="added to the variance"),),
    onnx_attrs=(Attr("epsilon", "float", 1e-6),),
    dtypes=("float32", "float16"),
    tolerance={"float32": Tolerance(1e-5), "float16": Tolerance(2e-3)},
    _reference=_reference,
    _infer=_infer,
    _to_onnx=_same,
    _from_onnx=lambda **a: dict(a),
)
