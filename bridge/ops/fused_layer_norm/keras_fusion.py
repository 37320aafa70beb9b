"""FusedLayerNorm's Keras matcher (its spec's fusion hook): a
LayerNormalization over the last axis becomes one FusedLayerNormalization,
whether it is a node of the model's graph (3-D, or ConvNeXt's 4-D channels-last)
or a sublayer that a layer calls from its own Python `call` (keras_hub's
transformer blocks: `is_sublayer` / `fuse_sublayer`, used by the rewriter's
copy of that layer). RMS norms are near misses."""
from __future__ import annotations

from bridge.converters.fuse_layers_common import built_input_shape, dtype_problem

KEY = "layer_norm"


def _norm_problem(ln, rank: int):
    """Why the fused op cannot stand for LayerNormalization `ln` on a rank-`rank`
    input, or None."""
    from . import SPEC
    axes = sorted(a % rank for a in (ln.axis if isinstance(ln.axis, (list, tuple)) else [ln.axis]))
    if axes != [rank - 1]:
        return f"LayerNormalization over axes {axes} of a rank-{rank} input, not only the last axis"
    if getattr(ln, "rms_scaling", False):
        return "LayerNormalization has rms_scaling=True (RMS norm, no mean)"
    return dtype_problem(SPEC, ln)


def _make(ln, label, layer_name):
    from .keras_layer import FusedLayerNormalization
    return FusedLayerNormalization(epsilon=ln.epsilon, center=ln.center, scale=ln.scale, replaces=[label],
                                   name=layer_name, dtype=ln.dtype_policy)


def _weights(ln):
    return ([ln.gamma] if ln.scale else []) + ([ln.beta] if ln.center else [])


def match(rw, node) -> None:
    import keras
    op = node.operation
    if type(op).__name__ == "RMSNormalization":
        return rw.report.skip(KEY, [op.name], "RMSNormalization (no mean); the fused op is a "
                                              "LayerNormalization: it stays as it is")
    if not isinstance(op, keras.layers.LayerNormalization):
        return
    problem = _norm_problem(op, len(node.input_tensors[0].shape))
    if problem:
        return rw.report.skip(KEY, [op.name], problem)
    rw.plan(node, KEY, op.name, lambda name: _make(op, op.name, name), lambda: _weights(op), node, [], [op.name])


def is_sublayer(layer) -> bool:
    import keras
    return isinstance(layer, keras.layers.LayerNormalization)


def fuse_sublayer(rw, ln, label, where):
    """A built FusedLayerNormalization holding `ln`'s weights, or None (reported)."""
    shape = built_input_shape(ln)
    problem = ("LayerNormalization was never called (no input shape)" if shape is None
               else _norm_problem(ln, len(shape)))
    if problem:
        return rw.report.skip(KEY, [label], f"{where}: {problem}")
    fused = _make(ln, label, f"{ln.name}_fused")
    fused.build(tuple(shape))
    for dst, src in zip(fused.weights, _weights(ln)):
        dst.assign(src)
    rw.report.add_block(KEY, label, [label])
    return fused
