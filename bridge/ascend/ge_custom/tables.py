"""The shape table of each op (rules.py), in the GE operator's terms: its inputs in
spec order and the com.bridge node's attributes, with the spec's checks and words.

bridge's own ops have theirs in their own file, bridge/ascend/infer_shape/<module>.py
(`table(spec)`, found by looking; the shape functions are Python, the table states
the same rules as data, and test_ascend_custom_route checks the twin against
`spec.infer_shapes` on many shapes, bad ones included).
A team's op gets the first of the `TEAM_PATTERNS` whose twin agrees with its
shape function on every probe (same shapes, same refusals, same words); an op
none fits is refused by name (`NoShapeTable`).
"""
from __future__ import annotations

import importlib
import importlib.util
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from bridge import ops
from bridge.ops import OpError
from bridge.ascend.ge_custom.rules import (Dim, DimsOf, Known, Let, Not, OutSame, Rank, Require, ShapeOf, Statement,
                                           Var, all_of, any_of, evaluate)


class NoShapeTable(ValueError):
    """No generated InferShape states this op's shape function."""


OWN_ORIGIN = "bridge's table"


def own_table(spec) -> Optional[Callable]:
    """A built-in op's `table` from bridge/ascend/infer_shape/<module>.py, or None."""
    if not ops.is_builtin(spec):  # a team's module name never picks a file of bridge's
        return None
    name = f"bridge.ascend.infer_shape.{spec.module}"
    if importlib.util.find_spec(name) is None:
        return None
    return importlib.import_module(name).table


# -- a team's op -------------------------------------------------------------------
def _last_axis_params(spec) -> List[Statement]:
    """y = f(x, p1, ...) with every p [C], C the last dim of x; outputs shaped as x."""
    first = spec.inputs[0].name
    c = Var("c")
    t: List[Statement] = [Require(first, Rank(0).ne(0), "must have rank >= 1, got a scalar (shape [])"),
                          Let("c", Dim(0, -1))]
    for i, arg in enumerate(spec.inputs[1:], start=1):
        t.append(Require(arg.name, all_of(Rank(i).eq(1), Dim(i, 0).eq(c)), "must have shape [C]=", DimsOf((c,)),
                         f" (the last dim of {first} ", ShapeOf(0), "), got ", ShapeOf(i)))
    return t + [OutSame(k, 0) for k in range(len(spec.outputs))]


def _scaffold_bias(spec) -> List[Statement]:
    """`bridge op new`'s shape function: x of rank >= 1; each further input, where its
    rank and x's are known, [C] with C = x's last dim (an unknown C takes only an
    unknown dim); outputs shaped as x."""
    first = spec.inputs[0].name
    c = Dim(0, -1)
    t: List[Statement] = [Require(first, Rank(0).ne(0), "must have rank >= 1, got a scalar (shape [])")]
    for i, arg in enumerate(spec.inputs[1:], start=1):
        mismatch = any_of(Rank(i).ne(1), all_of(Known(Dim(i, 0)), any_of(Not(Known(c)), Dim(i, 0).ne(c))))
        refused = all_of(Known(Rank(0)), Known(Rank(i)), mismatch)
        t.append(Require(arg.name, Not(refused), f"must have shape [C] (the last dim of {first} ", ShapeOf(0),
                         "), got ", ShapeOf(i)))
    return t + [OutSame(k, 0) for k in range(len(spec.outputs))]


def same_as_first_input(spec) -> List[Statement]:
    """Every output takes the first input's shape; nothing is refused."""
    return [OutSame(k, 0) for k in range(len(spec.outputs))]


TEAM_PATTERNS: Tuple[Tuple[str, Callable], ...] = (
    ("last-axis parameters", _last_axis_params),
    ("last-axis bias (bridge op new)", _scaffold_bias),
    ("same as the first input", same_as_first_input),
)


def _probe_dims(rng, rank: int) -> List[Optional[int]]:
    return [None if rng.random() < 0.15 else int(rng.choice([0, 1, 2, 3, 5, 7])) for _ in range(rank)]


def _mutations(shapes: tuple):
    """A good call's shapes one step off: an input of unknown rank, a dim unknown or
    one larger, a rank one more or one less."""
    for i, s in enumerate(shapes):
        def put(new):
            return shapes[:i] + (new,) + shapes[i + 1:]
        yield put(None)
        yield put(tuple(s) + (1,))
        if s:
            yield put(tuple(s)[:-1])
        for k in range(len(s)):
            yield put(tuple(s[:k]) + (None,) + tuple(s[k + 1:]))
            yield put(tuple(s[:k]) + (s[k] + 1,) + tuple(s[k + 1:]))


