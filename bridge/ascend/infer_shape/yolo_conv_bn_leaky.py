"""YoloConvBnLeaky's GE shape function: NHWC out by TF's arithmetic on the node's
explicit pads; the per-channel inputs are [Cout]."""
from __future__ import annotations

from typing import List

from bridge.ascend.ge_custom.rules import (Coalesce, Dim, DimsOf, EachItem, Int, Item, Len, Let, ListOf, Out, Rank,
                                           Require, ShapeOf, Statement, Var, all_of)


def table(spec) -> List[Statement]:
    t: List[Statement] = []
    for arg, what in (("strides", "[sh,sw]"), ("dilations", "[dh,dw]")):
        t.append(Require(arg, all_of(Len(arg).eq(2), EachItem(arg, "Ge", 1)), f"needs 2 positive values {what}, got ",
                         ListOf(arg)))
    t.append(Require("pads", all_of(Len("pads").eq(4), EachItem("pads", "Ge", 0)),
                     "needs 4 non-negative values [top,left,bottom,right], got ", ListOf("pads")))
    t.append(Require("x", Rank(0).eq(4), "must have rank 4 [N,H,W,Cin], got ", ShapeOf(0)))
    t.append(Require("filter", Rank(1).eq(4), "must have rank 4 [KH,KW,Cin,Cout], got ", ShapeOf(1)))
    t.append(Require("filter", Dim(0, 3).eq(Dim(1, 2)), "Cin mismatch: x ", ShapeOf(0), " has Cin=", Dim(0, 3),
                     ", filter ", ShapeOf(1), " has Cin=", Dim(1, 2)))
    cout = Var("cout")
    t.append(Let("cout", Dim(1, 3)))
    for i, arg in enumerate(spec.inputs[2:], start=2):
        t.append(Require(arg.name, all_of(Rank(i).eq(1), Dim(i, 0).eq(cout)), "must have shape [Cout]=",
                         DimsOf((cout,)), " (filter ", ShapeOf(1), "), got ", ShapeOf(i)))
        t.append(Let("cout", Coalesce(cout, Dim(i, 0))))
    for axis, ax in ((0, "h"), (1, "w")):
        size, k = Dim(0, 1 + axis), Dim(1, axis)
        s, d = Item("strides", axis), Item("dilations", axis)
        before, after = Item("pads", axis), Item("pads", 2 + axis)
        eff, num = Var(f"eff_{ax}"), Var(f"num_{ax}")
        t += [Let(f"eff_{ax}", (k - 1) * d + 1),
              Let(f"num_{ax}", size + before + after - eff + s),
              Require("x", num.ge(0), f"{ax.upper()} axis of x ", ShapeOf(0), " with filter ", ShapeOf(1),
                      ": computed output size would be negative: input ", Int(size), " + padding ", before, "+", after,
                      ", effective filter ", eff, ", stride ", s),
              Let(f"o_{ax}", num // s)]
    return t + [Out(0, [Dim(0, 0), Var("o_h"), Var("o_w"), cout])]
