"""`bridge.fuse(model)`: the Keras model rewritten onto the fused ops, with
the report of what was fused and each near miss (bridge.converters.fuse)."""
from __future__ import annotations

import os
from typing import Any, Mapping, Optional, Tuple


def fuse(model: Any, *, name: Optional[str] = None, input_shapes=None, seed: int = 0,
         config: Optional[Mapping[str, Any]] = None) -> Tuple[Any, Any]:
    """(fused model, FuseReport). `model`: a keras.Model, or a built-in name or
    .keras file (resolved as the CLI resolves MODEL: `config`, `input_shapes`,
    `seed`); a SavedModel passes through unfused, the report's note says so.
    The fused model computes what the original does (bridge parity proves it)
    and is for inference: the fused layers use the BatchNorm moving statistics.
    Raises ModelSourceError for a model it cannot load."""
    from bridge.api import team_ops
    team_ops.quiet_tensorflow()
    from bridge import converters
    if isinstance(model, (str, os.PathLike)):
        from bridge.api.model import resolve
        source = resolve(model, input_shapes=input_shapes, seed=seed, config=dict(config or {}))
        model = source.model if source.is_keras else (source.path or source.model)
    return converters.fuse(model, name=name)
