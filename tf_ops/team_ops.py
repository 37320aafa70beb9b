"""A team's own ops in TensorFlow: their kernel library, loaded beside bridge's.

`tf_ops.load_op_library(path)` takes the .so a team built (or its CMake folder,
built here against the installed TensorFlow, cached like bridge's own library),
loads it with `tf.load_op_library` (what a SavedModel with the op needs before it
reloads), and checks that what the library registers agrees with the op's spec
(inputs, outputs, attributes, dtypes): a mismatch is an error naming the op, the
library and the field, not a wrong model later.
"""
from __future__ import annotations

import re
import types
from pathlib import Path
from typing import List, Tuple

import tensorflow as tf

from bridge import ops as specs
from bridge.errors import LibraryError

_loaded = {}  # resolved path -> library module


class TeamOpError(LibraryError):
    """A team op library that cannot be used as given."""


def _op_def(name: str):
    from tensorflow.python.framework import op_def_registry
    return op_def_registry.get(name)


def _python_name(op_type: str) -> str:
    """TensorFlow's name of an op's Python wrapper (FusedBiasGelu -> fused_bias_gelu)."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", op_type).lower()


def _tf_dtype_name(dt: int) -> str:
    return tf.dtypes.as_dtype(dt).as_numpy_dtype.__name__ if dt != tf.bfloat16.as_datatype_enum else "bfloat16"


def check_registration(spec, origin: str) -> None:
    """The library's REGISTER_OP against the spec: tensors, attributes, T."""
    op_def = _op_def(spec.name)
    where = f"{spec.name} (registered by {origin}, spec from {specs.ORIGINS.get(spec.name)})"
    got_in = [a.name for a in op_def.input_arg]
    got_out = [a.name for a in op_def.output_arg]
    if got_in != [a.name for a in spec.inputs]:
        raise TeamOpError(f"{where}: inputs {got_in} in the library, {[a.name for a in spec.inputs]} in the spec")
    if got_out != [a.name for a in spec.outputs]:
        raise TeamOpError(f"{where}: outputs {got_out} in the library, {[a.name for a in spec.outputs]} in the spec")
    attrs = {a.name: a for a in op_def.attr}
    want = {a.name for a in spec.attrs}
    have = set(attrs) - {"T"}
    if have != want:
        raise TeamOpError(f"{where}: attributes {sorted(have)} in the library, {sorted(want)} in the spec")
    if "T" in attrs:
        allowed = sorted(_tf_dtype_name(t) for t in attrs["T"].allowed_values.list.type)
        if allowed != sorted(spec.dtypes):
            raise TeamOpError(f"{where}: T in {allowed} in the library, {sorted(spec.dtypes)} in the spec")


def _library_file(path) -> Path:
    p = Path(path).expanduser()
    if p.is_dir():
        from bridge import native
        return native.op_library_build(p).library()
    if not p.is_file():
        raise TeamOpError(f"--op-library {path}: no such file (give the .so, or the folder with its CMakeLists.txt)")
    return p.resolve()


def load(path) -> Tuple[object, List]:
    """(the loaded library, the specs of the ops it registers)."""
    lib_path = _library_file(path)
    key = str(lib_path)
    if key not in _loaded:
        try:
            _loaded[key] = tf.load_op_library(key)
        except (tf.errors.NotFoundError, OSError) as e:
            raise TeamOpError(f"--op-library {path}: TensorFlow {tf.__version__} cannot load it: "
                              f"{str(e).splitlines()[0]}. Rebuild it against this TensorFlow") from None
    library = _loaded[key]
    found = []
    for spec in specs.all_specs():
        if specs.is_builtin(spec) or _op_def(spec.name) is None:
            continue
        if not hasattr(library, _python_name(spec.name)):
            continue
        check_registration(spec, key)
        found.append(spec)
    return library, found


def wrapper_module(spec, library):
    """`op(*inputs, name=None, **attrs)` for a team op, checked against its spec."""
    fn = getattr(library, _python_name(spec.name))

    def op(*inputs, name=None, **attrs):
        attrs = spec.resolve(attrs)
        if len(inputs) != len(spec.inputs):
            raise specs.OpError(spec.name, "inputs", f"expected {len(spec.inputs)} inputs "
                                f"({', '.join(a.name for a in spec.inputs)}), got {len(inputs)}")
        first = tf.convert_to_tensor(inputs[0])
        spec.check_dtype(first.dtype.as_numpy_dtype)
        rest = [tf.convert_to_tensor(x, dtype_hint=first.dtype) for x in inputs[1:]]
        spec.infer_shapes([None if t.shape.rank is None else tuple(t.shape.as_list()) for t in (first, *rest)],
                          **attrs)
        return fn(first, *rest, name=name, **{k: list(v) if isinstance(v, tuple) else v for k, v in attrs.items()})

    op.__doc__ = spec.doc
    from .from_body import composite
    lowered = composite(spec)
    if lowered is not None:
        _register_gradient(spec, lowered)
    return types.SimpleNamespace(op=op, composite=lowered, SPEC=spec)


def _register_gradient(spec, lowered) -> None:
    """The op's gradient, by differentiating its composite (recomputed from the
    op's inputs), unless its library registered one itself."""
    from tensorflow.python.framework import ops as tf_ops_registry
    try:
        tf_ops_registry.gradient_registry.lookup(spec.name)
        return
    except LookupError:
        pass

    @tf.RegisterGradient(spec.name)
    def _gradient(op, *dys):
        attrs = {a.name: op.get_attr(a.name) for a in spec.attrs}
        attrs = {k: v.decode() if isinstance(v, bytes) else v for k, v in attrs.items()}
        inputs = list(op.inputs)
        with tf.GradientTape() as tape:
            tape.watch(inputs)
            out = lowered(*inputs, **attrs)
        outs = list(out) if isinstance(out, tuple) else [out]
        return tape.gradient(outs, inputs, output_gradients=list(dys))


def backend_status(spec, devices) -> dict:
    """`bridge ops`' TensorFlow columns for a team op."""
    from .from_body import why_not
    loaded = _op_def(spec.name) is not None
    missing = "no kernel library loaded (--op-library)"
    try:
        from tensorflow.python.framework import ops as tf_ops_registry
        tf_ops_registry.gradient_registry.lookup(spec.name)
        grad = "yes"
    except LookupError:
        grad = "no (none registered)"
    return {
        "tf_cpu": ("yes" if "CPU" in devices else "no CPU kernel in the library") if loaded else missing,
        "tf_gpu": ("yes" if "GPU" in devices else "no GPU kernel in the library") if loaded else missing,
        "gradient": grad,
        "composite": "yes" if not why_not(spec) else f"no: {why_not(spec)}",
    }
