"""FusedLayerNorm's GE shape function: gamma and beta are [H], H the last dim of x; y is x."""
from __future__ import annotations

from typing import List

from bridge.ascend.ge_custom.rules import Dim, DimsOf, Int, Let, OutSame, Rank, Require, ShapeOf, Statement, Var


def table(spec) -> List[Statement]:
    h = Var("h")
    t: List[Statement] = [Require("x", Rank(0).ne(0), "must have rank >= 1, got a scalar (shape [])"),
                          Let("h", Dim(0, -1))]
    for i, arg in ((1, "gamma"), (2, "beta")):
        t.append(Require(arg, Rank(i).eq(1), "must have shape [H]=", DimsOf((h,)), " (the last dim of x ", ShapeOf(0),
                         "), got ", ShapeOf(i)))
        t.append(Require(arg, Dim(i, 0).eq(h), "must have shape [H]=[", Int(h), "] (the last dim of x ", ShapeOf(0),
                         "), got ", ShapeOf(i)))
    return t + [OutSame(0, 0)]
