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

RNG = np.random.default_rng(7)


def _nonzero(*shape, low=0.1, high=1.0):
    """Random values away from zero, both signs."""
    v = RNG.uniform(low, high, shape) * RNG.choice([-1.0, 1.0], shape)
    return v.astype("float32")


def _positive(*shape):
    return RNG.uniform(0.5, 1.5, shape).astype("float32")


class Case:
    """One op call: the traced function's inputs (fed at run time) and constants
    (frozen into the model as initializers), the TF attributes, the batches run."""

    def __init__(self, op, id, feeds, consts, attrs, signature_shapes, runs, dtype="float32"):
        self.spec = ops.get(op)
        self.id = id
        self.dtype = dtype
        self.feeds = feeds                  # names of inputs fed at run time
        self.consts = {k: v.astype(dtype) for k, v in consts.items()}    # {input name: array}
        self.attrs = attrs
        self.signature_shapes = signature_shapes
        self.runs = [{k: v.astype(dtype) for k, v in r.items()} for r in runs]  # one feed dict per run

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


def _ln(id, shape, epsilon=None, all_fed=False, runs=None, dtype="float32"):
    h = shape[-1]
    attrs = {} if epsilon is None else {"epsilon": epsilon}
    consts = {"gamma": _nonzero(h), "beta": _nonzero(h)}
    feeds = ["x"] + (["gamma", "beta"] if all_fed else [])
    sig = [(None,) + tuple(shape[1:])] + ([(h,), (h,)] if all_fed else [])
    runs = runs or [shape]
    data = []
    for s in runs:
        d = {"x": _nonzero(*s) * 3.0 + 0.5}
        if all_fed:
            d.update(gamma=_nonzero(h), beta=_nonzero(h))
        data.append(d)
    return Case("FusedLayerNorm", id, feeds, consts if not all_fed else {}, attrs, sig, data, dtype)


def _conv(id, x_shape, k, cout, batches=(None,), **attrs):
    kh, kw = k
    cin = x_shape[-1]
    consts = {"filter": _nonzero(kh, kw, cin, cout, low=0.05, high=0.5), "conv_bias": _nonzero(cout),
              "bn_gamma": _nonzero(cout), "bn_beta": _nonzero(cout), "bn_mean": _nonzero(cout),
              "bn_variance": _positive(cout)}
    runs = [{"x": _nonzero(*((b or x_shape[0]),) + tuple(x_shape[1:]))} for b in batches]
    return Case("YoloConvBnLeaky", id, ["x"], consts, attrs, [(None,) + tuple(x_shape[1:])], runs)


def _decode(id, shape, anchors, num_classes, stride, batches=(None,), dtype="float32", **attrs):
    runs = [{"raw": _nonzero(*((b if b is not None else shape[0]),) + tuple(shape[1:]), low=0.05, high=2.0)}
            for b in batches]
    return Case("YoloDecode", id, ["raw"], {}, dict(anchors=anchors, num_classes=num_classes, stride=stride, **attrs),
                [(None,) + tuple(shape[1:])], runs, dtype)


