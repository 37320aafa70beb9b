"""The Keras fusion rewriter (bridge.converters.fuse): fused vs unfused outputs on
every built-in model at several input sizes, the report's exact counts, YOLOv3
layer by layer (and block by block against the numpy float64 reference), near
misses left intact, serialization (.keras, SavedModel, tf.function)."""
from __future__ import annotations

import json

import numpy as np
import pytest

keras = pytest.importorskip("keras")
tf = pytest.importorskip("tensorflow")

from bridge import models, ops  # noqa: E402
from bridge.converters import fuse  # noqa: E402
from bridge.converters.fuse_layers import FusedConvBnLeaky, FusedLayerNormalization, FusedYoloDecode  # noqa: E402
from conftest import assert_close  # noqa: E402

CONV = ops.get("YoloConvBnLeaky")
NORM = ops.get("FusedLayerNorm")


def assert_model_close(op, got, ref, what=""):
    """docs/ops.md's float32 tolerance of `op`, element by element (conftest.assert_close)."""
    assert_close(op, got, np.asarray(ref, np.float64), what=what)


def _outputs(model, x):
    out = model(x)
    return [np.asarray(o) for o in (out if isinstance(out, (list, tuple)) else [out])]


def _classes(model):
    return {type(l) for l in model.layers}


@pytest.fixture(scope="module")
def yolov3_pair():
    m = models.build("yolov3", 64, width=0.125, decode=True)
    return m, *fuse(m)


# -- whole models: fused vs unfused --------------------------------------------------

def test_yolov3_report_counts(yolov3_pair):
    m, f, report = yolov3_pair
    assert report.fused("conv_bn_leaky") == 72 and report.fused("zero_padding") == 5
    assert report.fused("yolo_decode") == 3 and report.fused("layer_norm") == 0
    assert all(not report.skipped(p) for p in ("conv_bn_leaky", "zero_padding", "layer_norm", "yolo_decode"))
    # nothing unfused is left of those patterns, and the plain output convs stay
    assert not _classes(f) & {keras.layers.BatchNormalization, keras.layers.LeakyReLU,
                              keras.layers.ZeroPadding2D, models.yolo.YoloDecodeHead}
    assert sum(isinstance(l, FusedConvBnLeaky) for l in f.layers) == 72
    assert [l.name for l in f.layers if type(l) is keras.layers.Conv2D] == ["head_s32", "head_s16", "head_s8"]
    assert f.name == "yolov3_fused" and m.count_params() == f.count_params()


@pytest.mark.parametrize("size", [32, 64, (64, 96)])
def test_yolov3_fused_matches_unfused(size, yolov3_pair):
    m, f, _ = yolov3_pair
    if size != 64:  # the weights do not depend on the input size
        m = models.build("yolov3", size, width=0.125, decode=True)
        f, _ = fuse(m)
    x = models.sample_inputs(m, batch=1, seed=5)
    for name, got, ref in zip(("boxes", "objectness", "class_probs"), _outputs(f, x), _outputs(m, x)):
        assert_model_close("YoloConvBnLeaky", got, ref, f"yolov3 {size} {name}")


@pytest.mark.parametrize("size,batch", [(64, 2), (96, 1)])
def test_yolov3_tiny_fused_matches_unfused(size, batch):
    m = models.build("yolov3-tiny", size, width=0.5)
    f, report = fuse(m)
    assert report.fused("conv_bn_leaky") == 11 and report.fused("zero_padding") == 0
    x = models.sample_inputs(m, batch=batch, seed=2)
    for got, ref in zip(_outputs(f, x), _outputs(m, x)):
        assert got.shape[0] == batch
        assert_model_close("YoloConvBnLeaky", got, ref, f"yolov3-tiny {size} batch {batch}")


@pytest.mark.parametrize("layers,length,batch", [(2, 12, 2), (3, 1, 1), (2, 33, 3), (2, 12, 0)])
def test_bert_fused_matches_unfused(layers, length, batch):
    m = models.build("bert", length, layers=layers, vocab_size=700)
    f, report = fuse(m)
    assert report.fused("layer_norm") == 2 * layers + 1
    assert sum(type(l) is keras.layers.LayerNormalization for l in f.layers) == 0
    x = models.sample_inputs(m, batch=batch, seed=3)
    assert_model_close("FusedLayerNorm", _outputs(f, x)[0], _outputs(m, x)[0], f"bert {layers}x{length}")


