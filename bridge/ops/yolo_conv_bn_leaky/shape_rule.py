"""YoloConvBnLeaky's shapes: one rule as data, in the ONNX node's terms (explicit pads,
`shape_rule`) and in TensorFlow's (SAME/VALID/EXPLICIT padding mapped to the node's
pads once, `tf_shape_rule`, evaluated as `infer`), the tensor statements shared.
`resolve_pads` and its helpers give the pads themselves (export, the reference)."""
from __future__ import annotations

from ..shape_rules import (Coalesce, Dim, DimsOf, EachItem, Int, Is, Item, Len, Let, ListOf, Not, Out, Rank, Require,
                           ShapeOf, TfRule, Var, all_of, any_of, ceildiv, maximum, select)
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



def _tensor_rule(axis_rule):
    """The statements on the tensors, the same for both attribute sets: ranks, Cin,
    the per-channel inputs [Cout], then each spatial axis by `axis_rule(axis, ax,
    size, k)` (statements that end with a Let of o_<ax>) and the output."""
    rule = [Require("x", Rank(0).eq(4), "must have rank 4 [N,H,W,Cin], got ", ShapeOf(0)),
            Require("filter", Rank(1).eq(4), "must have rank 4 [KH,KW,Cin,Cout], got ", ShapeOf(1)),
            Require("filter", Dim(0, 3).eq(Dim(1, 2)), "Cin mismatch: x ", ShapeOf(0), " has Cin=", Dim(0, 3),
                    ", filter ", ShapeOf(1), " has Cin=", Dim(1, 2))]
    cout = Var("cout")
    rule.append(Let("cout", Dim(1, 3)))
    for i, arg in enumerate(PARAMS, start=2):
        rule.append(Require(arg, all_of(Rank(i).eq(1), Dim(i, 0).eq(cout)), "must have shape [Cout]=",
                            DimsOf((cout,)), " (filter ", ShapeOf(1), "), got ", ShapeOf(i)))
        rule.append(Let("cout", Coalesce(cout, Dim(i, 0))))
    for axis, ax in ((0, "h"), (1, "w")):
        rule += axis_rule(axis, ax, Dim(0, 1 + axis), Dim(1, axis))
    return tuple(rule) + (Out(0, [Dim(0, 0), Var("o_h"), Var("o_w"), cout]),)


def _explicit_axis(ax, size, k, stride, dilation, before, after):
    """TF's arithmetic on explicit pads (VALID: 0): the output size, refused below 0."""
    eff, num = Var(f"eff_{ax}"), Var(f"num_{ax}")
    return [Let(f"eff_{ax}", (k - 1) * dilation + 1),
            Let(f"num_{ax}", size + before + after - eff + stride),
            Require("x", num.ge(0), f"{ax.upper()} axis of x ", ShapeOf(0), " with filter ", ShapeOf(1),
                    ": computed output size would be negative: input ", Int(size), " + padding ", before, "+",
                    after, ", effective filter ", eff, ", stride ", stride),
            Let(f"o_{ax}", num // stride)]


def shape_rule():
    """In the node's attributes (explicit pads): NHWC out by TF's arithmetic; the
    per-channel inputs are [Cout]."""
    rule = []
    for arg, what in (("strides", "[sh,sw]"), ("dilations", "[dh,dw]")):
        rule.append(Require(arg, all_of(Len(arg).eq(2), EachItem(arg, "Ge", 1)), f"needs 2 positive values {what}, got ",
                            ListOf(arg)))
    rule.append(Require("pads", all_of(Len("pads").eq(4), EachItem("pads", "Ge", 0)),
                        "needs 4 non-negative values [top,left,bottom,right], got ", ListOf("pads")))

    def axis_rule(axis, ax, size, k):
        return _explicit_axis(ax, size, k, Item("strides", axis), Item("dilations", axis), Item("pads", axis),
                              Item("pads", 2 + axis))
    return tuple(rule) + _tensor_rule(axis_rule)


def tf_shape_rule():
    """The same rule in the TensorFlow op's attributes: its attribute checks, then
    its padding mapped to the node's pads once (SAME's from the input size, the odd
    pixel at the end; VALID 0; EXPLICIT its values), then the tensor statements."""
    rule = []
    for arg in ("strides", "dilations"):
        rule += [Require(arg, Len(arg).eq(4), f"needs 4 values [1,{arg[0]}h,{arg[0]}w,1], got ", ListOf(arg, "python")),
                 Require(arg, all_of(Item(arg, 0).eq(1), Item(arg, 3).eq(1)), "must be 1 at N and C ([1,h,w,1]), got ",
                         ListOf(arg, "python")),
                 Require(arg, all_of(Item(arg, 1).ge(1), Item(arg, 2).ge(1)), "must be positive, got ",
                         ListOf(arg, "python"))]
    ep, explicit, same = "explicit_paddings", Is("padding", "EXPLICIT"), Is("padding", "SAME")
    n_ep = Len(ep)
    rule += [Require(ep, any_of(Not(explicit), n_ep.eq(8)),
                     "EXPLICIT padding needs 8 values [0,0,top,bottom,left,right,0,0], got ", ListOf(ep, "python")),
             Require(ep, select(explicit, all_of(*(Item(ep, i).eq(0) for i in (0, 1, 6, 7))), 1),
                     "must be 0 at N and C, got ", ListOf(ep, "python")),
             Require(ep, any_of(Not(explicit), EachItem(ep, "Ge", 0)), "must be non-negative, got ", ListOf(ep, "python")),
             Require(ep, any_of(explicit, n_ep.eq(0)), "must be empty unless padding is EXPLICIT, got ",
                     ListOf(ep, "python"))]

    def axis_rule(axis, ax, size, k):
        stride, dilation = Item("strides", 1 + axis), Item("dilations", 1 + axis)
        eff = (k - 1) * dilation + 1
        # SAME's output is ceil(size / stride), unknown with the filter as TF's; its pads follow
        out = Var(f"same_out_{ax}")
        total = Var(f"same_total_{ax}")
        before, after = Var(f"pad_before_{ax}"), Var(f"pad_after_{ax}")
        return [Let(f"same_out_{ax}", ceildiv(size + (eff - eff), stride)),
                Let(f"same_total_{ax}", maximum((out - 1) * stride + eff - size, 0)),
                Let(f"pad_before_{ax}", select(same, total // 2, select(explicit, Item(ep, 2 + 2 * axis), 0))),
                Let(f"pad_after_{ax}", select(same, total - total // 2, select(explicit, Item(ep, 3 + 2 * axis), 0))),
                *_explicit_axis(ax, size, k, stride, dilation, before, after),
                Let(f"o_{ax}", select(same, out, Var(f"o_{ax}")))]
    return tuple(rule) + _tensor_rule(axis_rule)


# infer_shapes in TF's attributes: the rule above, evaluated (spec._infer)
infer = TfRule(NAME, tf_shape_rule(), 1)
