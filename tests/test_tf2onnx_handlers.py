"""The tf2onnx handlers: a one-op tf.function per case, exported with the com.bridge
node (custom) and inlined (lowered), run on every ONNX road, judged by the numpy
float64 reference of bridge.ops."""
from __future__ import annotations

import numpy as np
import onnx
import onnx.inliner
import onnxruntime as ort
import pytest
import tensorflow as tf
from onnx.reference import ReferenceEvaluator

from bridge import onnx_plugins, ops, tf_ops
from conftest import assert_close
from bridge.converters import export_onnx
from bridge.exporting import ExportError, OptionError

class Case:
    """One op call: the traced function's inputs (fed at run time) and constants
    (frozen into the model as initializers), the TF attributes, the batches run."""

    def __init__(self, op, id, feeds, consts, attrs, signature_shapes, runs, dtype="float32", onnx_attrs=None):
        self.spec = ops.get(op)
        self.id = id
        self.dtype = dtype
        self.feeds = feeds                  # names of inputs fed at run time
        self.consts = {k: v.astype(dtype) for k, v in consts.items()}    # {input name: array}
        self.attrs = attrs
        self.signature_shapes = signature_shapes
        self.runs = [{k: v.astype(dtype) for k, v in r.items()} for r in runs]  # one feed dict per run
        self.onnx_attrs = onnx_attrs        # the node's attributes, from the table (written out by hand)

    def function(self):
        wrapper = getattr(tf_ops, self.spec.module)
        names = [a.name for a in self.spec.inputs]

        def call(*args):
            given = dict(zip(self.feeds, args))
            values = [given[n] if n in given else tf.constant(self.consts[n]) for n in names]
            out = wrapper(*values, **self.attrs)
            out = out if isinstance(out, (list, tuple)) else [out]
            return {a.name: t for a, t in zip(self.spec.outputs, out)}

        sig = [tf.TensorSpec(s, tf.as_dtype(self.dtype), name=n) for n, s in zip(self.feeds, self.signature_shapes)]
        return tf.function(call, input_signature=sig, autograph=False), sig

    def reference(self, run):
        names = [a.name for a in self.spec.inputs]
        out = self.spec.reference(*[run[n] if n in run else self.consts[n] for n in names], **self.attrs)
        out = out if isinstance(out, tuple) else (out,)
        return {a.name: o for a, o in zip(self.spec.outputs, out)}


def _case(example, op, dtype="float32", fed=1, id=None):
    """A table row as a one-op tf.function: the first `fed` inputs fed (batch
    dim dynamic; run on the row's batch and on its first item), the rest frozen."""
    spec = ops.get(op)
    names = [a.name for a in spec.inputs]
    arrays = dict(zip(names, example.cast(dtype)))
    feeds = names[:fed]
    sig = [(None,) + arrays[names[0]].shape[1:]] + [arrays[n].shape for n in feeds[1:]]
    runs = [{n: arrays[n] for n in feeds}]
    if arrays[names[0]].ndim > 1 and arrays[names[0]].shape[0] > 1:
        runs.append(dict(runs[0], **{names[0]: arrays[names[0]][:1]}))
    consts = {n: arrays[n] for n in names[fed:]}
    return Case(op, id or f"{example.id}-{dtype}", feeds, consts, example.attrs, sig, runs, dtype,
                example.onnx_attrs)


def _cases():
    for spec in ops.all_specs():
        rows = [e for e in spec.examples() if not e.large]
        for e in rows:
            yield _case(e, spec.name)
        first = rows[0]
        yield _case(first, spec.name, "float16")
        if len(spec.inputs) > 1 and spec.name == "FusedLayerNorm":
            yield _case(first, spec.name, fed=3, id=f"{first.id}-all-fed")


CASES = list(_cases())


@pytest.fixture(scope="module", params=CASES, ids=lambda c: f"{c.spec.name}-{c.id}")
def exported(request):
    case = request.param
    fn, sig = case.function()
    custom, _ = export_onnx.convert(fn, sig, mode="custom", output_names=[a.name for a in case.spec.outputs])
    lowered = onnx_plugins.inline_custom_ops(custom)
    return case, custom, lowered


def _feeds(case, run):
    return {n: run[n] for n in case.feeds}


def _check(case, got_by_name, run, road):
    ref = case.reference(run)
    assert list(got_by_name) == list(ref), f"{road}: outputs {list(got_by_name)} != {list(ref)}"
    for name, r in ref.items():
        assert got_by_name[name].dtype == np.dtype(case.dtype), f"{road}: {name} is {got_by_name[name].dtype}"
        assert_close(case.spec.name, got_by_name[name], r, case.dtype, what=f"{case.id} {name} via {road}")


def _ort(model, **kw):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"], **kw)


def test_custom_node_carries_the_spec_attributes(exported):
    case, custom, _ = exported
    nodes = [n for n in custom.graph.node if n.domain == ops.DOMAIN]
    assert [n.op_type for n in nodes] == [case.spec.name]
    node = nodes[0]
    got = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    assert set(got) == {a.name for a in case.spec.onnx_attrs}  # TF-only attributes and T are gone
    for name, value in case.onnx_attrs.items():
        v = got[name]
        if isinstance(value, (tuple, list)):
            np.testing.assert_allclose(v, value, rtol=1e-6, err_msg=name)
        else:
            assert v == pytest.approx(value, rel=1e-6), name
    assert {o.domain: o.version for o in custom.opset_import}[ops.DOMAIN] == ops.DOMAIN_VERSION
    assert [f.name for f in custom.functions] == [case.spec.name]


