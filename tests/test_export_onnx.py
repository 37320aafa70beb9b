"""`bridge export MODEL --to onnx`: the command on a built-in model and on a user
SavedModel, judged against independent references (the unfused Keras model; the
numpy float64 references of the ops), and its usage errors."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tensorflow as tf

from bridge import modelsource, onnx_plugins, ops, tf_ops
from bridge.cli import main
from bridge.converters import export_onnx
from bridge.parity import verify
from bridge.parity.compare import Tolerance, compare, default_tolerance

TINY = ["yolov3-tiny", "--input-shape", "1,96,96,3", "--config", "width=0.25", "--seed", "3"]


def _export(capsys, *argv):
    rc = main(["export", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def _ort_run(path, feeds, custom):
    sess = onnx_plugins.session(path, kernels="all") if custom else \
        ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds)))


# -- a built-in model -----------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_unfused():
    from bridge import models
    model = models.build("yolov3-tiny", input_size=96, seed=3, width=0.25)
    feeds = models.sample_inputs(model, batch=1, seed=11)
    if not isinstance(feeds, dict):  # a single-input model may get its array alone
        feeds = {model.inputs[0].name: feeds}
    return model, feeds, {n: np.asarray(v) for n, v in zip(model.output_names, _as_list(model(feeds, training=False)))}


def _as_list(out):
    return list(out.values()) if isinstance(out, dict) else list(out) if isinstance(out, (list, tuple)) else [out]


@pytest.mark.parametrize("mode", ["custom", "lowered"])
def test_builtin_yolov3_tiny(tmp_path, capsys, tiny_unfused, mode):
    out_file = tmp_path / f"tiny-{mode}.onnx"
    rc, out, err = _export(capsys, *TINY, "--to", "onnx", "-o", str(out_file), "--mode", mode, "--json")
    assert rc == 0, err[-3000:]
    result = json.loads(out)
    for stage in ("fusing", "tracing", "converting", "checking", "verifying"):
        assert f"{stage} done in" in err, stage
    # the export's own check against the fused TF model passed and says so with numbers
    assert result["ok"] and result["checks"]
    assert all(np.isfinite(c["max_abs_error"]) and c["passed"] for c in result["checks"])
    model = onnx.load(str(out_file))
    onnx.checker.check_model(model, full_check=True)
    keras_model, feeds, ref = tiny_unfused
    assert [o.name for o in model.graph.output] == list(keras_model.output_names)
    custom_nodes = [n.op_type for n in model.graph.node if n.domain == ops.DOMAIN]
    if mode == "custom":
        assert "YoloConvBnLeaky" in custom_nodes
        assert {f.name for f in model.functions} == set(custom_nodes)
    else:
        assert custom_nodes == [] and ops.DOMAIN not in {o.domain for o in model.opset_import}
    # independent judge: the UNFUSED Keras model (standard TF ops) on the same inputs
    got = _ort_run(str(out_file), feeds, custom=(mode == "custom"))
    for name, r in ref.items():
        c = compare(got[name], r, default_tolerance("float32"))
        assert c.passed, f"{name}: max abs error {c.max_abs_error:.3g} vs the unfused model"
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".")]  # no temp folder left


def test_builtin_table_output(tmp_path, capsys):
    rc, out, err = _export(capsys, *TINY, "--to", "onnx", "-o", str(tmp_path / "t.onnx"), "--no-fuse")
    assert rc == 0, err[-3000:]
    assert "max abs error vs TF" in out and "FAILED" not in out
    assert "wrote" in out and "opset 18" in out


# -- a user .keras file ---------------------------------------------------------
def _user_keras(path):
    import keras
    rng = np.random.default_rng(9)
    inp = keras.Input((11, 10, 3), name="pixels")
    x = keras.layers.ZeroPadding2D(((1, 0), (1, 0)))(inp)
    x = keras.layers.Conv2D(6, 3, strides=2, padding="valid", use_bias=False, name="conv")(x)
    x = keras.layers.BatchNormalization(epsilon=1e-3, name="bn")(x)
    x = keras.layers.LeakyReLU(negative_slope=0.1, name="leaky")(x)
    y = keras.layers.LayerNormalization(epsilon=1e-5, name="features")(x)
    model = keras.Model(inp, y)
    for layer in model.layers:  # realistic, non-trivial weights: folding mistakes show
        layer.set_weights([rng.uniform(0.5, 1.5, w.shape).astype("float32") if "variance" in w.path or
                           "gamma" in w.path else rng.uniform(-0.5, 0.5, w.shape).astype("float32")
                           for w in layer.weights])
    model.save(path)
    return model


def test_user_keras_file_is_fused(tmp_path, capsys):
    model = _user_keras(str(tmp_path / "user.keras"))
    out_file = tmp_path / "user.onnx"
    rc, out, err = _export(capsys, str(tmp_path / "user.keras"), "--to", "onnx", "-o", str(out_file))
    assert rc == 0, err[-3000:]
    onnx_model = onnx.load(str(out_file))
    onnx.checker.check_model(onnx_model, full_check=True)
    assert sorted(n.op_type for n in onnx_model.graph.node if n.domain == ops.DOMAIN) == \
        ["FusedLayerNorm", "YoloConvBnLeaky"]
    assert [i.name for i in onnx_model.graph.input] == ["pixels"]
    assert [o.name for o in onnx_model.graph.output] == list(model.output_names)
    x = np.random.default_rng(1).uniform(0.05, 1.0, (2, 11, 10, 3)).astype("float32")
    ref = np.asarray(model(x, training=False))  # the unfused Keras layers: an independent judge
    got = _ort_run(str(out_file), {"pixels": x}, custom=True)[model.output_names[0]]
    c = compare(got, ref, default_tolerance("float32"))
    assert c.passed, f"max abs error {c.max_abs_error:.3g} vs the unfused Keras model"


# -- a user SavedModel ---------------------------------------------------------
ANCHORS = [10.0, 14.0, 23.0, 27.0]
NUM_CLASSES = 2
STRIDE = 16


class UserModule(tf.Module):
    """What a user with the fused ops writes: conv block, layer norm, decode."""

    def __init__(self, rng):
        super().__init__()
        cout = 2 * (5 + NUM_CLASSES)

        def var(*shape, positive=False):
            v = rng.uniform(0.5, 1.5, shape) if positive else rng.uniform(0.05, 0.5, shape) * rng.choice([-1, 1], shape)
            return tf.Variable(v.astype("float32"))

        self.filter = var(3, 3, 3, cout)
        self.params = [var(cout), var(cout), var(cout), var(cout), var(cout, positive=True)]
        self.gamma, self.beta = var(cout), var(cout)

    # even H and W, stride 2, SAME: a total padding of 1, the odd pixel at the bottom and the right
    @tf.function(input_signature=[tf.TensorSpec([None, 8, 10, 3], tf.float32, name="image")])
    def __call__(self, image):
        y = tf_ops.yolo_conv_bn_leaky(image, self.filter, *self.params, strides=[1, 2, 2, 1], padding="SAME")
        y = tf_ops.fused_layer_norm(y, self.gamma, self.beta, epsilon=1e-3)
        boxes, objectness, class_probs = tf_ops.yolo_decode(y, ANCHORS, NUM_CLASSES, STRIDE)
        return {"boxes": boxes, "objectness": objectness, "class_probs": class_probs}

    def reference(self, image):
        """The same computation from the numpy float64 references of the ops."""
        p = [v.numpy() for v in self.params]
        y = ops.get("YoloConvBnLeaky").reference(image, self.filter.numpy(), *p, strides=[1, 2, 2, 1], padding="SAME")
        y = ops.get("FusedLayerNorm").reference(y, self.gamma.numpy(), self.beta.numpy(), epsilon=1e-3)
        boxes, obj, cls = ops.get("YoloDecode").reference(y, anchors=ANCHORS, num_classes=NUM_CLASSES, stride=STRIDE)
        return {"boxes": boxes, "objectness": obj, "class_probs": cls}


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory):
    module = UserModule(np.random.default_rng(5))
    path = str(tmp_path_factory.mktemp("user") / "saved")
    tf.saved_model.save(module, path, signatures=module.__call__.get_concrete_function())
    return path, module


def _check_against_reference(path, module, custom, batch=2):
    image = np.random.default_rng(batch).uniform(0.05, 1.0, (batch, 8, 10, 3)).astype("float32")
    got = _ort_run(path, {"image": image}, custom)
    ref = module.reference(image)
    assert sorted(got) == sorted(ref)
    # ... and the TF kernels, whose SAME padding is their own C++ (the exporter's
    # pads and the reference's come from one Python rule)
    tf_out = {k: v.numpy() for k, v in module(tf.constant(image)).items()}
    # one conv + layer norm + decode: the three ops' tolerances chained, scaled to the output
    for judge, outs in (("reference", ref), ("TF kernels", tf_out)):
        for name, r in outs.items():
            c = compare(got[name], np.asarray(r, "float32"), Tolerance(atol=2e-4, rtol=2e-4))
            assert c.passed, f"{name} vs the {judge}: max abs error {c.max_abs_error:.3g}"


@pytest.mark.parametrize("mode", ["custom", "lowered"])
def test_user_savedmodel(tmp_path, capsys, saved_model, mode):
    path, module = saved_model
    out_file = tmp_path / "user.onnx"
    rc, out, err = _export(capsys, path, "--to", "onnx", "-o", str(out_file), "--mode", mode, "--opset", "17")
    assert rc == 0, err[-3000:]
    assert "fusion report for" in out  # the graph was read for patterns (the ops are already there)
    model = onnx.load(str(out_file))
    onnx.checker.check_model(model, full_check=True)
    assert {o.domain: o.version for o in model.opset_import}[""] == 17
    custom_nodes = sorted(n.op_type for n in model.graph.node if n.domain == ops.DOMAIN)
    assert custom_nodes == (sorted(s.name for s in ops.all_specs()) if mode == "custom" else [])
    # the batch stayed dynamic: run at a batch the trace never saw
    _check_against_reference(str(out_file), module, custom=(mode == "custom"), batch=3)


def test_external_data(tmp_path, saved_model):
    path, module = saved_model
    source = modelsource.resolve(path)
    result = verify.export(export_onnx, source, str(tmp_path / "big.onnx"), external_data=True)
    assert result.ok and result.files == [str(tmp_path / "big.onnx"), str(tmp_path / "big.onnx.data")]
    assert os.path.getsize(tmp_path / "big.onnx.data") > 0
    model = onnx.load(str(tmp_path / "big.onnx"), load_external_data=False)
    assert any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer)
    onnx.checker.check_model(str(tmp_path / "big.onnx"), full_check=True)
    _check_against_reference(str(tmp_path / "big.onnx"), module, custom=True)


def test_unsupported_op_writes_nothing(tmp_path, capsys):
    class Bad(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
        def __call__(self, x):
            return {"y": tf.math.lgamma(x)}  # no tf2onnx handler

    m = Bad()
    tf.saved_model.save(m, str(tmp_path / "bad"), signatures=m.__call__.get_concrete_function())
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    rc, out, err = _export(capsys, str(tmp_path / "bad"), "--to", "onnx", "-o", str(out_dir / "bad.onnx"))
    assert rc == 1
    assert "Lgamma" in err and "handler" in err
    assert os.listdir(out_dir) == []


# -- usage errors: exit 2 with a clear message -----------------------------------
@pytest.mark.parametrize("argv, message", [
    (["no-such-model", "--to", "onnx"], "unknown model 'no-such-model'"),
    (["{saved}", "--to", "onnx", "--input-shape", "image:1,a,9,3"], "expected NAME:D,D,..."),
    (["{saved}", "--to", "onnx", "--input-shape", "image:1,7,9"], "3 dims given, input 'image' has rank 4"),
    (["{saved}", "--to", "onnx", "--input-shape", "img:1,7,9,3"], "the model has no input 'img'"),
    (["{saved}", "--to", "onnx", "--input-shape", "image:1,7,10,3"], "dim 1 is fixed to 8"),
    (["{saved}", "--to", "onnx", "--opset", "7"], "--opset 7: supported opsets are 13..18"),
    (["{saved}", "--to", "onnx", "--mode", "fast"], "--mode fast: --to onnx has modes custom, lowered"),
    (["{saved}", "--to", "onnx", "--batch", "0"], "--batch 0: must be >= 1"),
    (["{saved}", "--to", "onnx", "--config", "width=2"], "--config applies to built-in models only"),
    (["yolov3-tiny", "--to", "onnx", "--config", "width"], "--config 'width': expected KEY=VALUE"),
    (["{onnx}", "--to", "onnx"], "already an ONNX model"),
])
def test_usage_errors(tmp_path, capsys, saved_model, argv, message):
    onnx_file = tmp_path / "m.onnx"
    onnx.save(onnx.helper.make_model(onnx.helper.make_graph(
        [onnx.helper.make_node("Relu", ["x"], ["y"])], "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])])), str(onnx_file))
    argv = [a.format(saved=saved_model[0], onnx=str(onnx_file)) for a in argv]
    rc, out, err = _export(capsys, *argv, "-o", str(tmp_path / "x.onnx"))
    assert rc == 2, err
    assert message in err
    assert not (tmp_path / "x.onnx").exists()


def test_python_dash_m(tmp_path):
    r = subprocess.run([sys.executable, "-m", "bridge", "export", "nope.keras", "--to", "onnx"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "no such file: nope.keras" in r.stderr


def test_input_shape_parsing():
    assert modelsource.parse_input_shapes(["image:1,96,96,3", "mask:?,128"]) == {"image": (1, 96, 96, 3),
                                                                                   "mask": (None, 128)}
    assert modelsource.parse_input_shapes(["2,5"]) == {"": (2, 5)}
    with pytest.raises(modelsource.ModelSourceError, match="given twice"):
        modelsource.parse_input_shapes(["a:1", "a:2"])
    with pytest.raises(modelsource.ModelSourceError, match="non-negative"):
        modelsource.parse_input_shapes(["a:1,-3"])


def test_inputs_carry_the_vocabulary_and_generated_data_stays_in_range():
    """One input description for `bridge export` and `bridge parity`: ids within the
    embedding's vocabulary, floats in (0, 1], the shapes a run needs."""
    import keras
    from onnx import TensorProto, helper
    ids = keras.Input((None,), dtype="int32", name="ids")
    image = keras.Input((3, 5, 2), name="image")
    pooled = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(37, 4)(ids))
    model = keras.Model([ids, image], [pooled, keras.layers.Flatten()(image)])
    src = modelsource.from_object(model, input_shapes=["ids:?,9"])
    assert [(i.name, i.high) for i in src.inputs] == [("ids", 37), ("image", None)]
    assert src.concrete_shapes(batch=3) == {"ids": (3, 9), "image": (3, 3, 5, 2)}
    feeds = src.sample_inputs(batch=200, seed=1)
    assert feeds["ids"].dtype == np.int32 and feeds["ids"].min() == 0 and feeds["ids"].max() == 36
    x = feeds["image"]
    assert x.dtype == np.float32 and x.shape == (200, 3, 5, 2) and 0 < x.min() and x.max() <= 1
    np.testing.assert_array_equal(x, src.sample_inputs(batch=200, seed=1)["image"])
    assert not np.array_equal(x, src.sample_inputs(batch=200, seed=2)["image"])
    # a length the model leaves open is no error: one run takes bridge's default length (no config bounds it)
    open_ = modelsource.from_object(model)
    assert open_.concrete_shapes() == {"ids": (1, 16), "image": (1, 3, 5, 2)}
    assert "ids[?,?]" in open_.sample_note() and "ids[1,16]" in open_.sample_note()
    # an onnx.ModelProto in memory: Gather indices into a table are ids below its length
    table = helper.make_tensor("table", TensorProto.FLOAT, [11, 2], np.ones(22, np.float32))
    graph = helper.make_graph([helper.make_node("Gather", ["table", "ids"], ["y"])], "g",
                              [helper.make_tensor_value_info("ids", TensorProto.INT64, ["N", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, 2])], [table])
    src = modelsource.from_object(helper.make_model(graph))
    assert (src.kind, src.name, src.output_names) == ("onnx", "g", ["y"])
    assert src.inputs == [modelsource.TensorInfo("ids", (None, 4), "int64", 11)]
    with pytest.raises(modelsource.ModelSourceError, match="expected a Keras model, a loaded SavedModel"):
        modelsource.from_object(object())
