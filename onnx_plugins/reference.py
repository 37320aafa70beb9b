"""The `OpRun` class of every spec'd op for onnx's ReferenceEvaluator, made from its spec.

It computes with the op's numpy float64 reference (`spec.reference_onnx`) and
casts back to the input's dtype: `ReferenceEvaluator(model, new_ops=reference_ops())`.
"""
from __future__ import annotations

import numpy as np
from onnx.reference.op_run import OpRun

from bridge.ops import DOMAIN


class ReferenceOp(OpRun):
    op_domain = DOMAIN
    spec = None  # set by each op's class (reference_op)

    def _run(self, *inputs, **attrs):
        spec = self.spec
        dtype = spec.check_dtype(np.asarray(inputs[0]).dtype)
        out = spec.reference_onnx(*inputs, **{k: v for k, v in attrs.items() if v is not None})
        outs = out if isinstance(out, tuple) else (out,)
        return tuple(np.asarray(o).astype(dtype) for o in outs)


_classes = {}


def reference_op(spec) -> type:
    """The op's OpRun class, named as the op (bridge's ops and a team's alike)."""
    made = _classes.get(spec.name)
    if made is None or made.spec is not spec:
        made = _classes[spec.name] = type(spec.name, (ReferenceOp,), {"spec": spec, "op_domain": spec.domain,
                                                                   "__module__": __name__})
    return made


def origin(spec) -> str:
    """Where the op's spec came from (bridge, a spec file, an entry point)."""
    from bridge.ops import ORIGINS
    return ORIGINS.get(spec.name, "?")
