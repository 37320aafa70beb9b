"""YoloConvBnLeaky: conv2d with inference BatchNorm folded in, then LeakyReLU (docs/ops.md).

Layout NHWC, filter HWIO, padding exactly as tf.nn.conv2d.
"""
from __future__ import annotations

import numpy as np

from .cases import BadInput, Example
from .fusion import Link, Pattern
from .graph_fusion import GraphPattern
from .shape_rules import (Coalesce, Dim, DimsOf, EachItem, Int, Item, Len, Let, ListOf, Out, Rank, Require, ShapeOf,
                          Var, all_of)
from .spec import Arg, Attr, OpError, OpSpec, Tolerance, dims

NAME = "YoloConvBnLeaky"
PARAMS = ("conv_bias", "bn_gamma", "bn_beta", "bn_mean", "bn_variance")


def _check_nhwc4(arg, values):
    if len(values) != 4:
        raise OpError(NAME, arg, f"needs 4 values [1,{arg[0]}h,{arg[0]}w,1], got {list(values)}")
    if values[0] != 1 or values[3] != 1:
        raise OpError(NAME, arg, f"must be 1 at N and C ([1,h,w,1]), got {list(values)}")
    if values[1] < 1 or values[2] < 1:
        raise OpError(NAME, arg, f"must be positive, got {list(values)}")


def check_attrs(strides, padding, explicit_paddings, dilations):
    _check_nhwc4("strides", strides)
    _check_nhwc4("dilations", dilations)
    if padding == "EXPLICIT":
        if len(explicit_paddings) != 8:
            raise OpError(NAME, "explicit_paddings",
                          f"EXPLICIT padding needs 8 values [0,0,top,bottom,left,right,0,0], got {list(explicit_paddings)}")
        if any(explicit_paddings[i] != 0 for i in (0, 1, 6, 7)):
            raise OpError(NAME, "explicit_paddings", f"must be 0 at N and C, got {list(explicit_paddings)}")
        if any(p < 0 for p in explicit_paddings):
            raise OpError(NAME, "explicit_paddings", f"must be non-negative, got {list(explicit_paddings)}")
    elif explicit_paddings:
        raise OpError(NAME, "explicit_paddings", f"must be empty unless padding is EXPLICIT, got {list(explicit_paddings)}")