# -- YOLOv3 layer by layer -------------------------------------------------------------

def test_yolov3_layer_by_layer(yolov3_pair):
    """Every fused block's output against the matching unfused block's (LeakyReLU)
    output, both models running on the same image (seed 001's alignment)."""
    m, f, report = yolov3_pair
    blocks = [(b.layer, b.replaces[-1]) for b in report.blocks if b.pattern == "conv_bn_leaky"]
    assert len(blocks) == 72
    fused_probe = keras.Model(f.input, [f.get_layer(fl).output for fl, _ in blocks])
    orig_probe = keras.Model(m.input, [m.get_layer(ol).output for _, ol in blocks])
    x = models.sample_inputs(m, seed=7)
    for (fl, ol), got, ref in zip(blocks, fused_probe(x), orig_probe(x)):
        assert_model_close("YoloConvBnLeaky", got, ref, f"{fl} vs {ol}")


@pytest.mark.parametrize("block", [1, 2, 3, 26, 72])
def test_yolov3_block_against_reference(block, yolov3_pair):
    """One fused block on the unfused model's input to that block, against the
    numpy float64 reference computed from the original Conv/BN/LeakyReLU weights
    (docs/ops.md's element-wise tolerance, unscaled)."""
    m, f, report = yolov3_pair
    b = next(b for b in report.blocks if b.replaces[-1] == f"leaky_{block}")
    first = m.get_layer(b.replaces[0])
    x = keras.Model(m.input, first.input)(models.sample_inputs(m, seed=block))
    conv, bn, leaky = (m.get_layer(n) for n in b.replaces[-3:])
    pad = m.get_layer(b.replaces[0]) if len(b.replaces) == 4 else None
    if pad is not None:
        (t, bt), (l, r) = pad.padding
        attrs = dict(padding="EXPLICIT", explicit_paddings=(0, 0, t, bt, l, r, 0, 0))
    else:
        attrs = dict(padding=conv.padding.upper())
    ref = CONV.reference(np.asarray(x), conv.kernel.numpy(), np.zeros(conv.filters), bn.gamma.numpy(),
                         bn.beta.numpy(), bn.moving_mean.numpy(), bn.moving_variance.numpy(),
                         strides=(1, *conv.strides, 1), epsilon=bn.epsilon, alpha=leaky.negative_slope, **attrs)
    got = np.asarray(f.get_layer(b.layer)(x))
    assert CONV.tolerance["float32"].excess(got, ref) <= 1
    assert np.asarray(leaky(bn(conv(pad(x) if pad else x)))).shape == got.shape


# -- near misses -------------------------------------------------------------------

def _cbl(x, name, conv=None, bn=None, alpha=0.1, bn_call=None):
    x = keras.layers.Conv2D(**{"filters": 8, "kernel_size": 1, "use_bias": False, **(conv or {})},
                            name=f"{name}_conv")(x)
    x = keras.layers.BatchNormalization(**(bn or {}), name=f"{name}_bn")(x, **(bn_call or {}))
    return keras.layers.LeakyReLU(alpha, name=f"{name}_leaky")(x)


def _randomize(model, seed=0):
    rng = np.random.default_rng(seed)
    for v in model.weights:
        shape = tuple(v.shape)
        if "moving_variance" in v.path:
            v.assign(rng.uniform(0.5, 2.0, shape).astype(np.float32))
        elif "gamma" in v.path:
            v.assign(rng.uniform(0.5, 1.5, shape).astype(np.float32))
        else:
            scale = 1 / np.sqrt(np.prod(shape[:-1])) if len(shape) > 1 else 0.5
            v.assign((rng.standard_normal(shape) * scale).astype(np.float32))


