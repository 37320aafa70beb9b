"""What FusedLayerNorm replaces: the Keras pattern (matched by keras_fusion.py) and the
TensorFlow graph pattern (bridge/ops/graph_fusion.py)."""
from __future__ import annotations

import numpy as np

from ..fusion import Link, Pattern
from ..graph_fusion import GraphPattern


# -- the TensorFlow subgraphs it replaces (graph_fusion): any algebraic form of
# (x - mean) * rsqrt(var + eps) * gamma + beta over the last axis (Keras's
# LayerNormalization as saved, tf.nn.moments, tf.nn.batch_normalization,
# hand-written chains), with or without gamma and beta, found by its Mean of x
# and read off by probing the subgraph; the rewriter then checks it numerically.
GRAPH_OPS = ("Mean", "Sub", "SquaredDifference", "Square", "Mul", "AddV2", "Add", "Rsqrt", "Sqrt", "RealDiv",
             "Neg", "StopGradient", "Identity", "Reciprocal", "Pow", "BiasAdd")



def _means_of_x(region):
    return [n for n in region.nodes if n.op == "Mean" and region.is_x(n.inputs[0])]



def _normalises(region) -> bool:
    return bool(_means_of_x(region)) and any(n.op in ("Rsqrt", "Sqrt", "Reciprocal", "Pow") for n in region.nodes)



def _graph_identify(region):
    shape = region.x_shape
    if shape is None:
        return "the input's rank is unknown"
    rank = len(shape)
    for m in _means_of_x(region):
        axes = region.constant(m.inputs[1])
        if axes is None:
            return f"{m} reduces over axes that are no constants"
        axes = sorted({int(a) % rank for a in np.atleast_1d(axes)})
        if axes != [rank - 1]:
            return f"normalises over axes {axes} of a rank-{rank} input, not only the last axis"
    h = shape[-1]
    if h is None:
        return "the last axis of the input has no static size"

    def run(rows):  # [k, h] -> the subgraph's [k, h]
        if rank == 1:
            return np.stack([region.evaluate(r) for r in rows])
        return np.asarray(region.evaluate(rows.reshape((len(rows),) + (1,) * (rank - 2) + (h,)))).reshape(len(rows), h)

    if h == 1:  # a row of one: y = beta whatever gamma and epsilon
        return (np.ones(1), run(np.full((1, 1), 0.5))[0]), {}
    # rows of mean 0 and variance 1 with no zero entry in one of the two
    u = np.where(np.arange(h) % 2 == 0, 1.0, -1.0)
    if h % 2:
        u[-1] = 0.0
    u = (u - u.mean()) / u.std()
    v = np.roll(u, 1)
    small = 1e-4
    y = run(np.stack([u, -u, small * u, v, -v, small * v]))
    beta = (y[0] + y[1]) / 2
    pick = np.abs(u) > 0.25
    a1 = np.where(pick, (y[0] - beta) / np.where(pick, u, 1), (y[3] - beta) / np.where(pick, 1, v))
    a2 = np.where(pick, (y[2] - beta) / np.where(pick, small * u, 1), (y[5] - beta) / np.where(pick, 1, small * v))
    live = np.abs(a2) > 0
    if not live.any():  # gamma == 0: y = beta
        return (np.zeros(h), beta), {}
    q = np.median((a1[live] / a2[live]) ** 2)  # (small^2 + eps) / (1 + eps)
    eps = max(float((q - small ** 2) / (1 - q)), 0.0)
    return (a1 * np.sqrt(1 + eps), beta), {"epsilon": eps}



def _graph_probe(region):
    shape = region.x_shape
    return tuple([3] + [min(d or 2, 2) for d in shape[1:-1]] + [shape[-1]]) if len(shape) > 1 else tuple(shape)



GRAPH_FUSION = (GraphPattern("layer_norm", "layer norm over the last axis (any TF form of it)",
                             ends=("AddV2", "Add", "Mul", "BiasAdd", "Sub", "RealDiv"), ops=GRAPH_OPS,
                             when=_normalises, identify=_graph_identify, probe=_graph_probe),)


KERAS_FUSION = (Pattern("layer_norm", "LayerNormalization over the last axis", (Link("LayerNormalization"),),
                        hook="bridge.ops.fused_layer_norm.keras_fusion"),)
