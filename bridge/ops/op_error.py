"""The words of a refused input: `OpError` and `dims`, shared by the spec and its
shape rules (shape_rules.py), which spec.py evaluates (so neither imports the other)."""
from __future__ import annotations

from typing import Optional, Tuple

Shape = Optional[Tuple[Optional[int], ...]]  # None: unknown rank; a None dim: unknown size


class OpError(ValueError):
    """Bad input to an op: the message names the op, the argument and the shapes."""

    # Inside tf.function, AutoGraph re-raises exceptions whose constructor is not
    # (message) as a StagingError, which is no ValueError; this flag lets OpError
    # through unchanged (read by tensorflow/python/autograph/impl/api.py).
    ag_pass_through = True

    def __init__(self, op: str, arg: str, message: str):
        self.op, self.arg = op, arg
        super().__init__(f"{op}: argument '{arg}': {message}")


def dims(shape: Shape) -> str:
    """A shape as users read it: [1,?,7] or <unknown rank>."""
    if shape is None:
        return "<unknown rank>"
    return "[" + ",".join("?" if d is None else str(d) for d in shape) + "]"