def output_size(size, k, stride, dilation, padding, before=0, after=0):
    """(out, pad_before, pad_after) along one axis, as TensorFlow computes it.
    Returns (None, None, None) for an unknown size."""
    if size is None or k is None:
        return None, None, None
    eff = (k - 1) * dilation + 1
    if padding == "SAME":
        out = -(-size // stride)
        total = max((out - 1) * stride + eff - size, 0)
        return out, total // 2, total - total // 2  # the odd pixel at the end
    if padding == "VALID":
        before = after = 0
    num = size + before + after - eff + stride
    if num < 0:
        raise ValueError(f"computed output size would be negative: input {size} + padding {before}+{after}, "
                         f"effective filter {eff}, stride {stride}")
    return num // stride, before, after


def resolve_pads(x_shape, filter_shape, strides, padding, explicit_paddings, dilations):
    """[top, left, bottom, right] and the output (OH, OW); None where unknown."""
    pads, out = [None] * 4, [None, None]
    for axis in (0, 1):
        size = None if x_shape is None else x_shape[1 + axis]
        k = None if filter_shape is None else filter_shape[axis]
        before = after = 0
        if padding == "EXPLICIT":
            before, after = explicit_paddings[2 + 2 * axis], explicit_paddings[3 + 2 * axis]
        try:
            o, b, a = output_size(size, k, strides[1 + axis], dilations[1 + axis], padding, before, after)
        except ValueError as e:
            raise OpError(NAME, "x", f"{'HW'[axis]} axis of x {dims(x_shape)} with filter {dims(filter_shape)}: {e}")
        if padding != "SAME":
            b, a = before if padding == "EXPLICIT" else 0, after if padding == "EXPLICIT" else 0
        out[axis], pads[axis], pads[2 + axis] = o, b, a
    return pads, out


def _infer(x, filt, *params, strides, padding, explicit_paddings, dilations, epsilon, alpha):
    check_attrs(strides, padding, explicit_paddings, dilations)
    if x is not None and len(x) != 4:
        raise OpError(NAME, "x", f"must have rank 4 [N,H,W,Cin], got {dims(x)}")
    if filt is not None and len(filt) != 4:
        raise OpError(NAME, "filter", f"must have rank 4 [KH,KW,Cin,Cout], got {dims(filt)}")
    if x is not None and filt is not None and None not in (x[3], filt[2]) and x[3] != filt[2]:
        raise OpError(NAME, "filter", f"Cin mismatch: x {dims(x)} has Cin={x[3]}, filter {dims(filt)} has Cin={filt[2]}")
    cout = None if filt is None else filt[3]
    for name, shape in zip(PARAMS, params):
        if shape is None:
            continue
        if len(shape) != 1 or (None not in (cout, shape[0]) and shape[0] != cout):
            raise OpError(NAME, name, f"must have shape [Cout]={dims((cout,))} (filter {dims(filt)}), got {dims(shape)}")
        if cout is None:
            cout = shape[0]
    _, (oh, ow) = resolve_pads(x, filt, strides, padding, explicit_paddings, dilations)
    n = None if x is None else x[0]
    return ((n, oh, ow, cout),)


def fold(filt, conv_bias, bn_gamma, bn_beta, bn_mean, bn_variance, epsilon):
    """BatchNorm folded into the conv: (W', b'). The conv bias and the BN mean are
    combined once, never added twice (seed 001's pitfall)."""
    s = bn_gamma / np.sqrt(bn_variance + epsilon)
    return filt * s, (conv_bias - bn_mean) * s + bn_beta


def conv2d_nhwc(x, w, pads, strides, dilations):
    """Plain float64 convolution, NHWC x HWIO, explicit [top,left,bottom,right] pads."""
    t, l, b, r = pads
    xp = np.pad(x, ((0, 0), (t, b), (l, r), (0, 0)))
    kh, kw, cin, cout = w.shape
    sh, sw = strides
    dh, dw = dilations
    n, hp, wp, _ = xp.shape
    oh = (hp - (kh - 1) * dh - 1) // sh + 1 if hp >= (kh - 1) * dh + 1 else 0
    ow = (wp - (kw - 1) * dw - 1) // sw + 1 if wp >= (kw - 1) * dw + 1 else 0
    y = np.zeros((n, oh, ow, cout), dtype=np.float64)
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, i * dh: i * dh + (oh - 1) * sh + 1: sh, j * dw: j * dw + (ow - 1) * sw + 1: sw, :]
            if patch.size:
                y += np.tensordot(patch, w[i, j], axes=([3], [0]))
    return y


def _reference(x, filt, conv_bias, bn_gamma, bn_beta, bn_mean, bn_variance, *,
               strides, padding, explicit_paddings, dilations, epsilon, alpha):
    pads, _ = resolve_pads(x.shape, filt.shape, strides, padding, explicit_paddings, dilations)
    w, b = fold(filt, conv_bias, bn_gamma, bn_beta, bn_mean, bn_variance, epsilon)
    z = conv2d_nhwc(x, w, pads, strides[1:3], dilations[1:3]) + b
    return np.where(z > 0, z, alpha * z)


def tf32_error_bound(x, filt, conv_bias, bn_gamma, bn_beta, bn_mean, bn_variance, *,
                     strides, padding, explicit_paddings, dilations, epsilon, alpha):
    """Per output element, the most a product in TF32 can differ from the exact one:
    TF32 keeps 10 mantissa bits of each operand (rounded or truncated: at most 2^-10
    relative each), so 2^-9 * sum_k |x_k| |w'_k|, w' the BN-folded filter. (Float32
    accumulation comes on top: docs/ops.md's float32 bound.) Arguments as the reference's,
    attributes resolved."""
    x, filt = np.asarray(x, np.float64), np.asarray(filt, np.float64)
    pads, _ = resolve_pads(x.shape, filt.shape, strides, padding, explicit_paddings, dilations)
    w, _ = fold(filt, *(np.asarray(a, np.float64) for a in (conv_bias, bn_gamma, bn_beta, bn_mean, bn_variance)),
                epsilon)
    return 2.0 ** -9 * conv2d_nhwc(np.abs(x), np.abs(w), pads, strides[1:3], dilations[1:3])