@pytest.fixture(scope="module")
def user_model():
    """A user's model with three fusable blocks, one fusable LayerNorm, and a near
    miss of every kind the rewriter knows."""
    L = keras.layers
    x = inp = keras.Input((12, 12, 3), name="image")
    x = _cbl(x, "ok", conv=dict(kernel_size=3, padding="same", use_bias=True), bn=dict(epsilon=1e-2), alpha=0.2)
    x = _cbl(x, "plain", bn=dict(center=False, scale=False))
    b = L.BatchNormalization(name="relu_bn")(L.Conv2D(8, 3, padding="same", name="relu_conv")(x))
    x = L.ReLU(name="relu")(b)
    c = L.Conv2D(8, 1, name="shared_conv")(x)
    x = L.Add(name="shared_add")([c, L.LeakyReLU(0.1, name="shared_leaky")(L.BatchNormalization(name="shared_bn")(c))])
    x = _cbl(x, "act", conv=dict(activation="relu"))
    x = _cbl(x, "group", conv=dict(kernel_size=3, padding="same", groups=2))
    x = L.ZeroPadding2D(((0, 1), (0, 1)), name="same_pad")(x)
    x = _cbl(x, "same", conv=dict(kernel_size=3, padding="same"))
    x = L.ZeroPadding2D(((1, 2), (0, 1)), name="fold_pad")(x)
    x = _cbl(x, "fold", conv=dict(kernel_size=3, strides=2, padding="valid"))
    x = L.LeakyReLU(0.3, name="lonely_leaky")(x)
    x = _cbl(x, "renorm", bn=dict(renorm=True))
    x = _cbl(x, "axis", bn=dict(axis=1))
    t = L.BatchNormalization(name="out_bn")(L.Conv2D(8, 1, name="out_conv")(x))
    x = L.LeakyReLU(0.1, name="out_leaky")(t)
    x = _cbl(x, "train", bn_call=dict(training=True))  # last: Keras runs all later layers in training mode
    x = L.Reshape((-1, 8), name="tokens")(x)
    x = L.LayerNormalization(axis=1, name="ln_axis1")(x)
    x = L.LayerNormalization(center=False, scale=False, epsilon=1e-4, name="ln_plain")(x)
    x = L.LayerNormalization(axis=[1, 2], name="ln_two_axes")(x)
    x = L.BatchNormalization(name="dense_bn")(L.Dense(6, name="dense")(x))
    model = keras.Model(inp, [x, t], name="user")
    _randomize(model)
    # the conv bias is large, so counting it twice (seed 001's pitfall) shows
    model.get_layer("ok_conv").bias.assign(np.linspace(-3, 3, 8).astype(np.float32))
    return model, *fuse(model)


EXPECTED_SKIPS = {
    "conv_bn_leaky": {
        ("relu_conv", "relu_bn"): "followed by ReLU 'relu', not a LeakyReLU",
        ("shared_conv", "shared_bn"): "the Conv2D output feeds 2 consumers",
        ("train_conv", "train_bn"): "called with training=True",
        ("act_conv", "act_bn"): "Conv2D has activation 'relu'",
        ("group_conv", "group_bn"): "groups=2",
        ("lonely_leaky",): "LeakyReLU follows LeakyReLU 'fold_leaky', not a BatchNormalization",
        ("renorm_conv", "renorm_bn"): "renorm=True",
        ("axis_conv", "axis_bn"): "axis=1 is not the channel (last) axis",
        ("out_conv", "out_bn"): "the BatchNormalization output is a model output",
        ("dense", "dense_bn"): "BatchNormalization follows Dense 'dense', not a Conv2D",
    },
    "zero_padding": {("same_pad", "same_conv"): "the Conv2D pads itself ('same')"},
    "layer_norm": {("ln_axis1",): "axes [1] of a rank-3 input, not only the last axis",
                   ("ln_two_axes",): "axes [1, 2] of a rank-3 input"},
}


def test_near_misses_reported(user_model):
    _, _, report = user_model
    assert report.fused("conv_bn_leaky") == 4  # ok, plain, same (its pad stays), fold (its pad folded)
    assert report.fused("zero_padding") == 1 and report.fused("layer_norm") == 1
    for pattern, expected in EXPECTED_SKIPS.items():
        got = {tuple(s.layers): s.reason for s in report.skipped(pattern)}
        assert set(got) == set(expected), (pattern, got)
        for layers, phrase in expected.items():
            assert phrase in got[layers], (layers, got[layers])


