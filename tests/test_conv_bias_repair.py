"""A Conv that tf2onnx gives a second bias (4 inputs, which no runtime loads)
becomes Conv + Add again: the pass on hand-made graphs against numpy float64,
and the Keras pattern that makes it (a pre-activation residual block at 1x1
spatial size, batch 1: ResNet50V2's conv5 blocks at 32x32) through `bridge
parity` against TensorFlow."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from bridge.converters import tf2onnx_repairs


def _conv_reference(x, w, biases):
    """float64 NCHW convolution, stride 1, no padding, plus per-channel biases."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    spatial = x.ndim - 2
    k = w.shape[2:]
    out_sz = [x.shape[2 + i] - k[i] + 1 for i in range(spatial)]
    y = np.zeros((x.shape[0], w.shape[0], *out_sz))
    for idx in np.ndindex(*k):
        window = x[(slice(None), slice(None)) + tuple(slice(idx[i], idx[i] + out_sz[i]) for i in range(spatial))]
        y += np.einsum("nc...,oc->no...", window, w[(slice(None), slice(None)) + idx])
    for b in biases:
        y += np.asarray(b, np.float64).reshape((-1,) + (1,) * spatial)
    return y


def _conv_model(x_shape, w, b1, extra, feed_extra):
    """Conv(x, w, b1, *extra) as tf2onnx leaves it: the extra biases are graph
    inputs (a tensor computed elsewhere) when `feed_extra`, else initializers."""
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b1, "b1")]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)]
    names = []
    for i, b in enumerate(extra):
        name = f"extra{i}"
        names.append(name)
        if feed_extra:
            inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, [b.size]))
        else:
            inits.append(numpy_helper.from_array(b, name))
    conv = helper.make_node("Conv", ["x", "w", "b1", *names], ["y"], name="block/BiasAdd")
    y_shape = [x_shape[0], w.shape[0]] + [x_shape[2 + i] - w.shape[2 + i] + 1 for i in range(len(x_shape) - 2)]
    graph = helper.make_graph([conv], "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
                              initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("x_shape,k,extras,feed", [
    ((1, 3, 5, 7), (3, 3), 1, True),     # odd sizes, a computed second bias (the ResNet50V2 case)
    ((2, 1, 1, 1), (1, 1), 1, False),    # size 1 everywhere, a constant second bias
    ((1, 4, 6), (2,), 2, True),          # Conv1D with two further biases
    ((1, 2, 3, 4, 5), (1, 2, 3), 1, False),  # Conv3D
])
def test_extra_bias_becomes_an_add(x_shape, k, extras, feed):
    rng = np.random.default_rng(len(x_shape) * 10 + extras)
    c_out = 5
    x = rng.uniform(-1, 1, x_shape).astype(np.float32)
    w = rng.uniform(-1, 1, (c_out, x_shape[1], *k)).astype(np.float32)
    biases = [rng.uniform(0.5, 2, c_out).astype(np.float32) for _ in range(1 + extras)]
    model = _conv_model(list(x_shape), w, biases[0], biases[1:], feed)
    assert tf2onnx_repairs.split_extra_conv_bias(model) == 1
    onnx.checker.check_model(model, full_check=True)
    assert all(len(n.input) <= 3 for n in model.graph.node if n.op_type == "Conv")
    assert [o.name for o in model.graph.output] == ["y"]
    feeds = {"x": x}
    if feed:
        feeds.update({f"extra{i}": b for i, b in enumerate(biases[1:])})
    got = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(["y"], feeds)[0]
    np.testing.assert_allclose(got, _conv_reference(x, w, biases), rtol=1e-5, atol=1e-5)


def test_a_conv_with_one_bias_is_left_alone():
    w = np.ones((2, 1, 1, 1), np.float32)
    model = _conv_model([1, 1, 2, 2], w, np.ones(2, np.float32), [], False)
    before = model.SerializeToString()
    assert tf2onnx_repairs.split_extra_conv_bias(model) == 0
    assert model.SerializeToString() == before


# -- the Keras pattern, end to end -----------------------------------------------
def _preactivation_block(channels=3, filters=6):
    import keras
    init = keras.initializers.RandomNormal(stddev=0.5, seed=1)
    bias = keras.initializers.RandomUniform(0.5, 1.5, seed=2)
    inp = keras.Input((1, 1, channels), batch_size=1, name="image")
    h = keras.layers.BatchNormalization(name="preact_bn")(inp)
    h = keras.layers.ReLU(name="preact_relu")(h)
    shortcut = keras.layers.Conv2D(filters, 1, kernel_initializer=init, bias_initializer=bias, name="shortcut")(h)
    r = keras.layers.Conv2D(filters, 3, padding="same", kernel_initializer=init, bias_initializer=bias, name="res")(h)
    out = keras.layers.Add(name="block_out")([shortcut, r])
    return keras.Model(inp, out, name="preact_block")


def test_the_keras_pattern_made_a_four_input_conv(monkeypatch):
    """Without the repair, tf2onnx writes the 4-input Conv for this block (so the
    test below does exercise the repair)."""
    import tensorflow as tf
    from bridge.converters import export_onnx
    model = _preactivation_block()
    fn = tf.function(lambda x: model(x, training=False))
    sig = [tf.TensorSpec((1, 1, 1, 3), tf.float32, name="image")]
    monkeypatch.setattr(tf2onnx_repairs, "split_extra_conv_bias", lambda m: 0)
    onnx_model, _ = export_onnx.convert_raw(fn, sig, opset=13, large=True)
    assert any(len(n.input) == 4 for n in onnx_model.graph.node if n.op_type == "Conv")


def test_parity_on_a_preactivation_residual_block():
    from bridge.parity import run_parity
    named = ["ort-lowered", "ort-functions", "onnx-reference"]
    report = run_parity(_preactivation_block(), runtimes=["tf", *named])
    rows = {r.name: r for r in report.runtimes}
    for name in named:  # each ran (an invalid export is an error row) and agrees with TensorFlow
        assert rows[name].status == "ok" and rows[name].passed, (name, rows[name].status, rows[name].reason)