CASES = [
    _ln("odd", (2, 5, 7), runs=[(2, 5, 7), (1, 5, 7)]),
    _ln("h1-eps", (3, 1), epsilon=1e-3),
    _ln("empty-batch", (2, 16), runs=[(2, 16), (0, 16)]),
    _ln("gamma-beta-fed", (4, 33), epsilon=1e-5, all_fed=True),
    _ln("float16", (3, 2, 24), dtype="float16"),
    _conv("same-odd-stride2", (1, 7, 9, 3), (3, 3), 5, strides=[1, 2, 2, 1], padding="SAME"),
    _conv("explicit-asym", (2, 6, 5, 4), (3, 2), 3, padding="EXPLICIT",
          explicit_paddings=[0, 0, 1, 2, 0, 1, 0, 0], epsilon=1e-3, alpha=0.2),
    _conv("valid-stride12", (1, 8, 9, 2), (2, 3), 4, strides=[1, 1, 2, 1], padding="VALID"),
    _conv("same-dilation2", (1, 9, 8, 3), (3, 3), 2, padding="SAME", dilations=[1, 2, 2, 1]),
    _conv("1x1-batches", (1, 3, 3, 5), (1, 1), 7, batches=(2, 1, 0), padding="SAME"),
    _decode("a2c3", (1, 3, 5, 16), [10.0, 13.0, 33.0, 23.0], 3, 8, batches=(1, 2)),
    _decode("a3c1-1x1-scale", (2, 1, 1, 18), [1.5, 2.0, 3.0, 4.5, 6.0, 5.0], 1, 32, scale_x_y=1.05),
    _decode("empty-batch", (1, 2, 3, 7), [4.0, 5.0], 2, 16, batches=(1, 0)),
    _decode("float16", (1, 2, 2, 7), [4.0, 5.0], 2, 8, dtype="float16"),
]


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
    shapes = [tuple(case.runs[0][n].shape) if n in case.runs[0] else case.consts[n].shape
              for n in (a.name for a in case.spec.inputs)]
    want = case.spec.to_onnx_attrs(shapes, **case.attrs)
    for name, value in want.items():
        v = got[name]
        if isinstance(value, tuple):
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


@pytest.mark.parametrize("road", ["reference-ops", "function"])
def test_reference_evaluator(exported, road):
    case, custom, _ = exported
    model = custom
    if road == "function" and case.spec.name == "YoloConvBnLeaky":
        # onnx's evaluator cannot run LeakyRelu with an attribute linked from the
        # calling node (OpRunUnaryNum.run takes no linked_attributes): run the same
        # function after onnx's own inliner has written the attributes in.
        model = onnx.inliner.inline_local_functions(custom)
    ev = ReferenceEvaluator(model, new_ops=onnx_plugins.reference_ops() if road == "reference-ops" else None)
    for run in case.runs:
        out = ev.run(None, _feeds(case, run))
        _check(case, dict(zip([o.name for o in custom.graph.output], out)), run, road)


# -- what cannot be exported ---------------------------------------------------
def test_same_padding_with_dynamic_spatial_size_names_op_arg_and_shape():
    case = _conv("dyn", (1, 5, 5, 3), (3, 3), 2, padding="SAME")
    case.signature_shapes = [(None, None, None, 3)]
    fn, sig = case.function()
    with pytest.raises(ExportError, match=r"YoloConvBnLeaky: argument 'padding': SAME padding needs static H and W.*"
                                          r"\[\?,\?,\?,3\]"):
        export_onnx.convert(fn, sig)


def test_valid_padding_with_dynamic_spatial_size_exports():
    case = _conv("dyn-valid", (1, 6, 7, 3), (3, 3), 2, padding="VALID")
    case.signature_shapes = [(None, None, None, 3)]
    fn, sig = case.function()
    model, _ = export_onnx.convert(fn, sig)
    onnx.checker.check_model(model, full_check=True)
    out = onnx_plugins.session(model, kernels="all").run(None, case.runs[0])[0]
    _check(case, {"y": out}, case.runs[0], "ort-native, dynamic H/W")


def test_unsupported_op_fails_with_the_list_and_the_fix():
    @tf.function(input_signature=[tf.TensorSpec([3], tf.float32, name="x")], autograph=False)
    def fn(x):
        return {"y": tf.math.erfc(x) + tf.math.lgamma(x)}

    with pytest.raises(ExportError) as e:
        export_onnx.convert(fn, fn.input_signature)
    text = str(e.value)
    assert "Erfc" in text and "tf_op" in text and "handler" in text


@pytest.mark.parametrize("opset", [12, 99])
def test_bad_opset(opset):
    with pytest.raises(OptionError, match=f"--opset {opset}: supported opsets are 13..18"):
        export_onnx.check_opset(opset)


def test_every_op_has_a_registered_handler():
    from bridge import converters
    for spec in ops.all_specs():
        assert converters.backend_status(spec)["tf2onnx"] == "yes", spec.name
