"""YoloDecode's shapes as data (bridge/ops/shape_rules.py statements)."""
from __future__ import annotations

from ..shape_rules import (Attr as AttrInt, Const, Dim, EachItem, FirstFailing, Len, Let, ListOf, Out, Rank, Require,
                           ShapeOf, Var, all_of)


def shape_rule():
    """rows = H*W*A, A = len(anchors)/2: the one statement of YoloDecode's shapes."""
    n_anchor = Len("anchors")
    classes = AttrInt("num_classes")
    a, c = Var("a"), Var("c")
    rows = Var("rows")
    return (
        Require("anchors", all_of(n_anchor.ne(0), (n_anchor - (n_anchor // 2) * 2).eq(0)),
                "needs 2*A values [w0,h0,w1,h1,...], got ", n_anchor),
        Require("anchors", EachItem("anchors", "Gt", 0.0), "must all be positive, got ",
                FirstFailing("anchors", "Gt", 0.0), " in ", ListOf("anchors", "python")),
        Require("num_classes", classes.ge(1), "must be >= 1, got ", classes),
        Require("stride", AttrInt("stride").ge(1), "must be >= 1, got ", AttrInt("stride")),
        Let("a", n_anchor // 2),
        Let("c", a * (Const(5) + classes)),
        Require("raw", Rank(0).eq(4), "must have rank 4 [N,H,W,A*(5+C)], got ", ShapeOf(0)),
        Require("raw", Dim(0, 3).eq(c), "last dim must be A*(5+C) = ", a, "*(5+", classes, ") = ", c, ", got ",
                ShapeOf(0)),
        Let("rows", Dim(0, 1) * Dim(0, 2) * a),
        Out(0, [Dim(0, 0), rows, 4]),
        Out(1, [Dim(0, 0), rows]),
        Out(2, [Dim(0, 0), rows, classes]),
    )