def probe_shapes(spec, seed: int = 0, count: int = 400) -> List[tuple]:
    """Input shape tuples for comparing a table with the spec: the spec's own case
    tables, then random ranks 0..4 with dims tied to the first input's (equal, one
    off, unknown) so both the accepted and the refused sides are reached."""
    rng = np.random.default_rng(seed)
    n = len(spec.inputs)
    out = [tuple(e.shapes) for e in spec.examples()] + [tuple(b.shapes) for b in spec.bad_inputs() if b.kind == "shape"]
    for shapes in [tuple(e.shapes) for e in spec.examples() if not e.large]:
        out += list(_mutations(shapes))
    for _ in range(count):
        first = None if rng.random() < 0.08 else tuple(_probe_dims(rng, int(rng.integers(0, 5))))
        shapes = [first]
        last = first[-1] if first else 3
        for _ in range(n - 1):
            pick = rng.random()
            if pick < 0.08:
                shapes.append(None)
            elif pick < 0.55:
                shapes.append((last,))
            elif pick < 0.7:
                shapes.append(first)
            elif pick < 0.85:
                shapes.append(((last or 0) + 1,))
            else:
                shapes.append(tuple(_probe_dims(rng, int(rng.integers(0, 3)))))
        out.append(tuple(shapes))
    return out


def spec_result(spec, shapes, onnx_attrs: dict):
    """What the spec says for the GE operator's call: output shapes or the error's words."""
    try:
        return ("ok", spec.infer_shapes(list(shapes), **spec.from_onnx_attrs(**onnx_attrs)))
    except OpError as e:
        return ("error", str(e))


def table_result(spec, table, shapes, onnx_attrs: dict):
    try:
        return ("ok", evaluate(spec.name, table, len(spec.outputs), shapes, spec.resolve_onnx(onnx_attrs)))
    except OpError as e:
        return ("error", str(e))


def disagreement(spec, table, cases) -> Optional[str]:
    """The first (shapes, attrs) where the table and the spec differ, described; else None."""
    for shapes, attrs in cases:
        want, got = spec_result(spec, shapes, attrs), table_result(spec, table, shapes, attrs)
        if want != got:
            return f"inputs {[ops.spec.dims(s) for s in shapes]}: the spec says {want[1]}, the table {got[1]}"
    return None


def team_attrs(spec) -> List[dict]:
    """Attribute sets to probe a team's op with: its examples' and the defaults."""
    seen = [dict(e.onnx_attrs) for e in spec.examples()]
    if all(a.default is not ops.REQUIRED for a in spec.onnx_attrs):
        seen.append({})
    return seen or [{}]


_TABLES: Dict[int, tuple] = {}  # id(spec) -> (spec, origin, table): a spec need not be registered


def _table_of(spec) -> Tuple[str, Tuple[Statement, ...]]:
    hit = _TABLES.get(id(spec))
    if hit is not None and hit[0] is spec:
        return hit[1], hit[2]
    if ops.is_builtin(spec):
        own = own_table(spec)
        if own is None:
            raise NoShapeTable(f"{spec.name}: bridge's op has no GE shape table "
                               f"(bridge/ascend/infer_shape/{spec.module}.py with `table(spec)`)")
        origin, table = OWN_ORIGIN, tuple(own(spec))
    else:
        origin, table = _team_table(spec)
    _TABLES[id(spec)] = (spec, origin, table)
    return origin, table


def _team_table(spec) -> Tuple[str, Tuple[Statement, ...]]:
    cases = [(s, a) for a in team_attrs(spec) for s in probe_shapes(spec)]
    if not any(spec_result(spec, s, a)[0] == "ok" for s, a in cases):  # agreement would prove nothing
        raise NoShapeTable(f"{spec.name}: the spec's shape function accepts none of the probe shapes; give the "
                           f"spec examples (with their attributes) to probe it with")
    why = []
    for label, pattern in TEAM_PATTERNS:
        table = pattern(spec)
        bad = disagreement(spec, table, cases)
        if bad is None:
            return label, tuple(table)
        why.append(f"{label}: {bad}")
    raise NoShapeTable(f"{spec.name}: no generated InferShape agrees with the spec's shape function ("
                       + "; ".join(why) + ")")


def shape_table(spec) -> Tuple[Statement, ...]:
    return _table_of(spec)[1]


def table_origin(spec) -> str:
    """Where the op's table came from: "bridge's table" or the team pattern's name."""
    return _table_of(spec)[0]


def custom_specs() -> Tuple:
    """The ops the custom-operator route covers: every op with a shape table."""
    out = []
    for spec in ops.all_specs():
        try:
            shape_table(spec)
        except NoShapeTable:
            continue
        out.append(spec)
    return tuple(out)