def test_models_pass_the_full_checker(exported):
    _, custom, lowered = exported
    onnx.checker.check_model(custom, full_check=True)
    onnx.checker.check_model(lowered, full_check=True)
    assert not any(n.domain == ops.DOMAIN for n in lowered.graph.node)
    assert ops.DOMAIN not in {o.domain for o in lowered.opset_import}


def test_onnxruntime_native_kernels(exported):
    case, custom, _ = exported
    sess = onnx_plugins.session(custom, kernels="all")
    for run in case.runs:
        before = onnx_plugins.kernel_calls(case.spec.name)
        out = sess.run(None, _feeds(case, run))
        assert onnx_plugins.kernel_calls(case.spec.name) == before + 1, "the native kernel did not run"
        _check(case, dict(zip([o.name for o in sess.get_outputs()], out)), run, "ort-native")


def test_onnxruntime_function_inlined(exported):
    case, custom, _ = exported
    sess = _ort(custom)
    for run in case.runs:
        out = sess.run(None, _feeds(case, run))
        _check(case, dict(zip([o.name for o in sess.get_outputs()], out)), run, "ort-function")


def test_onnxruntime_lowered(exported):
    case, _, lowered = exported
    sess = _ort(lowered)
    for run in case.runs:
        out = sess.run(None, _feeds(case, run))
        _check(case, dict(zip([o.name for o in sess.get_outputs()], out)), run, "ort-lowered")


def _tf_outputs(case, run):
    fn, _ = case.function()
    out = fn(*[run[n] for n in case.feeds])
    return {k: np.asarray(v, np.float64) for k, v in out.items()}


@pytest.mark.parametrize("road", ["reference-ops", "function"])
def test_reference_evaluator(exported, road):
    """The function body is judged by the reference; the reference OpRun (the
    spec's reference itself) by the TensorFlow kernel, so that it is never
    compared with itself."""
    case, custom, _ = exported
    model = custom
    if road == "function" and case.spec.name == "YoloConvBnLeaky":
        # onnx's evaluator cannot run LeakyRelu with an attribute linked from the
        # calling node (OpRunUnaryNum.run takes no linked_attributes): run the same
        # function after onnx's own inliner has written the attributes in.
        model = onnx.inliner.inline_local_functions(custom)
    ev = ReferenceEvaluator(model, new_ops=onnx_plugins.reference_ops() if road == "reference-ops" else None)
    for run in case.runs:
        got = dict(zip([o.name for o in custom.graph.output], ev.run(None, _feeds(case, run))))
        if road == "function":
            _check(case, got, run, road)
            continue
        for name, want in _tf_outputs(case, run).items():  # two roads' roundings: twice the tolerance
            assert_close(case.spec.name, got[name], want, case.dtype, scale=2.0,
                         what=f"{case.id} {name}: reference OpRun vs the TF kernel")


# -- what cannot be exported ---------------------------------------------------
def _example(op, id):
    return next(e for e in ops.get(op).examples() if e.id == id)


def test_same_padding_with_dynamic_spatial_size_names_op_arg_and_shape():
    case = _case(_example("YoloConvBnLeaky", "same-s1"), "YoloConvBnLeaky", id="dyn")
    case.signature_shapes = [(None, None, None, 3)]
    fn, sig = case.function()
    with pytest.raises(ExportError, match=r"YoloConvBnLeaky: argument 'padding': SAME padding needs static H and W.*"
                                          r"\[\?,\?,\?,3\]"):
        export_onnx.convert(fn, sig)


def test_valid_padding_with_dynamic_spatial_size_exports():
    case = _case(_example("YoloConvBnLeaky", "valid-s2-odd"), "YoloConvBnLeaky", id="dyn-valid")
    case.signature_shapes = [(None, None, None, 2)]
    fn, sig = case.function()
    model, _ = export_onnx.convert(fn, sig)
    onnx.checker.check_model(model, full_check=True)
    out = onnx_plugins.session(model, kernels="all").run(None, case.runs[0])[0]
    _check(case, {"y": out}, case.runs[0], "ort-native, dynamic H/W")


def test_unsupported_op_fails_with_the_list_and_the_fix():
    @tf.function(input_signature=[tf.TensorSpec([3], tf.float32, name="x")], autograph=False)
    def fn(x):
        return {"y": tf.math.lgamma(x) + tf.math.digamma(x)}  # no tf2onnx handler for either

    with pytest.raises(ExportError) as e:
        export_onnx.convert(fn, fn.input_signature)
    text = str(e.value)
    assert "Lgamma" in text and "Digamma" in text and "tf_op" in text and "handler" in text


@pytest.mark.parametrize("opset", [12, 99])
def test_bad_opset(opset):
    with pytest.raises(OptionError, match=f"--opset {opset}: supported opsets are 13..18"):
        export_onnx.check_opset(opset)


def test_every_op_has_a_registered_handler():
    from bridge import converters
    for spec in ops.all_specs():
        assert converters.backend_status(spec)["tf2onnx"] == "yes", spec.name