def test_near_misses_left_intact(user_model):
    m, f, report = user_model
    fused_names = {l.name: type(l) for l in f.layers}
    kept = {n for expected in EXPECTED_SKIPS.values() for layers in expected for n in layers} - {"same_conv"}
    for name in kept:  # same_conv is fused; only its ZeroPadding2D stays
        assert fused_names.get(name) is type(m.get_layer(name)), name
    for gone in ("ok_conv", "ok_bn", "ok_leaky", "plain_bn", "fold_pad", "fold_conv", "same_conv"):
        assert gone not in fused_names
    assert fused_names["ln_plain"] is FusedLayerNormalization
    ok = f.get_layer("ok_conv_bn_leaky")
    assert ok.replaces == ["ok_conv", "ok_bn", "ok_leaky"] and ok.use_bias
    assert ok.op_attrs["epsilon"] == pytest.approx(1e-2) and ok.op_attrs["alpha"] == pytest.approx(0.2)
    fold = f.get_layer("fold_conv_bn_leaky")
    assert fold.replaces[0] == "fold_pad"
    assert fold.op_attrs["padding"] == "EXPLICIT" and fold.op_attrs["explicit_paddings"] == (0, 0, 1, 2, 0, 1, 0, 0)
    assert not f.get_layer("plain_conv_bn_leaky").center and not f.get_layer("plain_conv_bn_leaky").scale
    assert f.get_layer("ln_plain").epsilon == pytest.approx(1e-4)


def test_user_model_outputs_unchanged(user_model, rng):
    m, f, _ = user_model
    x = rng.uniform(0, 1, size=(2, 12, 12, 3)).astype(np.float32)
    for got, ref in zip(_outputs(f, x), _outputs(m, x)):
        assert_model_close("YoloConvBnLeaky", got, ref, "user model")


def test_training_true_reaches_later_batchnorms():
    """Keras 3 hands an explicit training=True on to the layers called after it,
    so a later BatchNormalization uses batch statistics: it must stay unfused."""
    x = inp = keras.Input((6, 6, 3))
    x = _cbl(x, "before")
    x = _cbl(x, "train", bn_call=dict(training=True))
    x = _cbl(x, "after")
    m = keras.Model(inp, x)
    _randomize(m, 2)
    f, report = fuse(m)
    assert [b.layer for b in report.blocks] == ["before_conv_bn_leaky"]
    reasons = {tuple(s.layers): s.reason for s in report.skipped("conv_bn_leaky")}
    assert "runs after 'train_bn', which is called with training=True" in reasons[("after_conv", "after_bn")]
    x = np.random.default_rng(1).uniform(size=(3, 6, 6, 3)).astype(np.float32)
    assert_model_close("YoloConvBnLeaky", _outputs(f, x)[0], _outputs(m, x)[0], "training=True model")


def test_channels_first_and_sequential_and_subclassed():
    cf = keras.Sequential([keras.Input((3, 8, 8)), keras.layers.Conv2D(4, 3, data_format="channels_first"),
                           keras.layers.BatchNormalization(axis=1), keras.layers.LeakyReLU(0.1)])
    _, report = fuse(cf)
    assert report.fused("conv_bn_leaky") == 0
    assert "channels_first" in report.skipped("conv_bn_leaky")[0].reason

    seq = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Conv2D(4, 3, padding="same", use_bias=False),
                            keras.layers.BatchNormalization(), keras.layers.LeakyReLU(0.1)], name="seq")
    _randomize(seq, 1)
    f, report = fuse(seq)
    assert report.fused("conv_bn_leaky") == 1
    x = np.random.default_rng(0).uniform(size=(1, 8, 8, 3)).astype(np.float32)
    assert_model_close("YoloConvBnLeaky", _outputs(f, x)[0], _outputs(seq, x)[0], "sequential")

    class Sub(keras.Model):
        def __init__(self):
            super().__init__(name="sub")
            self.norm = keras.layers.LayerNormalization()

        def call(self, x):
            return self.norm(x)
    sub = Sub()
    same, report = fuse(sub)
    assert same is sub and "subclassed Keras model" in report.notes[0] and report.total_fused == 0


