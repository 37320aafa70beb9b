"""The built-in-operator (GE ParseOpToGraphFn) decomposition of every op, derived
from its one decomposition, the ONNX body of its spec (from_body.py): bridge's
own ops and a team's alike, with no per-op file here."""
from __future__ import annotations

from functools import lru_cache

from bridge import ops
from bridge.ascend.decomposition import Decomposition
from bridge.ascend.from_body import UnmappedOp, decomposition_from_body


def supported_specs():
    """The ops with a GE decomposition: those whose ONNX body maps onto GE
    operators (from_body.py)."""
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
    return decomposition_from_body(ops.get(name))
