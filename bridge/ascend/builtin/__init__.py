"""The built-in-operator decomposition of each op, one file per op (named like the
op's module in every layer). `decomposition(spec)` builds the step list that both
the ONNX expansion and the GE plugin's ParseOpToGraphFn are rendered from."""
from __future__ import annotations

import importlib
from functools import lru_cache

from bridge import ops
from bridge.ascend.decomposition import Decomposition


@lru_cache(maxsize=None)
def decomposition(name: str) -> Decomposition:
    spec = ops.get(name)
    module = importlib.import_module(f"{__name__}.{spec.module}")
    g = Decomposition(spec)
    module.build(g)
    if len(g.outputs) != len(spec.outputs):
        raise AssertionError(f"{spec.name}: decomposition gives {len(g.outputs)} outputs, spec has {len(spec.outputs)}")
    return g
