"""The fused ops in TensorFlow: C++ kernels, Python wrappers, gradients, composites.

    from bridge import tf_ops
    y = tf_ops.fused_layer_norm(x, gamma, beta, epsilon=1e-6)
    y = tf_ops.yolo_conv_bn_leaky(x, filter, conv_bias, bn_gamma, bn_beta, bn_mean, bn_variance, ...)
    boxes, objectness, class_probs = tf_ops.yolo_decode(raw, anchors, num_classes, stride)
    tf_ops.composite.fused_layer_norm(...)   # the same from standard TF ops only

Importing this module loads the op library, building it on first use (once per
TensorFlow version, compiler and CPU; `bridge build` does it ahead of time), and
registers the gradients. A SavedModel that uses the ops reloads only after this
import ("Op type not registered" otherwise).

An op's registration, shape function and CPU kernel come from its kernel core
(bridge/ops/<op>/kernel.h) through host.cc, or from an `<op>.cc` of its own (the
convolution); `bridge/ops/<op>/tf_op.py` holds its wrapper and gradient; its composite comes
from its spec's body (from_body.py), as a team op's does.
"""
from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import threading
import types
from pathlib import Path

import numpy as np
import tensorflow as tf

from bridge import ops as _specs
from bridge.native import BuildError, read_build_info, tf_ops_build

from . import from_body as _from_body
from . import team_ops as _team_ops

_HERE = Path(__file__).resolve().parent
_library = None


def build(force: bool = False, portable=None, cuda: bool = False, quiet: bool = False) -> Path:
    """Builds (or finds in the cache) the op library for the installed TensorFlow."""
    return tf_ops_build(cuda=cuda, portable=portable).library(force=force, quiet=quiet)


def library_path() -> Path:
    return build()


def load():
    """The loaded op library (a module of generated op functions)."""
    global _library
    if _library is None:
        path = library_path()
        info = read_build_info(path)
        if info.get("binds_to") not in (None, f"tf{tf.__version__}"):
            raise BuildError(f"{path} was built for {info['binds_to']}, but TensorFlow {tf.__version__} is "
                             f"installed. Fix: bridge build tf_ops --force")
        try:
            _library = tf.load_op_library(str(path))
        except tf.errors.NotFoundError as e:
            raise BuildError(f"loading {path} failed: {e}\nThe library does not match the installed TensorFlow "
                             f"{tf.__version__}. Fix: bridge build tf_ops --force") from e
    return _library


load()

# While tracing under `lowered()`, the public wrappers emit the composite (standard
# TF ops) instead of the custom op: how a fused model becomes TFLite builtins.
_mode = threading.local()


@contextlib.contextmanager
def lowered(where=None):
    """Within this block `tf_ops.<op>(...)` builds the composite instead of the custom op;
    with `where(spec, input_shapes, attrs) -> bool`, only the calls it picks (the
    others keep the custom op): how TFLite's `fastest` mode lowers op by op."""
    previous = getattr(_mode, "lowered", False)
    _mode.lowered = where if where is not None else True
    try:
        yield
    finally:
        _mode.lowered = previous


def is_lowered() -> bool:
    """Whether a lowered() block is active (every call lowered, or those its `where` picks):
    a layer then calls the public wrapper, which decides."""
    return bool(getattr(_mode, "lowered", False))


def _static_shape(value):
    shape = getattr(value, "shape", None)
    shape = tf.TensorShape(np.shape(value) if shape is None else shape)
    return tuple(shape.as_list()) if shape.rank is not None else None


def _lowers(spec, args, kwargs) -> bool:
    how = getattr(_mode, "lowered", False)
    if not callable(how):
        return bool(how)
    names = [t.name for t in spec.inputs]
    given = list(args[:len(names)]) + [kwargs[n] for n in names[len(args):] if n in kwargs]
    attrs = {a.name: kwargs[a.name] for a in spec.attrs if a.name in kwargs}
    return bool(how(spec, [_static_shape(v) for v in given], attrs))


def _dispatcher(spec, mod):
    @functools.wraps(mod.op)
    def call(*args, **kwargs):
        lowered_fn = mod.composite if _lowers(spec, args, kwargs) else None  # a team op without one stays itself
        return (lowered_fn or mod.op)(*args, **kwargs)
    return call


def _served_by_host(spec) -> bool:
    """Whether the loaded library registers the op (its kernel core, through host.cc)."""
    from tensorflow.python.framework import op_def_registry
    return op_def_registry.get(spec.name) is not None


# The per-op Python sides, in spec order; each module exposes `op` and registers
# its gradient on import; `composite` is set here from the spec's body.
composite = types.SimpleNamespace()
_op_modules = {}
_missing = {}  # op name -> why it has no TensorFlow side
for _spec in _specs.all_specs():
    if not _specs.is_builtin(_spec):
        continue  # a team's op: its kernel comes with load_op_library (team_ops.py)
    _mod = _specs.part(_spec, "tf_op")  # bridge/ops/<op>/tf_op.py: its own wrapper and gradient
    if _mod is not None:
        _mod.composite = _from_body.composite(_spec)  # the op's one decomposition (its spec's body), in TF ops
    elif _served_by_host(_spec):
        # A kernel core alone (bridge/ops/<op>/kernel.h, hosted by host.cc): the
        # generic wrapper and gradient a team's core gets.
        _mod = _team_ops.wrapper_module(_spec, _library)
    else:
        # An op of bridge's with no TensorFlow side yet (only its spec): the other
        # ops' TF layer stands, and `bridge ops` shows this one's hole.
        _missing[_spec.name] = f"no kernel core (bridge/ops/{_spec.module}/kernel.h) or tf_op.py"
        continue
    _op_modules[_spec.name] = _mod
    globals()[_spec.module] = _dispatcher(_spec, _mod)
    if _mod.composite is not None:
        setattr(composite, _spec.module, _mod.composite)


def op_module(name: str):
    return _op_modules[_specs.get(name).name]


def load_op_library(path):
    """Loads a team's TensorFlow op library (a .so, or a CMake folder built here
    first) and makes `tf_ops.<module>(...)` of every spec'd op in it."""
    from . import team_ops
    library, found = team_ops.load(path)
    for spec in found:
        mod = _op_modules[spec.name] = team_ops.wrapper_module(spec, library)
        globals()[spec.module] = _dispatcher(spec, mod)
        if mod.composite is not None:
            setattr(composite, spec.module, mod.composite)
    return library


def backend_status(spec) -> dict:
    """What is registered for one op, read from TensorFlow itself (for `bridge ops`)."""
    from tensorflow.python.framework import kernels, ops as tf_ops_registry
    devices = {k.device_type for k in kernels.get_registered_kernels_for_op(spec.name).kernel}
    try:
        tf_ops_registry.gradient_registry.lookup(spec.name)
        grad = "yes"
    except LookupError:
        grad = "no"
    if not _specs.is_builtin(spec):
        from . import team_ops
        return team_ops.backend_status(spec, devices)
    if spec.name in _missing:
        why = f"no: {_missing[spec.name]}"
        return {"tf_cpu": why, "tf_gpu": why, "gradient": why, "composite": why}
    return {
        "tf_cpu": "yes" if "CPU" in devices else "no",
        "tf_gpu": "yes" if "GPU" in devices else "not built (bridge build --cuda)",
        "gradient": grad,
        "composite": "yes" if callable(getattr(composite, spec.module, None)) else "no",
    }
