"""YoloConvBnLeaky's shapes: the rule as data in the ONNX node's terms (explicit pads),
and `infer` with its helpers in TensorFlow's (SAME/VALID/EXPLICIT padding, TF's
arithmetic)."""
from __future__ import annotations

from ..shape_rules import (Coalesce, Dim, DimsOf, EachItem, Int, Item, Len, Let, ListOf, Out, Rank, Require, ShapeOf,
                           Var, all_of)
from ..spec import OpError, dims
from . import NAME, PARAMS


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



def infer(x, filt, *params, strides, padding, explicit_paddings, dilations, epsilon, alpha):
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



def shape_rule():
    """NHWC out by TF's arithmetic on the node's explicit pads; the per-channel
    inputs are [Cout]. In the node's attributes (pads, not SAME): `infer` states
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
