"""The rows of an op's case tables (`OpSpec.examples()`, `OpSpec.bad_inputs()`):
one table per op, read by every backend's tests and by `bridge cuda`, so that a
row added here (a large mean, an odd SAME pixel) reaches every backend at once.

Expected values are written out in the row (the ONNX node's attributes, the
error's words), never derived by the spec's own mapping: a test of that mapping
then has something independent to compare with.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Tuple

import numpy as np


@dataclass(frozen=True)
class Example:
    """Good input: random non-zero float64 arrays (cast to the dtype under test),
    the TF attributes, and the com.bridge node's attributes for the same call."""

    id: str
    inputs: Tuple[np.ndarray, ...] = field(repr=False)
    attrs: dict
    onnx_attrs: dict
    dtypes: Tuple[str, ...] = ("float32", "float16")  # where the row is meaningful
    large: bool = False  # a big tensor: backends slow at scale (emulators, numpy loops) may skip it

    def cast(self, dtype) -> Tuple[np.ndarray, ...]:
        return tuple(np.asarray(a).astype(dtype) for a in self.inputs)

    @property
    def shapes(self) -> Tuple[tuple, ...]:
        return tuple(np.shape(a) for a in self.inputs)


@dataclass(frozen=True)
class BadInput:
    """Input every backend must refuse with an error that contains `message`
    (which names the op and `arg`). `kind`: "shape" for bad tensor shapes (the
    kernels see them), "attr" for bad attributes (refused before any kernel runs).
    `onnx_attrs`/`onnx_message`: the same mistake on the com.bridge node, where
    its attributes differ from TF's (None: as `attrs`/`message`); `in_onnx`
    False: a mistake the node's attributes cannot express (TF's N and C strides)."""

    id: str
    shapes: Tuple[tuple, ...]
    attrs: dict
    arg: str
    message: str
    kind: str = "shape"
    dtype: str = "float32"
    onnx_attrs: Optional[dict] = None
    onnx_message: Optional[str] = None
    in_onnx: bool = True

    def inputs(self) -> Tuple[np.ndarray, ...]:
        rng = np.random.default_rng(0)
        return tuple(rng.uniform(0.5, 1.5, s).astype(self.dtype) for s in self.shapes)

    @property
    def onnx(self) -> Tuple[dict, str]:
        """(attributes, message) for the com.bridge node."""
        return (self.attrs if self.onnx_attrs is None else self.onnx_attrs,
                self.message if self.onnx_message is None else self.onnx_message)
