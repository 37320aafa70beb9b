"""FusedLayerNorm: layer normalization over the last axis (docs/ops.md)."""
from __future__ import annotations

import numpy as np

from .cases import BadInput, Example
from .fusion import Link, Pattern
from .graph_fusion import GraphPattern
from .shape_rules import Dim, DimsOf, Int, Let, OutSame, Rank, Require, ShapeOf, Var
from .spec import Arg, Attr, OpSpec, Tolerance

NAME = "FusedLayerNorm"


def _shape_rule():
    """gamma and beta are [H], H the last dim of x; y is x."""
    h = Var("h")
    rule = [Require("x", Rank(0).ne(0), "must have rank >= 1, got a scalar (shape [])"), Let("h", Dim(0, -1))]
    for i, arg in ((1, "gamma"), (2, "beta")):
        rule.append(Require(arg, Rank(i).eq(1), "must have shape [H]=", DimsOf((h,)), " (the last dim of x ",
                            ShapeOf(0), "), got ", ShapeOf(i)))
        rule.append(Require(arg, Dim(i, 0).eq(h), "must have shape [H]=[", Int(h), "] (the last dim of x ",
                            ShapeOf(0), "), got ", ShapeOf(i)))
    return tuple(rule) + (OutSame(0, 0),)


def _reference(x, gamma, beta, *, epsilon):
    if x.shape[-1] == 0:  # rows of nothing: nothing to normalise (and no mean of an empty row)
        return np.zeros(x.shape, np.result_type(x, gamma, beta))
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return gamma * (x - mean) / np.sqrt(var + epsilon) + beta


# The gradients' bounds, in multiples of docs/ops.md's forward bound: dgamma and dbeta
# are sums over rows.
BACKWARD_SCALE = {"float32": 10.0, "float16": 2.0}


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


def _examples():
    rng = np.random.default_rng(11)

    def row(id, shape, epsilon=None, mean=1.0, std=3.0, **kw):
        h = shape[-1]
        x = mean + std * rng.standard_normal(shape)
        attrs = {} if epsilon is None else {"epsilon": epsilon}
        return Example(id, (x, rng.standard_normal(h), rng.standard_normal(h)), attrs,
                       {"epsilon": 1e-6 if epsilon is None else epsilon}, **kw)

    return [
        row("3x5x7", (3, 5, 7)),
        row("rank1", (33,), 1e-3),
        row("H=1", (4, 1)),  # the variance is 0: y = beta
        row("1x1", (1, 1), 1e-5),
        row("2x3x1x70", (2, 3, 1, 70)),
        row("empty-batch", (0, 6)),
        row("empty-middle", (2, 0, 16)),
        row("odd-3x1025", (3, 1025), 1e-5),
        row("eps-1e-12", (2, 64), 1e-12),
        row("eps-0.5", (3, 40), 0.5),
        # A large mean cancels the variance away unless the sums are shifted
        # (float32 only: float16 holds 3e4 to 16 units).
        row("mean3e4-H1024", (4, 1024), 1e-5, mean=3e4, std=1.0, dtypes=("float32",)),
        row("mean-3e3-std0.1", (3, 37), 1e-5, mean=-3e3, std=0.1, dtypes=("float32",)),
        row("mean1e4-H4096", (2, 4096), 1e-5, mean=1e4, std=1.0, dtypes=("float32",), large=True),
        row("H9001", (2, 9001), large=True),
    ]


def _bad_inputs():
    def shape(id, x, g, b, arg, message):
        return BadInput(id, (x, g, b), {}, arg, f"{NAME}: argument '{arg}': {message}")

    return [
        shape("gamma-size", (2, 4), (3,), (4,), "gamma", "must have shape [H]=[4] (the last dim of x [2,4]), got [3]"),
        shape("beta-size", (2, 3, 5), (5,), (6,), "beta", "must have shape [H]=[5] (the last dim of x [2,3,5]), got [6]"),
        shape("gamma-rank", (2, 4), (1, 4), (4,), "gamma", "must have shape [H]=[4] (the last dim of x [2,4]), got [1,4]"),
        shape("beta-scalar", (2, 4), (4,), (), "beta", "must have shape [H]=[4] (the last dim of x [2,4]), got []"),
        shape("gamma-empty", (2, 4), (0,), (4,), "gamma", "must have shape [H]=[4] (the last dim of x [2,4]), got [0]"),
        shape("x-scalar", (), (1,), (1,), "x", "must have rank >= 1, got a scalar (shape [])"),
    ]


def _body(b, x, gamma, beta, *, outputs):
    """The decomposition into standard ONNX ops (the Body protocol, bridge/ops/body.py)."""
    (y,) = outputs
    # In float32 (docs/ops.md: float16 accumulates in float32), on the row shifted by
    # its float32 mean m0: x - m0 is exact where x is near m0, and normalising it
    # removes what m0 missed. Unshifted, a mean of 3e4 costs ~1e-3 of y: the mean's
    # own float32 rounding (2^-10 at 3e4), in onnxruntime and onnx's evaluator alike.
    to_float = b.dtype != b.FLOAT
    xf = x
    if to_float:
        xf, gamma, beta = (b.op("Cast", t, to=b.FLOAT) for t in (x, gamma, beta))
    xs = b.op("Sub", xf, b.reduce_mean(xf, [-1]))
    y32 = b.fresh("y") if to_float else y
    if b.opset >= 17:
        b.op("LayerNormalization", xs, gamma, beta, out=y32, axis=-1, epsilon=b.ref("epsilon"))
    else:
        # The decomposition onnxruntime's LayerNormFusion recognises: the square must
        # be Pow(d, 2) (it does not match Mul(d, d)), mean and variance by ReduceMean.
        d = b.op("Sub", xs, b.reduce_mean(xs, [-1]))
        var = b.reduce_mean(b.op("Pow", d, b.const(2.0, "float32")), [-1])
        std = b.op("Sqrt", b.op("Add", var, b.attr_const("epsilon")))
        b.op("Add", b.op("Mul", b.op("Div", d, std), gamma), beta, out=y32)
    if to_float:
        if b.dtype is None:
            b.op("CastLike", y32, x, out=y)
        else:
            b.op("Cast", y32, out=y, to=b.dtype)


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
    shape_rule=_shape_rule(),
    _to_onnx=_same,
    _from_onnx=lambda **a: dict(a),
    _examples=_examples,
    _bad_inputs=_bad_inputs,
    fusion=(Pattern("layer_norm", "LayerNormalization over the last axis", (Link("LayerNormalization"),),
                    hook="bridge.converters.fuse_fused_layer_norm"),),
    graph_fusion=GRAPH_FUSION,
    body=_body,
)
