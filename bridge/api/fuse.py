"""`bridge.fuse(model)`: the model rewritten onto the fused ops, with the
report of what was fused and each near miss. A Keras model goes through the
Keras rewriter (bridge.converters.fuse); a graph (a SavedModel, a frozen
GraphDef, a TF function) through the graph-level one (converters/graph_fuse.py,
what `bridge fuse` runs)."""
from __future__ import annotations

import os
from typing import Any, Mapping, Optional, Sequence, Tuple


def fuse(model: Any, *, name: Optional[str] = None, input_shapes=None, seed: int = 0,
         config: Optional[Mapping[str, Any]] = None, graph_inputs: Optional[Sequence[str]] = None,
         graph_outputs: Optional[Sequence[str]] = None, imports: Sequence = ()) -> Tuple[Any, Any]:
    """(fused model, FusionReport).

    `model`: a keras.Model, a built-in name or a .keras file (resolved as the
    CLI resolves MODEL: `config`, `input_shapes`, `seed`) -> a fused keras.Model;
    a SavedModel (folder or loaded), a frozen GraphDef .pb (`graph_inputs`,
    `graph_outputs`: its tensor names), a GraphDef, a ConcreteFunction or a
    tf.function / tf.Module with an input signature -> a fused GraphModel
    (`.save(folder)` writes it as a SavedModel). The fused model computes what the
    original does (bridge parity proves it) and is for inference: the fused
    layers use the BatchNorm moving statistics. Raises ModelSourceError or
    GraphModelError (bridge.BridgeError) for a model it cannot read."""
    from bridge.api import team_ops
    team_ops.load_imports(imports)  # --import: a team's Keras classes and op specs
    team_ops.quiet_tensorflow()
    if isinstance(model, (str, os.PathLike)):
        path = os.path.expanduser(os.fspath(model))
        if os.path.isdir(path) or path.endswith(".pb"):
            return _graph(path, graph_inputs, graph_outputs, name)
        from bridge.api.model import resolve
        source = resolve(path if os.path.exists(path) else os.fspath(model), input_shapes=input_shapes, seed=seed,
                         config=dict(config or {}))
        model = source.model
    if hasattr(model, "inputs") and hasattr(model, "outputs"):  # Keras
        from bridge import converters
        return converters.fuse(model, name=name)
    from bridge.api.model import concrete_function
    function = None if hasattr(model, "signatures") or type(model).__name__ in ("GraphDef", "GraphModel") \
        else concrete_function(model)
    return _graph(model if function is None else function, graph_inputs, graph_outputs, name)


def _graph(model, inputs, outputs, name):
    from bridge.converters.graph_fuse import fuse_graph
    return fuse_graph(model, inputs=inputs, outputs=outputs, name=name)
