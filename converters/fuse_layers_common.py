"""What the Keras fusion rewriter (fuse.py) and its matchers (fuse_chain.py and
the ops' hooks, bridge/ops/<op>/keras_fusion.py) share about the layers they look at. Its own
module so that the matchers, which fuse.py loads, need nothing of fuse.py."""
from __future__ import annotations


def kind(op) -> str:
    return f"{type(op).__name__} '{op.name}'"


def dtype_problem(spec, *layers):
    """Why `spec`'s op cannot compute what `layers` do at their precision (a near
    miss's reason), or None."""
    for layer in layers:
        if layer.compute_dtype not in spec.dtypes:
            return f"{kind(layer)} computes in {layer.compute_dtype}; {spec.name} takes {list(spec.dtypes)}"
    return None


def built_input_shape(layer):
    """The input shape `layer` was built with (Keras's private record), or None if it never was."""
    return (getattr(layer, "_build_shapes_dict", None) or {}).get("input_shape")
