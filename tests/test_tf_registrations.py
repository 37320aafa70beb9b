"""The ops TensorFlow registered (OpDefs, kernels, wrappers, gradients) match the
specs in bridge.ops, for every op the specs list."""
from __future__ import annotations

import inspect

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.framework import kernels, op_def_registry

from bridge import ops as specs
from bridge import tf_ops

ALL = specs.all_specs()
ids = [s.name for s in ALL]


def _op_def(spec):
    op_def = op_def_registry.get(spec.name)
    assert op_def is not None, f"{spec.name} is not registered by the op library {tf_ops.library_path()}"
    return op_def


def _default(attr_def):
    v = attr_def.default_value
    kind = v.WhichOneof("value")
    if kind == "list":
        return tuple(v.list.f) if attr_def.type == "list(float)" else tuple(v.list.i) if attr_def.type == "list(int)" \
            else tuple(s.decode() for s in v.list.s)
    return {"f": lambda: v.f, "i": lambda: v.i, "s": lambda: v.s.decode(), "b": lambda: v.b}[kind]()


def _same(a, b):
    if isinstance(a, float) or isinstance(b, float):
        return np.float32(a) == np.float32(b)  # OpDefs store floats as float32
    if isinstance(a, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


@pytest.mark.parametrize("spec", ALL, ids=ids)
def test_inputs_and_outputs(spec):
    op_def = _op_def(spec)
    assert [a.name for a in op_def.input_arg] == [a.name for a in spec.inputs]
    assert [a.name for a in op_def.output_arg] == [a.name for a in spec.outputs]
    assert all(a.type_attr == "T" for a in (*op_def.input_arg, *op_def.output_arg))


@pytest.mark.parametrize("spec", ALL, ids=ids)
def test_attributes_types_and_defaults(spec):
    op_def = _op_def(spec)
    registered = {a.name: a for a in op_def.attr}
    assert sorted(registered) == sorted([a.name for a in spec.attrs] + ["T"])
    for attr in spec.attrs:
        got = registered[attr.name]
        assert got.type == attr.type, attr.name
        assert got.HasField("default_value") == (not attr.required), attr.name
        if not attr.required:
            assert _same(_default(got), attr.default), f"{attr.name}: {_default(got)!r} != {attr.default!r}"
        if attr.allowed:
            assert tuple(s.decode() for s in got.allowed_values.list.s) == attr.allowed, attr.name


@pytest.mark.parametrize("spec", ALL, ids=ids)
def test_allowed_types_and_a_cpu_kernel_for_each(spec):
    t = {a.name: a for a in _op_def(spec).attr}["T"]
    assert t.type == "type"
    allowed = [tf.as_dtype(d).as_datatype_enum for d in spec.dtypes]
    assert sorted(t.allowed_values.list.type) == sorted(allowed)
    if t.HasField("default_value"):
        assert t.default_value.type == allowed[0]
    kernel_types = {ty for k in kernels.get_registered_kernels_for_op(spec.name).kernel if k.device_type == "CPU"
                    for c in k.constraint if c.name == "T" for ty in c.allowed_values.list.type}
    assert kernel_types == set(allowed)


@pytest.mark.parametrize("spec", ALL, ids=ids)
def test_public_wrapper_signature_follows_the_spec(spec):
    assert hasattr(tf_ops.load(), spec.module), "the loaded library lacks its generated wrapper"
    params = inspect.signature(tf_ops.op_module(spec.name).op).parameters
    names = list(params)
    expected = [a.name for a in spec.inputs] + [a.name for a in spec.attrs]
    assert names[:len(expected)] == expected
    for attr in spec.attrs:
        p = params[attr.name]
        if attr.required:
            assert p.default is inspect.Parameter.empty, attr.name
        else:
            assert _same(tuple(p.default) if isinstance(p.default, list) else p.default, attr.default), attr.name


@pytest.mark.parametrize("spec", ALL, ids=ids)
def test_backend_status_reads_what_is_registered(spec):
    status = tf_ops.backend_status(spec)
    assert status["tf_cpu"] == "yes"
    assert status["composite"] == "yes"


@pytest.mark.parametrize("name", ["FusedLayerNorm", "YoloDecode"])
def test_gradient_registered(name):
    assert tf_ops.backend_status(specs.get(name))["gradient"] == "yes"
