"""The shape rule of each op in the GE operator's terms: its inputs in spec order and
the com.bridge node's attributes, with the spec's checks and words. The rule is the
spec's own (`spec.shape_rule`, bridge/ops/shape_rules.py), bridge's ops and a team's
alike; an op that states none gets no custom-operator InferShape (`NoShapeTable`).

The probes below compare a rule with a spec's Python shape function (an op that
has both, as YoloConvBnLeaky for its TF attributes) and feed the host tests of
the rendered C++.
"""
from __future__ import annotations

from typing import List, Optional, Tuple

import numpy as np

from bridge import ops
from bridge.ops import OpError
from bridge.ops.shape_rules import Statement, evaluate


class NoShapeTable(ValueError):
    """No generated InferShape states this op's shape function."""


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


def shape_table(spec) -> Tuple[Statement, ...]:
    if not spec.shape_rule:
        raise NoShapeTable(f"{spec.name}: its spec states no shape rule (shape_rule=, bridge.ops.shape_rules), so "
                           f"no GE InferShape says what it does")
    return tuple(spec.shape_rule)


def custom_specs() -> Tuple:
    """The ops the custom-operator route covers: every op with a shape rule."""
    return tuple(spec for spec in ops.all_specs() if spec.shape_rule)
