"""The base of the per-op `OpRun` classes for onnx's ReferenceEvaluator.

They compute with the op's numpy float64 reference (`spec.reference_onnx`) and
cast back to the input's dtype: `ReferenceEvaluator(model, new_ops=reference_ops())`.
"""
from __future__ import annotations

import numpy as np
from onnx.reference.op_run import OpRun

from bridge.ops import DOMAIN


class ReferenceOp(OpRun):
    op_domain = DOMAIN
    spec = None  # set by each op's subclass

    def _run(self, *inputs, **attrs):
        spec = self.spec
        dtype = spec.check_dtype(np.asarray(inputs[0]).dtype)
        out = spec.reference_onnx(*inputs, **{k: v for k, v in attrs.items() if v is not None})
        outs = out if isinstance(out, tuple) else (out,)
        return tuple(np.asarray(o).astype(dtype) for o in outs)


_team_modules = {}


def team_op_module(spec):
    """What onnx_plugins/<op>.py holds for a built-in op, made from a team op's
    spec: the reference OpRun class."""
    import types
    if spec.name not in _team_modules:
        kernel = type(spec.name, (ReferenceOp,), {"spec": spec, "op_domain": spec.domain})
        _team_modules[spec.name] = types.SimpleNamespace(SPEC=spec, **{spec.name: kernel})
    return _team_modules[spec.name]


def origin(spec) -> str:
    """Where the op's spec came from (bridge, a spec file, an entry point)."""
    from bridge.ops import ORIGINS
    return ORIGINS.get(spec.name, "?")
