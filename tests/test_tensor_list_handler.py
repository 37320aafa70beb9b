"""converters/tf2onnx_tensor_list.py: a tf.TensorArray of size T written in a
Python loop and stacked (keras_hub's RWKV7) exports as a Concat and computes
what TensorFlow does (numpy float64 reference, several lengths incl. 1); a
list read inside a While loop still goes to tf2onnx's own handler; a list with
an index written twice is not taken for a straight-line one; the zoo's plain
tf2onnx run gets tf2onnx's own handler back."""
from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
ort = pytest.importorskip("onnxruntime")


def _run(fn, spec, x):
    from bridge.converters.export_onnx import convert_raw
    model, _ = convert_raw(fn, [spec], opset=18)
    ops = {n.op_type for n in model.graph.node}
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return ops, sess.run(None, {sess.get_inputs()[0].name: x})[0]


def _recurrence(steps, order=None):
    """h_t = tanh(0.5 h_{t-1} + x_t), written to a TensorArray at `order` (default 0..T-1)."""
    def fn(x):
        out = tf.TensorArray(tf.float32, size=steps)
        h = tf.zeros_like(x[:, 0])
        for t in (order or range(steps)):
            h = tf.tanh(0.5 * h + x[:, t])
            out = out.write(t, h)
        return tf.transpose(out.stack(), [1, 0, 2])
    return fn


def _reference(x):
    h, rows = np.zeros_like(x[:, 0], np.float64), []
    for t in range(x.shape[1]):
        h = np.tanh(0.5 * h + x[:, t])
        rows.append(h)
    return np.stack(rows, axis=1)


@pytest.mark.parametrize("shape", [(2, 5, 3), (1, 1, 4), (3, 7, 1)])
def test_straight_line_list_becomes_a_concat(shape, rng):
    x = rng.standard_normal(shape).astype(np.float32)
    spec = tf.TensorSpec([None, shape[1], shape[2]], tf.float32, name="x")
    ops, got = _run(tf.function(_recurrence(shape[1]), input_signature=[spec]), spec, x)
    assert "Concat" in ops and not any(o.startswith("TensorList") for o in ops), ops
    np.testing.assert_allclose(got, _reference(x.astype(np.float64)), rtol=0, atol=1e-5)


def test_while_loop_list_keeps_tf2onnx_handler(rng):
    x = rng.standard_normal((2, 6, 3)).astype(np.float32)
    spec = tf.TensorSpec([None, 6, 3], tf.float32, name="x")

    @tf.function(input_signature=[spec])
    def fn(x):
        def body(t, h, out):
            h = tf.tanh(0.5 * h + x[:, t])
            return t + 1, h, out.write(t, h)
        _, _, out = tf.while_loop(lambda t, h, out: t < 6, body,
                                  [0, tf.zeros_like(x[:, 0]), tf.TensorArray(tf.float32, size=6)])
        return tf.transpose(out.stack(), [1, 0, 2])
    ops, got = _run(fn, spec, x)
    assert "Loop" in ops and "Concat" not in ops, ops
    np.testing.assert_allclose(got, _reference(x.astype(np.float64)), rtol=0, atol=1e-5)


def test_not_straight_line_lists_are_left_to_tf2onnx(rng):
    """An index written twice (the second write wins in TF) is not a list of T
    items in order: tf2onnx's own handler refuses it, naming the op."""
    from bridge.converters.export_onnx import ExportError
    spec = tf.TensorSpec([None, 3, 2], tf.float32, name="x")
    fn = tf.function(_recurrence(3, order=[0, 1, 1]), input_signature=[spec])
    with pytest.raises(ExportError, match="TensorListStack"):
        _run(fn, spec, rng.standard_normal((1, 3, 2)).astype(np.float32))


def test_zoo_plain_run_gets_tf2onnx_own_handler_back():
    from tf2onnx.handler import tf_op
    from bridge.converters import tf2onnx_tensor_list
    from bridge.converters.tf2onnx_common import register_all
    from test_zoo import _zoo
    register_all()
    (key, own), = [(k, v) for k, v in tf2onnx_tensor_list.REPLACED.items() if k[2] == "TensorListStack"]
    domain, version, name = key
    bridges = tf_op.get_opsets()[domain][version][name]
    assert bridges is not own and "controlflow" in own[0].__module__
    with _zoo()._without_bridge_handlers():
        assert tf_op.get_opsets()[domain][version][name] is own
    assert tf_op.get_opsets()[domain][version][name] is bridges
