"""Keras 3 models as real code writes them, through the ONNX export: dict inputs
(keras_hub style), token ids within the vocabulary, exact GELU (Erfc), grouped
convolutions (XLA-compiled nested functions), Normalization constants, and a
two-input SavedModel with the fused ops. Each is judged against TensorFlow
running the same model (another library), on inputs of awkward sizes."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tensorflow as tf

keras = pytest.importorskip("keras")

from bridge import modelsource  # noqa: E402
from bridge.converters import export_onnx  # noqa: E402
from bridge.parity import verify  # noqa: E402
from bridge.parity.compare import compare, default_tolerance  # noqa: E402


def _convert(model, shapes=None):
    """(lowered ONNX model, its source) of a Keras model, converted in memory."""
    src = modelsource.from_object(model, input_shapes=shapes)
    onnx_model, _ = export_onnx.convert(src.function(), src.signature(), mode="lowered",
                                        output_names=src.output_names)
    onnx.checker.check_model(onnx_model, full_check=True)
    return onnx_model, src


def _against_tf(onnx_model, src, feeds):
    """max |onnxruntime - TensorFlow| per output, asserted within the float32 tolerance."""
    sess = ort.InferenceSession(onnx_model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    ref = {k: np.asarray(v) for k, v in src.function()(*[feeds[i.name] for i in src.inputs]).items()}
    assert sorted(got) == sorted(ref)
    for name, r in ref.items():
        c = compare(got[name], r, default_tolerance(r.dtype))
        assert c.passed, f"{name}: max error {c.max_abs_error} ({c.note})"
    return got


def _ops(onnx_model):
    return {n.op_type for n in onnx_model.graph.node}


# -- dict inputs, token ids -----------------------------------------------------------
def _dict_model(vocab=7):
    ids = keras.Input((None,), dtype="int32", name="ids_tensor")
    mask = keras.Input((None,), dtype="int32", name="mask_tensor")
    x = keras.layers.Embedding(vocab, 4, name="tok")(ids)
    x = x * keras.ops.expand_dims(keras.ops.cast(mask, "float32"), -1)
    x = keras.layers.LayerNormalization(name="ln")(keras.layers.Dense(5)(x))
    # keys differ from the tensor names: the keys are what the model is called with
    return keras.Model({"token_ids": ids, "padding_mask": mask}, {"seq": x, "pooled": keras.ops.mean(x, axis=1)})


@pytest.mark.filterwarnings("ignore:When providing `inputs` as a dict")
@pytest.mark.parametrize("length", [1, 5])
def test_dict_inputs_are_named_by_their_keys(length):
    model = _dict_model()
    onnx_model, src = _convert(model, {"token_ids": (2, length), "padding_mask": (2, length)})
    assert [i.name for i in src.inputs] == ["padding_mask", "token_ids"]  # Keras' flattened order
    assert sorted(i.name for i in onnx_model.graph.input) == ["padding_mask", "token_ids"]
    feeds = src.sample_inputs(batch=2, seed=3)
    _against_tf(onnx_model, src, feeds)


@pytest.mark.filterwarnings("ignore:When providing `inputs` as a dict")
def test_token_ids_stay_below_the_vocabulary():
    model = _dict_model(vocab=3)
    src = modelsource.from_object(model, input_shapes={"token_ids": (4, 50), "padding_mask": (4, 50)})
    info = {i.name: i for i in src.inputs}
    assert info["token_ids"].high == 3 and info["padding_mask"].high is None
    ids = src.sample_inputs(batch=4, seed=0)["token_ids"]
    assert ids.max() == 2 and ids.min() == 0  # the whole vocabulary, nothing beyond


def test_nested_embedding_sets_the_vocabulary():
    class TokenAndPosition(keras.layers.Layer):  # keras_hub's TokenAndPositionEmbedding holds its Embedding
        def __init__(self, **kw):
            super().__init__(**kw)
            self.token = keras.layers.Embedding(11, 4)

        def call(self, x):
            return self.token(x)

    ids = keras.Input((6,), dtype="int32", name="token_ids")
    model = keras.Model(ids, TokenAndPosition()(ids))
    assert modelsource.from_object(model).inputs[0].high == 11


# -- ops tf2onnx 1.17 cannot convert ------------------------------------------------------
@pytest.mark.parametrize("shape", [(1, 3), (2, 7, 5), (0, 4)])
def test_exact_gelu_erfc(shape, rng):
    x = keras.Input(shape[1:], name="x")
    model = keras.Model(x, keras.layers.Activation(keras.activations.gelu)(x))  # approximate=False: Erfc
    fn = modelsource.from_object(model, input_shapes={"x": shape}).function()
    assert "Erfc" in {op.type for op in fn.get_concrete_function().graph.get_operations()}
    onnx_model, src = _convert(model, {"x": shape})
    assert "Erf" in _ops(onnx_model) and "Erfc" not in _ops(onnx_model)
    feeds = {"x": (rng.standard_normal(shape) * 4).astype("float32")}  # both tails
    _against_tf(onnx_model, src, feeds)


@pytest.mark.parametrize("groups,filters,stride", [(6, 6, 1), (2, 4, 2), (3, 9, 1)])
def test_grouped_conv(groups, filters, stride, rng):
    x = keras.Input((9, 7, 6), name="x")
    y = keras.layers.Conv2D(filters, 3, strides=stride, groups=groups, padding="same")(x)
    model = keras.Model(x, keras.layers.Conv2D(5, 1)(y))
    onnx_model, src = _convert(model, {"x": (2, 9, 7, 6)})
    assert "StatefulPartitionedCall" not in _ops(onnx_model)
    convs = [n for n in onnx_model.graph.node if n.op_type == "Conv"]
    assert sorted(next((a.i for a in n.attribute if a.name == "group"), 1) for n in convs) == [1, groups]
    _against_tf(onnx_model, src, {"x": rng.standard_normal((2, 9, 7, 6)).astype("float32")})
    model(np.zeros((1, 9, 7, 6), "float32"))  # TensorFlow still runs it afterwards (its XLA mark is back)


def test_normalization_constants_become_initializers(rng):
    x = keras.Input((5, 5, 3), name="x")
    norm = keras.layers.Normalization(axis=-1)
    norm.adapt(rng.standard_normal((8, 5, 5, 3)).astype("float32") * 3 + 2)
    model = keras.Model(x, keras.layers.Conv2D(2, 3)(norm(x)))
    onnx_model, src = _convert(model, {"x": (1, 5, 5, 3)})
    assert [i.name for i in onnx_model.graph.input] == ["x"]
    _against_tf(onnx_model, src, {"x": rng.standard_normal((1, 5, 5, 3)).astype("float32")})


# -- a SavedModel with two inputs and the fused ops ----------------------------------------------
X_SHAPE, SEQ_SHAPE = (1, 15, 13, 3), (3, 5, 16)   # odd sizes: SAME at stride 2 pads unevenly
CBL = dict(strides=(1, 2, 2, 1), padding="SAME", epsilon=1e-3, alpha=0.2)
DECODE = dict(anchors=[10.0, 13.0, 16.0, 30.0, 33.0, 23.0], num_classes=2, stride=16, scale_x_y=1.05)
LN = dict(epsilon=1e-5)


class _TwoInputs(tf.Module):
    """Every parameter random and non-zero, each BatchNorm argument distinct
    (zeros and ones hide a swapped argument)."""

    def __init__(self):
        super().__init__()
        r = np.random.default_rng(0)
        self.w = tf.Variable(r.normal(0, 0.2, (3, 3, 3, 8)).astype("float32"))
        self.bn = [tf.Variable(v.astype("float32")) for v in (
            r.normal(0, 0.3, 8),          # conv bias
            r.uniform(0.5, 1.5, 8),       # gamma
            r.normal(0, 0.3, 8),          # beta
            r.normal(0, 0.3, 8),          # moving mean
            r.uniform(0.5, 2.0, 8))]      # moving variance
        self.proj = tf.Variable(r.normal(0, 0.3, (8, 3 * 7)).astype("float32"))
        self.gamma = tf.Variable(r.normal(1, 0.1, 16).astype("float32"))
        self.beta = tf.Variable(r.normal(0, 0.1, 16).astype("float32"))

    @tf.function(input_signature=[tf.TensorSpec(X_SHAPE, tf.float32, name="x"),
                                  tf.TensorSpec(SEQ_SHAPE, tf.float32, name="seq")])
    def __call__(self, x, seq):
        from bridge import tf_ops
        y = tf_ops.yolo_conv_bn_leaky(x, self.w, *self.bn, **CBL)
        y = tf.einsum("nhwc,cd->nhwd", y, self.proj)
        boxes, objectness, classes = tf_ops.yolo_decode(y, **DECODE)
        return {"boxes": boxes, "objectness": objectness, "classes": classes,
                "norm": tf_ops.fused_layer_norm(seq, self.gamma, self.beta, **LN)}

    def reference(self, x, seq) -> dict:
        """The same graph in numpy float64, each fused op by its bridge.ops reference."""
        from bridge import ops
        f64 = lambda v: np.asarray(v, np.float64)  # noqa: E731
        y = ops.get("YoloConvBnLeaky").reference(x, f64(self.w), *map(f64, self.bn), **CBL)
        boxes, objectness, classes = ops.get("YoloDecode").reference(y @ f64(self.proj), **DECODE)
        norm = ops.get("FusedLayerNorm").reference(seq, f64(self.gamma), f64(self.beta), **LN)
        return {"boxes": boxes, "objectness": objectness, "classes": classes, "norm": norm}


def test_two_input_savedmodel_with_the_fused_ops(tmp_path, rng):
    """The export's own check compares with TensorFlow running bridge's TF kernels,
    which share bridge/kernels/*.h with the onnxruntime kernels (a bug there
    cancels out): the numbers are judged against bridge.ops' float64 references,
    on the native kernels and on the function bodies."""
    from conftest import rule_excess
    from bridge import onnx_plugins
    from bridge.exporting import quiet
    module = _TwoInputs()
    tf.saved_model.save(module, str(tmp_path / "sm"), signatures=module.__call__)
    src = modelsource.resolve(str(tmp_path / "sm"))
    assert [i.name for i in src.inputs] == ["seq", "x"]
    path = str(tmp_path / "sm.onnx")
    result = verify.export(export_onnx, src, path, mode="custom", progress=quiet())
    assert result.ok and sorted(c.output for c in result.checks) == ["boxes", "classes", "norm", "objectness"]
    assert result.details["custom_nodes"] == {"com.bridge::FusedLayerNorm": 1, "com.bridge::YoloConvBnLeaky": 1,
                                              "com.bridge::YoloDecode": 1}
    feeds = {"x": rng.standard_normal(X_SHAPE).astype("float32"),
             "seq": (rng.standard_normal(SEQ_SHAPE) * 2 + 0.5).astype("float32")}
    want = module.reference(feeds["x"], feeds["seq"])
    assert all(np.abs(v).max() > 0.1 for v in want.values())
    for kernels in ("all", "none"):
        sess = onnx_plugins.session(path, kernels=kernels)
        got = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
        for name, ref in want.items():
            assert rule_excess(got[name], ref, atol=1e-4) <= 1, (kernels, name, np.abs(got[name] - ref).max())


@pytest.mark.parametrize("activation", ["swish", "silu", "hard_swish"])
def test_custom_gradient_activations_through_tflite(tmp_path, activation, rng):
    """Keras 3's swish is a tf.custom_gradient (an IdentityN in the trace), after which TFLite
    wrote no signature at all (EfficientNet, MobileNetV3); with Normalization constants too."""
    pytest.importorskip("ai_edge_litert")
    from bridge.converters import export_tflite
    from bridge.exporting import quiet
    x = keras.Input((5, 5, 3), name="x")
    norm = keras.layers.Normalization(axis=-1)
    norm.adapt(rng.standard_normal((8, 5, 5, 3)).astype("float32") * 3 + 2)
    y = keras.layers.Activation(activation)(keras.layers.Conv2D(4, 3)(norm(x)))
    model = keras.Model(x, {"a": keras.layers.Conv2D(2, 1)(y), "b": y})
    src = modelsource.from_object(model, input_shapes={"x": (2, 5, 5, 3)})
    result = verify.export(export_tflite, src, str(tmp_path / "n.tflite"), mode="lowered", progress=quiet())
    assert result.ok and sorted(c.output for c in result.checks) == ["a", "b"], result.checks


def test_an_op_of_a_later_opset_names_the_opset_to_use():
    from bridge.exporting import ExportError
    x = keras.Input((5, 2, 8), name="x")
    mha = keras.layers.MultiHeadAttention(num_heads=2, key_dim=8)   # its einsums, as in keras_hub's ViT
    model = keras.Model(x, mha(keras.layers.Reshape((5, 16))(x), keras.layers.Reshape((5, 16))(x)))
    src = modelsource.from_object(model, input_shapes={"x": (1, 5, 2, 8)})
    with pytest.raises(ExportError, match=r"Einsum is standard ONNX from opset 12 on; this export is at opset 11: "
                                          r"export with --opset 12 or higher"):
        export_onnx.convert_raw(src.function(), src.signature(), opset=11)
    onnx_model, _ = export_onnx.convert_raw(src.function(), src.signature(), opset=12)
    assert "Einsum" in _ops(onnx_model)
