"""bridge: fused TensorFlow custom ops taken over every road (ONNX, onnxruntime,
TFLite, Ascend), with numeric parity proven on each.

    from bridge import tf_ops          # the TF ops (builds the library on first use)
    from bridge import onnx_plugins    # schemas, functions, onnxruntime kernels
    from bridge import converters      # the fusion rewriter and exporters
    from bridge import models          # built-in models

Submodules load lazily so that `import bridge` stays cheap and `bridge.ops`
never pulls in TensorFlow.
"""
from __future__ import annotations

import importlib

__version__ = "0.1.0"

_LAZY = ("ops", "tf_ops", "onnx_plugins", "converters", "models", "native", "backends")


def __getattr__(name):
    if name in _LAZY:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'bridge' has no attribute {name!r}")