def test_nested_functional_model():
    """A functional model used as a layer (a backbone) is fused inside too."""
    inp = keras.Input((8, 8, 3))
    backbone = keras.Model(inp, _cbl(inp, "bb", conv=dict(kernel_size=3, padding="same")), name="backbone")
    x = inp2 = keras.Input((8, 8, 3))
    x = keras.layers.LayerNormalization(name="head_norm")(backbone(x))
    outer = keras.Model(inp2, x, name="outer")
    _randomize(outer, 3)
    f, report = fuse(outer)
    assert report.block_map() == {
        "backbone/bb_conv_bn_leaky": ["backbone/bb_conv", "backbone/bb_bn", "backbone/bb_leaky"],
        "head_norm": ["head_norm"]}
    assert isinstance(f.get_layer("backbone").get_layer("bb_conv_bn_leaky"), FusedConvBnLeaky)
    x = np.random.default_rng(4).uniform(size=(2, 8, 8, 3)).astype(np.float32)
    assert_model_close("YoloConvBnLeaky", _outputs(f, x)[0], _outputs(outer, x)[0], "nested")


def test_report_printable_and_json(user_model):
    _, _, report = user_model
    text = str(report)
    assert "pattern" in text and "conv_bn_leaky" in text and "skipped (near misses):" in text
    assert "relu_conv + relu_bn" in text
    data = json.loads(report.to_json())
    assert data["patterns"]["conv_bn_leaky"]["fused"] == 4
    assert data["patterns"]["conv_bn_leaky"]["op"] == CONV.name
    assert len(data["patterns"]["layer_norm"]["skipped"]) == 2
    assert {"pattern": "layer_norm", "layer": "ln_plain", "replaces": ["ln_plain"]} in data["blocks"]


# -- serialization -------------------------------------------------------------------

def test_keras_round_trip(tmp_path):
    m = models.build("yolov3-tiny", 64, width=0.25, decode=True)
    f, _ = fuse(m)
    path = tmp_path / "tiny_fused.keras"
    f.save(path)
    back = models.load(path)
    assert sum(isinstance(l, FusedConvBnLeaky) for l in back.layers) == 11
    assert sum(isinstance(l, FusedYoloDecode) for l in back.layers) == 2
    assert back.get_layer("conv_2_bn_leaky").replaces == ["conv_2", "bn_2", "leaky_2"]
    x = models.sample_inputs(m, batch=2)
    for got, ref in zip(_outputs(back, x), _outputs(f, x)):
        np.testing.assert_array_equal(got, ref)


def test_bert_keras_round_trip_and_savedmodel(tmp_path):
    m = models.build("bert", 8, vocab_size=300)
    f, _ = fuse(m)
    x = models.sample_inputs(m, batch=2)
    ref = _outputs(f, x)[0]
    f.save(tmp_path / "bert_fused.keras")
    np.testing.assert_array_equal(_outputs(models.load(tmp_path / "bert_fused.keras"), x)[0], ref)

    traced = tf.function(lambda ids, mask: f([ids, mask]))
    graph = traced.get_concrete_function(tf.TensorSpec([None, 8], tf.int32), tf.TensorSpec([None, 8], tf.int32))
    op_types = {o.type for o in graph.graph.get_operations()}
    assert NORM.name in op_types and not any("LayerNorm" in t and t != NORM.name for t in op_types)
    np.testing.assert_allclose(traced(x["token_ids"], x["attention_mask"]).numpy(), ref, atol=1e-6, rtol=1e-6)

    f.export(str(tmp_path / "sm"), verbose=False)
    sm = models.load(tmp_path / "sm")
    np.testing.assert_allclose(np.asarray(sm([x["token_ids"], x["attention_mask"]])), ref, atol=1e-6, rtol=1e-6)
    same, report = fuse(sm)
    assert same is sm and report.total_fused == 0
    assert "this rewriter passes it through unfused; bridge.converters.graph_fuse.fuse_graph" in report.notes[0]


def test_fused_layers_reject_bad_attributes():
    with pytest.raises(ValueError, match=r"YoloConvBnLeaky: argument 'padding': 'FOO' is not one of"):
        FusedConvBnLeaky(4, (3, 3), padding="FOO")
    with pytest.raises(ValueError, match=r"YoloDecode: argument 'anchors': needs 2\*A values"):
        FusedYoloDecode(anchors=[1, 2, 3], num_classes=2, stride=8)
    with pytest.raises(ValueError, match=r"YoloDecode: argument 'stride': must be >= 1, got 0"):
        FusedYoloDecode(anchors=[1, 2], num_classes=2, stride=0)
    layer = FusedConvBnLeaky(4, (3, 3))
    with pytest.raises(ValueError, match=r"YoloConvBnLeaky: argument 'x': must have rank 4"):
        layer(keras.Input((8, 3)))


