"""The op contracts (ops.md) as data: one `OpSpec` per op, with its numpy float64
reference. Every other layer reads names, attributes, defaults and dtypes from here.

This package imports nothing heavier than numpy.
"""
from __future__ import annotations

from typing import Dict, Tuple

from .spec import DOMAIN, DOMAIN_VERSION, REQUIRED, Arg, Attr, OpError, OpSpec, Tolerance
from . import fused_layer_norm, yolo_conv_bn_leaky, yolo_decode

# The registry. Adding an op: one module here with a SPEC, then one file per layer.
_MODULES = (fused_layer_norm, yolo_conv_bn_leaky, yolo_decode)
SPECS: Dict[str, OpSpec] = {m.SPEC.name: m.SPEC for m in _MODULES}


def all_specs() -> Tuple[OpSpec, ...]:
    return tuple(SPECS.values())


def get(name: str) -> OpSpec:
    """A spec by op type (FusedLayerNorm) or module name (fused_layer_norm)."""
    for spec in SPECS.values():
        if name in (spec.name, spec.module):
            return spec
    raise KeyError(f"unknown op {name!r}; known: {sorted(SPECS)}")


__all__ = ["DOMAIN", "DOMAIN_VERSION", "REQUIRED", "Arg", "Attr", "OpError", "OpSpec", "Tolerance",
           "SPECS", "all_specs", "get"]
