"""FusedLayerNorm's shapes as data (bridge/ops/shape_rules.py statements): gamma and beta
are [H], H the last dim of x; y is x."""
from __future__ import annotations

from ..shape_rules import Dim, DimsOf, Int, Let, OutSame, Rank, Require, ShapeOf, Var


def shape_rule():
    """gamma and beta are [H], H the last dim of x; y is x."""
    h = Var("h")
    rule = [Require("x", Rank(0).ne(0), "must have rank >= 1, got a scalar (shape [])"), Let("h", Dim(0, -1))]
    for i, arg in ((1, "gamma"), (2, "beta")):
        rule.append(Require(arg, Rank(i).eq(1), "must have shape [H]=", DimsOf((h,)), " (the last dim of x ",
                            ShapeOf(0), "), got ", ShapeOf(i)))
        rule.append(Require(arg, Dim(i, 0).eq(h), "must have shape [H]=[", Int(h), "] (the last dim of x ",
                            ShapeOf(0), "), got ", ShapeOf(i)))
    return tuple(rule) + (OutSame(0, 0),)
