"""The built-in-operator decomposition of each op, one file per op (named like the
op's module in every layer). `decomposition(spec)` builds the step list that both
the ONNX expansion and the GE plugin's ParseOpToGraphFn are rendered from."""
from __future__ import annotations

import importlib
from functools import lru_cache

from bridge import ops
from bridge.ascend.decomposition import Decomposition
from bridge.ascend.from_body import UnmappedOp, decomposition_from_body


def supported_specs():
    """The ops with a GE decomposition: bridge's own, and a team's whose ONNX
    body maps onto GE operators (from_body.py)."""
    out = []
    for spec in ops.all_specs():
        try:
            decomposition(spec.name)
        except UnmappedOp:
            continue
        out.append(spec)
    return tuple(out)


@lru_cache(maxsize=None)
def decomposition(name: str) -> Decomposition:
    spec = ops.get(name)
    if not ops.is_builtin(spec):  # a team's op: derived from its one decomposition
        return decomposition_from_body(spec)
    module = importlib.import_module(f"{__name__}.{spec.module}")
    g = Decomposition(spec)
    module.build(g)
    if len(g.outputs) != len(spec.outputs):
        raise AssertionError(f"{spec.name}: decomposition gives {len(g.outputs)} outputs, spec has {len(spec.outputs)}")
    return g
