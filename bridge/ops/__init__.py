"""The op contracts (docs/ops.md) as data: one `OpSpec` per op, with its numpy float64
reference. Every other layer reads names, attributes, defaults and dtypes from here.

bridge's own ops are the op folders of this package (bridge/ops/<op>/, whose
__init__ defines `SPEC`; found, not listed: a new op is one new folder, and the
hosts load its other files by name, `part`); a team's ops come from `load_spec_file`
(`--op-spec FILE`) or the `bridge.ops` entry point group (registry.py).

This package imports nothing heavier than numpy.
"""
from __future__ import annotations

from typing import Dict, Optional, Tuple

from .spec import DOMAIN, DOMAIN_VERSION, REQUIRED, Arg, Attr, OpError, OpSpec, Tolerance
from .registry import ORIGINS, SPECS, SpecError, is_builtin, load_entry_points, load_spec_file, op_folder, part
from . import registry as _registry

_registry.load_builtins()


def all_specs() -> Tuple[OpSpec, ...]:
    return tuple(SPECS.values())


def get(name: str) -> OpSpec:
    """A spec by op type (FusedLayerNorm) or module name (fused_layer_norm)."""
    for spec in SPECS.values():
        if name in (spec.name, spec.module):
            return spec
    raise KeyError(f"unknown op {name!r}; known: {sorted(SPECS)}")


def for_node(domain: str, op_type: str) -> Optional[OpSpec]:
    """The spec of an ONNX node (or function) of a spec'd op, else None."""
    spec = SPECS.get(op_type)
    return spec if spec is not None and spec.domain == (domain or "ai.onnx") else None


def domains() -> Dict[str, int]:
    """Every custom ONNX domain an op lives in, with its version."""
    return {s.domain: s.domain_version for s in SPECS.values()}


__all__ = ["DOMAIN", "DOMAIN_VERSION", "REQUIRED", "Arg", "Attr", "OpError", "OpSpec", "Tolerance",
           "SPECS", "ORIGINS", "SpecError", "all_specs", "domains", "for_node", "get", "is_builtin", "load_spec_file", "load_entry_points",
           "op_folder", "part"]
