"""bridge: fused TensorFlow custom ops taken over every road (ONNX, onnxruntime,
TFLite, Ascend), with numeric parity proven on each.

    import bridge
    result = bridge.export(model, to="onnx", output="model.onnx")   # -> ExportResult
    report = bridge.parity(model, per_layer=True)                   # -> ParityReport
    fused, fusion_report = bridge.fuse(model)
    bridge.inspect("model.onnx"); bridge.ops(); bridge.register_op("my_op.py", library="build/")
    bridge.build(); bridge.check_ascend("bundle/model.onnx"); bridge.check_cuda(emulate=True)

`model` is a keras.Model, a tf.function with an input signature, a path or a
built-in name; every failure is a `bridge.BridgeError` with the CLI's message.
The layers themselves:

    from bridge import tf_ops          # the TF ops (builds the library on first use)
    from bridge import onnx_plugins    # schemas, functions, onnxruntime kernels
    from bridge import converters      # the fusion rewriter and exporters
    from bridge import models          # built-in models

Everything loads lazily, so that `import bridge` stays cheap (no TensorFlow,
no numpy) and `bridge.ops` never pulls in TensorFlow. `bridge.ops` and
`bridge.parity` are subpackages (the op registry, the parity machinery) that
can also be called: `bridge.ops()` is bridge.api.ops.ops, `bridge.parity(...)`
is bridge.api.parity.parity.
"""
from __future__ import annotations

import importlib
import sys
import types

__version__ = "0.1.0"

_LAZY = ("ops", "tf_ops", "onnx_plugins", "converters", "models", "native", "backends", "parity", "api")

# public name -> (module, attribute)
_API = {
    "export": ("bridge.api.export", "export"),
    "fuse": ("bridge.api.fuse", "fuse"),
    "inspect": ("bridge.api.inspect", "inspect"),
    "register_op": ("bridge.api.team_ops", "register_op"),
    "build": ("bridge.api.build", "build"),
    "new_op": ("bridge.commands.op", "new_op"),
    "check_cuda": ("bridge.api.cuda", "check_cuda"),
    "check_ascend": ("bridge.api.ascend", "check_ascend"),
    "ExportResult": ("bridge.exporting", "ExportResult"),
    "ParityReport": ("bridge.parity.runner", "ParityReport"),
    "FusionReport": ("bridge.converters.fuse_report", "FuseReport"),
    "BridgeError": ("bridge.errors", "BridgeError"),
    "LibraryError": ("bridge.errors", "LibraryError"),
    "ModelSourceError": ("bridge.modelsource", "ModelSourceError"),
    "OptionError": ("bridge.exporting", "OptionError"),
    "ExportError": ("bridge.exporting", "ExportError"),
    "BuildError": ("bridge.native", "BuildError"),
    "SpecError": ("bridge.ops.registry", "SpecError"),
    "InspectError": ("bridge.tflite_inspect", "InspectError"),
    "GraphModelError": ("bridge.converters.graph_model", "GraphModelError"),
    "ImportFailed": ("bridge.team_imports", "ImportFailed"),
}
# subpackages that are functions too: calling the module calls this
_CALLS = {"bridge.ops": ("bridge.api.ops", "ops"), "bridge.parity": ("bridge.api.parity", "parity")}

__all__ = ["export", "parity", "fuse", "inspect", "ops", "register_op", "build", "check_cuda", "check_ascend", "new_op",
           "ExportResult", "ParityReport", "FusionReport", "BridgeError", "LibraryError", "ModelSourceError",
           "OptionError", "ExportError", "BuildError", "SpecError", "InspectError", "GraphModelError", "ImportFailed"]


class _CallablePackage(types.ModuleType):
    """A subpackage that is also one of the API's functions (see _CALLS)."""

    def __call__(self, *args, **kwargs):
        module, attr = _CALLS[self.__name__]
        return getattr(importlib.import_module(module), attr)(*args, **kwargs)


class _Package(types.ModuleType):
    # the import system sets each subpackage on its parent with setattr: that is
    # where bridge.ops and bridge.parity become callable, whoever imports them first
    def __setattr__(self, name, value):
        if type(value) is types.ModuleType and getattr(value, "__name__", None) in _CALLS:
            value.__class__ = _CallablePackage
        super().__setattr__(name, value)


def __getattr__(name):
    if name in _API:
        module, attr = _API[name]
        return getattr(importlib.import_module(module), attr)
    if name in _LAZY:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'bridge' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__) | set(_LAZY))


sys.modules[__name__].__class__ = _Package