def _shape_rule():
    """NHWC out by TF's arithmetic on the node's explicit pads; the per-channel
    inputs are [Cout]. In the node's attributes (pads, not SAME): `_infer` states
    the same for TF's, which need the input shapes to become pads."""
    rule = []
    for arg, what in (("strides", "[sh,sw]"), ("dilations", "[dh,dw]")):
        rule.append(Require(arg, all_of(Len(arg).eq(2), EachItem(arg, "Ge", 1)), f"needs 2 positive values {what}, got ",
                            ListOf(arg)))
    rule.append(Require("pads", all_of(Len("pads").eq(4), EachItem("pads", "Ge", 0)),
                        "needs 4 non-negative values [top,left,bottom,right], got ", ListOf("pads")))
    rule.append(Require("x", Rank(0).eq(4), "must have rank 4 [N,H,W,Cin], got ", ShapeOf(0)))
    rule.append(Require("filter", Rank(1).eq(4), "must have rank 4 [KH,KW,Cin,Cout], got ", ShapeOf(1)))
    rule.append(Require("filter", Dim(0, 3).eq(Dim(1, 2)), "Cin mismatch: x ", ShapeOf(0), " has Cin=", Dim(0, 3),
                        ", filter ", ShapeOf(1), " has Cin=", Dim(1, 2)))
    cout = Var("cout")
    rule.append(Let("cout", Dim(1, 3)))
    for i, arg in enumerate(PARAMS, start=2):
        rule.append(Require(arg, all_of(Rank(i).eq(1), Dim(i, 0).eq(cout)), "must have shape [Cout]=",
                            DimsOf((cout,)), " (filter ", ShapeOf(1), "), got ", ShapeOf(i)))
        rule.append(Let("cout", Coalesce(cout, Dim(i, 0))))
    for axis, ax in ((0, "h"), (1, "w")):
        size, k = Dim(0, 1 + axis), Dim(1, axis)
        stride, dilation = Item("strides", axis), Item("dilations", axis)
        before, after = Item("pads", axis), Item("pads", 2 + axis)
        eff, num = Var(f"eff_{ax}"), Var(f"num_{ax}")
        rule += [Let(f"eff_{ax}", (k - 1) * dilation + 1),
                 Let(f"num_{ax}", size + before + after - eff + stride),
                 Require("x", num.ge(0), f"{ax.upper()} axis of x ", ShapeOf(0), " with filter ", ShapeOf(1),
                         ": computed output size would be negative: input ", Int(size), " + padding ", before, "+",
                         after, ", effective filter ", eff, ", stride ", stride),
                 Let(f"o_{ax}", num // stride)]
    return tuple(rule) + (Out(0, [Dim(0, 0), Var("o_h"), Var("o_w"), cout]),)


def _to_onnx(input_shapes, *, strides, padding, explicit_paddings, dilations, epsilon, alpha):
    pads, _ = resolve_pads(input_shapes[0], input_shapes[1], strides, padding, explicit_paddings, dilations)
    if None in pads:
        raise OpError(NAME, "padding", f"SAME padding needs static H and W to resolve pads, got x {dims(input_shapes[0])}")
    return dict(strides=strides[1:3], pads=pads, dilations=dilations[1:3], epsilon=epsilon, alpha=alpha)


def _from_onnx(*, strides, pads, dilations, epsilon, alpha):
    # in the node's own terms, as the onnxruntime kernel words them
    for arg, values, what in (("strides", strides, "[sh,sw]"), ("dilations", dilations, "[dh,dw]")):
        if len(values) != 2 or any(v < 1 for v in values):
            raise OpError(NAME, arg, f"needs 2 positive values {what}, got {dims(values)}")
    if len(pads) != 4 or any(p < 0 for p in pads):
        raise OpError(NAME, "pads", f"needs 4 non-negative values [top,left,bottom,right], got {dims(pads)}")
    t, l, b, r = pads
    return dict(strides=(1, *strides, 1), padding="EXPLICIT", explicit_paddings=(0, 0, t, b, l, r, 0, 0),
                dilations=(1, *dilations, 1), epsilon=epsilon, alpha=alpha)


def _examples():
    rng = np.random.default_rng(12)

    def conv(id, x, k, cout, pads, strides=(1, 1), padding="SAME", dilations=(1, 1), explicit=(),
             epsilon=1e-3, alpha=0.2, **kw):
        """`pads`: the ONNX node's [top, left, bottom, right], worked out by hand."""
        cin = x[3]
        filt = rng.standard_normal((*k, cin, cout)) / np.sqrt(k[0] * k[1] * max(cin, 1))
        params = [rng.standard_normal(cout) * 0.3 for _ in range(4)] + [rng.uniform(0.5, 2.0, cout)]
        attrs = dict(strides=(1, *strides, 1), padding=padding, explicit_paddings=explicit,
                     dilations=(1, *dilations, 1), epsilon=epsilon, alpha=alpha)
        onnx = dict(strides=strides, pads=pads, dilations=dilations, epsilon=epsilon, alpha=alpha)
        return Example(id, (rng.standard_normal(x), filt, *params), attrs, onnx, **kw)

    return [
        # SAME, even input, stride 2: total padding 1, the odd pixel at the bottom/right
        conv("same-s2-even", (1, 8, 8, 3), (3, 3), 5, [0, 0, 1, 1], strides=(2, 2)),
        conv("same-s2-mixed", (2, 6, 7, 4), (3, 3), 3, [0, 1, 1, 1], strides=(2, 2)),
        conv("same-k2", (1, 5, 6, 2), (2, 2), 4, [0, 0, 1, 1]),
        conv("same-s1", (1, 5, 6, 3), (3, 3), 4, [1, 1, 1, 1]),
        conv("valid-s2-odd", (2, 7, 9, 2), (3, 3), 4, [0, 0, 0, 0], strides=(2, 2), padding="VALID"),
        conv("valid-s12", (1, 8, 9, 2), (2, 3), 4, [0, 0, 0, 0], strides=(1, 2), padding="VALID"),
        conv("dilation2", (1, 9, 10, 4), (3, 3), 6, [2, 2, 2, 2], dilations=(2, 2)),
        # effective filter 5, even input, stride 2: total padding 3 -> (1, 2)
        conv("dilation2-s2-even", (1, 8, 8, 2), (3, 3), 3, [1, 1, 2, 2], strides=(2, 2), dilations=(2, 2)),
        conv("explicit-asym-K360", (1, 6, 5, 40), (3, 3), 40, [2, 1, 0, 3], padding="EXPLICIT",
             explicit=(0, 0, 2, 0, 1, 3, 0, 0)),
        conv("1x1-cout33", (2, 5, 3, 8), (1, 1), 33, [0, 0, 0, 0]),
        conv("all-1", (1, 1, 1, 1), (1, 1), 1, [0, 0, 0, 0]),
        conv("empty-batch", (0, 5, 5, 3), (3, 3), 4, [1, 1, 1, 1]),
        conv("alpha0-eps0.5", (1, 4, 5, 3), (3, 3), 2, [1, 1, 1, 1], epsilon=0.5, alpha=0.0),
        conv("alpha-negative-defaults", (1, 4, 4, 2), (3, 3), 3, [1, 1, 1, 1], epsilon=1e-5, alpha=-0.3),
        conv("26x26x64-s2", (1, 26, 26, 64), (3, 3), 64, [0, 0, 1, 1], strides=(2, 2), large=True),
    ]


def _bad_inputs():
    p8 = ((8,),) * 5  # conv_bias, bn_gamma, bn_beta, bn_mean, bn_variance
    x, f = (1, 5, 5, 3), (3, 3, 3, 8)

    def bad(id, shapes, arg, message, attrs=None, **kw):
        return BadInput(id, shapes, attrs or {}, arg, f"{NAME}: argument '{arg}': {message}", **kw)

    return [
        bad("x-rank", ((5, 5, 3), f, *p8), "x", "must have rank 4 [N,H,W,Cin], got [5,5,3]"),
        bad("filter-rank", (x, (3, 3, 3), *p8), "filter", "must have rank 4 [KH,KW,Cin,Cout], got [3,3,3]"),
        bad("cin", (x, (3, 3, 4, 8), *p8), "filter", "Cin mismatch: x [1,5,5,3] has Cin=3, filter [3,3,4,8] has Cin=4"),
        bad("bias-size", (x, f, (7,), *p8[1:]), "conv_bias", "must have shape [Cout]=[8] (filter [3,3,3,8]), got [7]"),
        bad("variance-rank", (x, f, *p8[:4], (1, 8)), "bn_variance",
            "must have shape [Cout]=[8] (filter [3,3,3,8]), got [1,8]"),
        bad("filter-larger-than-x", ((1, 1, 5, 3), f, *p8), "x",
            "H axis of x [1,1,5,3] with filter [3,3,3,8]: computed output size would be negative", dict(padding="VALID"),
            onnx_attrs={}),
        bad("strides-3", (x, f, *p8), "strides", "needs 4 values [1,sh,sw,1], got [1, 2, 2]", dict(strides=(1, 2, 2)),
            kind="attr", onnx_attrs=dict(strides=(1, 2, 2)),
            onnx_message=f"{NAME}: argument 'strides': needs 2 positive values [sh,sw], got [1,2,2]"),
        bad("strides-batch", (x, f, *p8), "strides", "must be 1 at N and C ([1,h,w,1]), got [2, 1, 1, 1]",
            dict(strides=(2, 1, 1, 1)), kind="attr", in_onnx=False),
        bad("strides-zero", (x, f, *p8), "strides", "must be positive, got [1, 0, 1, 1]", dict(strides=(1, 0, 1, 1)),
            kind="attr", onnx_attrs=dict(strides=(0, 1)),
            onnx_message=f"{NAME}: argument 'strides': needs 2 positive values [sh,sw], got [0,1]"),
        bad("dilations-channel", (x, f, *p8), "dilations", "must be 1 at N and C ([1,h,w,1]), got [1, 1, 1, 2]",
            dict(dilations=(1, 1, 1, 2)), kind="attr", in_onnx=False),
        bad("padding", (x, f, *p8), "padding", "'FULL' is not one of", dict(padding="FULL"), kind="attr",
            in_onnx=False),
        bad("explicit-without-8", (x, f, *p8), "explicit_paddings", "EXPLICIT padding needs 8 values",
            dict(padding="EXPLICIT", explicit_paddings=(0, 0, 1, 1)), kind="attr",
            onnx_attrs=dict(pads=(1, 1, -1, 0)),
            onnx_message=f"{NAME}: argument 'pads': needs 4 non-negative values [top,left,bottom,right], got [1,1,-1,0]"),
    ]


def _body(b, x, filt, conv_bias, bn_gamma, bn_beta, bn_mean, bn_variance, *, outputs):
    """The decomposition into standard ONNX ops (the Body protocol, bridge/ops/body.py): BatchNorm
    folded into the weights (constant folding removes it when the parameters are
    initializers), then an NCHW Conv and LeakyRelu between transposes."""
    (y,) = outputs
    eps = b.like(b.attr_const("epsilon"), x)
    s = b.op("Div", bn_gamma, b.op("Sqrt", b.op("Add", bn_variance, eps)))
    w = b.op("Transpose", b.op("Mul", filt, s), perm=[3, 2, 0, 1])          # HWIO -> OIHW
    bias = b.op("Add", b.op("Mul", b.op("Sub", conv_bias, bn_mean), s), bn_beta)
    z = b.op("Conv", b.op("Transpose", x, perm=[0, 3, 1, 2]), w, bias,        # NHWC -> NCHW
             strides=b.ref("strides"), pads=b.ref("pads"), dilations=b.ref("dilations"))
    b.op("Transpose", b.op("LeakyRelu", z, alpha=b.ref("alpha")), perm=[0, 2, 3, 1], out=y)


# -- the TensorFlow subgraphs it replaces (graph_fusion): [Pad ->] Conv2D [->
# BiasAdd] -> FusedBatchNormV3 (inference) or its folded Mul/Add (Keras's
# BatchNormalization as saved) -> LeakyRelu or Maximum(y, a*y). The affine map
# between the conv and the activation is read off by evaluating that part of the
# subgraph (BN scale and shift per channel; the conv bias folded in); the rewriter
# then checks the whole subgraph numerically.
GRAPH_OPS = ("Pad", "PadV2", "Conv2D", "BiasAdd", "Mul", "AddV2", "Add", "Sub", "RealDiv", "FusedBatchNorm",
             "FusedBatchNormV3", "LeakyRelu", "Maximum", "Identity")


def _one_conv(region) -> bool:
    return sum(n.op == "Conv2D" for n in region.nodes) == 1


def _leaky(region):
    """(alpha, the tensor before the activation) or the reason there is none."""
    end = region.end
    if end.op == "LeakyRelu":
        return float(end.attrs.get("alpha", 0.2)), end.inputs[0]
    for y, other in (end.inputs, end.inputs[::-1]):
        mul = region.node(other)
        if mul is None or mul.op != "Mul" or y not in mul.inputs:
            continue
        a = region.constant(mul.inputs[1] if mul.inputs[0] == y else mul.inputs[0])
        if a is not None and a.size == 1 and 0 <= float(a) < 1:
            return float(a), y
    return f"{end} is not max(y, a*y) with a constant 0 <= a < 1"


def _between(region, conv, tensor):
    """The region's nodes after `conv` that `tensor` is computed from (itself included)."""
    out, stack = [], [tensor]
    while stack:
        n = region.node(stack.pop())
        if n is not None and n is not conv and n not in out:
            out.append(n)
            stack.extend(n.inputs)
    return out


def _graph_identify(region):
    conv = next(n for n in region.nodes if n.op == "Conv2D")
    if conv.attrs.get("data_format", "NHWC") != "NHWC":
        return f"{conv} is {conv.attrs.get('data_format')}; the fused op is NHWC"
    w = region.constant(conv.inputs[1])
    if w is None:
        return f"the filter of {conv} is not a constant"
    attrs = dict(strides=conv.attrs.get("strides", (1, 1, 1, 1)), dilations=conv.attrs.get("dilations", (1, 1, 1, 1)),
                 padding=conv.attrs["padding"], explicit_paddings=conv.attrs.get("explicit_paddings", ()))
    for pad in (n for n in region.nodes if n.op in ("Pad", "PadV2")):
        p = region.constant(pad.inputs[1])
        value = region.constant(pad.inputs[2]) if pad.op == "PadV2" else np.zeros(())
        if p is None or p.shape != (4, 2) or p[0].any() or p[3].any() or value is None or value.any():
            return f"{pad} is not a zero padding of H and W only"
        if attrs["padding"] != "VALID":
            return f"{conv} pads itself ({attrs['padding']}) after {pad}: the op takes one padding"
        attrs.update(padding="EXPLICIT", explicit_paddings=(0, 0, *(int(v) for v in p[1:3].ravel()), 0, 0))
    leaky = _leaky(region)
    if isinstance(leaky, str):
        return leaky
    alpha, pre = leaky
    for bn in (n for n in region.nodes if n.op.startswith("FusedBatchNorm")):
        if bn.attrs.get("is_training", True):
            return f"{bn} is in training mode (batch statistics)"
    if not any(n.op.startswith("FusedBatchNorm") or n.op in ("Mul", "RealDiv") for n in _between(region, conv, pre)):
        return f"no BatchNormalization (nor its folded Mul/Add) between {conv} and {region.end}"
    cout = w.shape[3]
    # the BN (and conv bias) as the affine map y = conv * scale + shift, per channel
    zero = region.evaluate(None, given={conv.name: np.zeros((1, 1, 1, cout))}, at=pre)
    one = region.evaluate(None, given={conv.name: np.ones((1, 1, 1, cout))}, at=pre)
    shift = np.broadcast_to(zero, (1, 1, 1, cout)).reshape(cout)
    scale = np.broadcast_to(one, (1, 1, 1, cout)).reshape(cout) - shift
    zeros = np.zeros(cout)
    return (w, zeros, scale, shift, zeros, np.ones(cout)), dict(attrs, epsilon=0.0, alpha=alpha)


def _graph_probe(region):
    conv = next(n for n in region.nodes if n.op == "Conv2D")
    w = region.constant(conv.inputs[1])
    n, h, wd, c = region.x_shape
    strides, dil = conv.attrs.get("strides", (1, 1, 1, 1)), conv.attrs.get("dilations", (1, 1, 1, 1))
    size = [(k - 1) * d + 1 + s + 1 for k, d, s in zip(w.shape[:2], dil[1:3], strides[1:3])]
    return (1, min(h or size[0], size[0]), min(wd or size[1], size[1]), c)


def _graph_folds(region):
    return ("zero_padding",) if any(n.op in ("Pad", "PadV2") for n in region.nodes) else ()


GRAPH_FUSION = (GraphPattern("conv_bn_leaky", "[Pad ->] Conv2D [-> BiasAdd] -> FusedBatchNormV3 (inference) or its "
                             "Mul/Add -> LeakyRelu or Maximum(y, a*y)",
                             ends=("LeakyRelu", "Maximum"), ops=GRAPH_OPS, start=("Conv2D", "Pad", "PadV2"),
                             when=_one_conv, identify=_graph_identify, probe=_graph_probe, folds=_graph_folds),)


SPEC = OpSpec(
    name=NAME,
    module="yolo_conv_bn_leaky",
    doc="2-D convolution with inference BatchNorm folded into weights and bias, then LeakyReLU.",
    inputs=(Arg("x", "[N,H,W,Cin]"), Arg("filter", "[KH,KW,Cin,Cout]"), Arg("conv_bias", "[Cout]"),
            Arg("bn_gamma", "[Cout]"), Arg("bn_beta", "[Cout]"), Arg("bn_mean", "[Cout]"),
            Arg("bn_variance", "[Cout]")),
    outputs=(Arg("y", "[N,OH,OW,Cout]"),),
    attrs=(Attr("strides", "list(int)", (1, 1, 1, 1), doc="[1,sh,sw,1]"),
           Attr("padding", "string", "SAME", allowed=("SAME", "VALID", "EXPLICIT")),
           Attr("explicit_paddings", "list(int)", (), doc="TF Conv2D's 8 values"),
           Attr("dilations", "list(int)", (1, 1, 1, 1), doc="[1,dh,dw,1]"),
           Attr("epsilon", "float", 1e-5, doc="BatchNorm epsilon"),
           Attr("alpha", "float", 0.1, doc="LeakyReLU slope")),
    onnx_attrs=(Attr("strides", "list(int)", (1, 1)),
                Attr("pads", "list(int)", (0, 0, 0, 0), doc="[top,left,bottom,right]"),
                Attr("dilations", "list(int)", (1, 1)),
                Attr("epsilon", "float", 1e-5),
                Attr("alpha", "float", 0.1)),
    dtypes=("float32", "float16"),
    tolerance={"float32": Tolerance(1e-4), "float16": Tolerance(4e-3)},
    _reference=_reference,
    _infer=_infer,
    shape_rule=_shape_rule(),
    _to_onnx=_to_onnx,
    _from_onnx=_from_onnx,
    _examples=_examples,
    _bad_inputs=_bad_inputs,
    fusion=(Pattern("conv_bn_leaky", "Conv2D -> BatchNormalization -> LeakyReLU (or Activation('leaky_relu'), "
                    "at its own slope)",
                    (Link("Conv2D"), Link("BatchNormalization"), Link(("LeakyReLU", "Activation"), "leaky_re_lu")),
                    hook="bridge.converters.fuse_yolo_conv_bn_leaky"),
            Pattern("zero_padding", "ZeroPadding2D before a VALID Conv2D (folded into EXPLICIT pads)",
                    (Link("ZeroPadding2D"), Link("Conv2D")), folded_into="conv_bn_leaky")),
    graph_fusion=GRAPH_FUSION,
    body=_body,
)