def test_a_precision_the_ops_do_not_take_is_a_near_miss_naming_it():
    """A float64 model: each pattern's layers stay as they are, the reason names
    the layer, its dtype and the op's dtypes (read from the spec), and the model
    still computes what it did."""
    from bridge import ops
    inp = keras.Input((6, 6, 3), dtype="float64")
    x = keras.layers.Conv2D(4, 3, padding="same", name="c", dtype="float64")(inp)
    x = keras.layers.LeakyReLU(0.1, name="l", dtype="float64")(keras.layers.BatchNormalization(name="b", dtype="float64")(x))
    y = keras.layers.LayerNormalization(name="ln", dtype="float64")(x)
    m = keras.Model(inp, y)
    _randomize(m, 3)
    f, report = fuse(m)
    assert report.fused("conv_bn_leaky") == 0 and report.fused("layer_norm") == 0
    (cbl,), (ln,) = report.skipped("conv_bn_leaky"), report.skipped("layer_norm")
    conv, norm = ops.get("YoloConvBnLeaky"), ops.get("FusedLayerNorm")
    assert cbl.reason == f"Conv2D 'c' computes in float64; YoloConvBnLeaky takes {list(conv.dtypes)}", cbl.reason
    assert ln.reason == f"LayerNormalization 'ln' computes in float64; FusedLayerNorm takes {list(norm.dtypes)}"
    x = np.random.default_rng(1).uniform(size=(2, 6, 6, 3))
    np.testing.assert_array_equal(np.asarray(f(x)), np.asarray(m(x)))


# -- Activation("leaky_relu") ----------------------------------------------------------

def _cb_activation(x, name, activation, strides=1):
    x = keras.layers.Conv2D(5, 3, strides=strides, padding="same", name=f"{name}_conv")(x)
    return keras.layers.Activation(activation, name=f"{name}_act")(keras.layers.BatchNormalization(name=f"{name}_bn")(x))


def test_activation_leaky_relu_fuses_at_its_own_slope():
    """Conv2D -> BatchNormalization -> Activation('leaky_relu') fuses with the
    slope keras.activations.leaky_relu runs with (0.2), not LeakyReLU's 0.3;
    the fused model computes what the unfused one does on odd sizes and batch 1
    (not on an empty batch: the unfused Keras conv itself fails there); Activation('relu') after the BN, and an Activation('leaky_relu')
    after no BN, are near misses that say what they are."""
    import functools
    inp = keras.Input((None, None, 3))
    x = _cb_activation(inp, "a", "leaky_relu", strides=2)
    x = _cb_activation(x, "b", functools.partial(keras.activations.leaky_relu, negative_slope=0.05))
    x = _cb_activation(x, "r", "relu")
    x = keras.layers.Activation("leaky_relu", name="lonely")(keras.layers.Dense(4, name="d")(x))
    m = keras.Model(inp, x)
    _randomize(m, 5)
    f, report = fuse(m)
    assert report.fused("conv_bn_leaky") == 2
    assert f.get_layer("a_conv_bn_leaky").op_attrs["alpha"] == pytest.approx(0.2)
    assert f.get_layer("a_conv_bn_leaky").replaces == ["a_conv", "a_bn", "a_act"]
    assert f.get_layer("b_conv_bn_leaky").op_attrs["alpha"] == pytest.approx(0.05)
    reasons = {tuple(s.layers): s.reason for s in report.skipped("conv_bn_leaky")}
    assert reasons == {("r_conv", "r_bn"): "BatchNormalization is followed by Activation 'r_act' (relu), not a LeakyReLU",
                       ("lonely",): "Activation('leaky_relu') follows Dense 'd', not a BatchNormalization"}, reasons
    rng = np.random.default_rng(7)
    for shape in [(2, 9, 7, 3), (1, 1, 1, 3), (3, 4, 6, 3)]:
        x = rng.uniform(-1, 1, size=shape).astype(np.float32)
        ref = _outputs(m, x)[0]
        assert (ref < 0).any()  # the negative side, where the slope shows, is reached
        assert_model_close("YoloConvBnLeaky", _outputs(f, x)[0], ref, f"Activation('leaky_relu') {shape}")
