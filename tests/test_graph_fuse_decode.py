"""YoloDecode found at graph level (issue 24): the built-in YOLOv3-tiny's unfused
decode as `model.export` saves it, and a hand-written tf.Module decode, rewritten
onto YoloDecode; decodes that are near it but compute something else (anchors on
the swapped wh logits, a grid offset of 0.5, softplus for exp, y at another
stride, a stride of a fixed image size over an open grid) stay as they are, each
a near-miss row. Numbers are judged against numpy
float64: the op's reference (bridge/ops/yolo_decode/reference.py) on the raw head outputs,
and for the near misses the planted formula written again in numpy."""
from __future__ import annotations

import os

import numpy as np
import pytest

from bridge.converters.graph_fuse import fuse_graph
from conftest import tf_conv_breaks_on_empty_batches
from bridge.ops import yolo_decode as _decode

TINY = dict(input_size=96, width=0.25)
IMAGE = (160, 224)           # (h, w) the hand-written module's grids are scaled to: stride 32
CHANNELS = 8


def _close(got, want, tol=2e-4):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert np.isfinite(got).all() and np.isfinite(want).all()
    if got.size:
        err = np.abs(got - want) / np.maximum(1.0, np.abs(want))
        assert float(err.max()) <= tol, float(err.max())


# -- the built-in yolov3-tiny, unfused, saved with model.export -------------------------
@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from bridge import models
    model = models.build("yolov3-tiny", decode=True, **TINY)
    folder = tmp_path_factory.mktemp("tiny") / "saved"
    model.export(str(folder), verbose=False)
    fused, report = fuse_graph(str(folder))
    return model, folder, fused, report


def _batches(*sizes):
    """The batch sizes a graph is run at in TensorFlow: not the empty one where
    TensorFlow's own fused Conv2D mishandles it (conftest.tf_conv_breaks_on_empty_batches:
    the graphs' plain convolutions are TensorFlow's)."""
    return [b for b in sizes if b or not tf_conv_breaks_on_empty_batches()]


def _tiny_reference(model, x):
    """boxes, objectness, class_probs in float64: the model's raw heads (Keras)
    through the op's numpy reference, concatenated as the model does."""
    import keras
    from bridge.models.yolo import YOLOV3_TINY_ANCHORS
    heads = keras.Model(model.input, [model.get_layer(f"head_s{s}").output for s in (32, 16)])
    if len(x) == 0 and tf_conv_breaks_on_empty_batches():  # TensorFlow's bug: the heads' shapes, emptied
        raws = [np.asarray(r)[:0] for r in heads(np.ones((1, *x.shape[1:]), x.dtype), training=False)]
    else:
        raws = heads(x, training=False)
    parts = [_decode.SPEC.reference(np.asarray(r, np.float64), anchors=np.ravel(YOLOV3_TINY_ANCHORS[s]).tolist(),
                                    num_classes=80, stride=s, scale_x_y=1.0) for s, r in zip((32, 16), raws)]
    return [np.concatenate([p[k] for p in parts], axis=1) for k in range(3)]


def test_builtin_tiny_savedmodel_fuses_what_its_keras_road_fuses(tiny):
    """Every pattern's count on the SavedModel equals the .keras road's (11 conv
    blocks, 2 decodes); no decode op is left in the graph; the fused and the unfused
    SavedModel both equal the float64 decode of the model's raw heads (batch 1, 2
    and the empty batch 0)."""
    from bridge.converters import fuse
    from bridge.converters.graph_model import load
    model, folder, fused, report = tiny
    _, keras_report = fuse(model)
    keys = set(report.to_dict()["patterns"]) | set(keras_report.to_dict()["patterns"])
    assert {k: report.fused(k) for k in keys} == {k: keras_report.fused(k) for k in keys}, report.render()
    assert report.fused("yolo_decode") == 2 and report.fused("conv_bn_leaky") == 11
    assert not report.skipped("yolo_decode"), report.render()
    counts = fused.op_counts()
    assert counts.get("YoloDecode") == 2
    assert not {"Sigmoid", "Exp", "SplitV", "Range"} & set(counts), counts
    unfused = load(str(folder))
    for batch in _batches(1, 2, 0):
        x = np.random.default_rng(batch).random((batch, 96, 96, 3)).astype("float32")
        want = _tiny_reference(model, x)
        for graph in (unfused, fused):
            got = graph.function()(x)
            outs = [got[k].numpy() for k in sorted(got)]
            assert [o.shape for o in outs] == [w.shape for w in want]
            for o, w in zip(outs, want):
                _close(o, w)


def test_bridge_export_of_the_tiny_savedmodel_writes_yolo_decode_nodes(tiny, tmp_path):
    """`bridge export` (ONNX) of the SavedModel carries two com.bridge YoloDecode
    nodes, and onnxruntime's run equals the float64 decode of the raw heads."""
    import onnx
    import onnxruntime as ort
    from bridge import modelsource
    from bridge.converters import export_onnx
    model, folder, _, _ = tiny
    out = tmp_path / "tiny.onnx"
    result = export_onnx.export(modelsource.resolve(str(folder)), str(out))
    assert result.details["custom_nodes"].get("com.bridge::YoloDecode") == 2, result.details["custom_nodes"]
    assert all(c.passed for c in result.checks)
    nodes = [n for n in onnx.load(str(out)).graph.node if n.domain == "com.bridge" and n.op_type == "YoloDecode"]
    attrs = sorted(tuple(a.i for a in n.attribute if a.name == "stride") for n in nodes)
    assert attrs == [(16,), (32,)]
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(7).random((1, 96, 96, 3)).astype("float32")
    got = dict(zip([o.name for o in session.get_outputs()], session.run(None, {session.get_inputs()[0].name: x})))
    assert sorted(got) == ["output_0", "output_1", "output_2"], sorted(got)   # model.export's names, in its order
    for name, w in zip(sorted(got), _tiny_reference(model, x)):
        _close(got[name], w)


# -- a hand-written tf.Module decode, with planted near misses ---------------------------
# name -> (input, anchors, classes, planted change): the first three are YoloDecodes
HEADS = {
    "plain": ("features", (10.0, 14.0, 23.0, 27.0, 37.0, 58.0), 3, {}),
    "scaled": ("features", (81.0, 82.0, 135.0, 169.0), 1, dict(scale=1.05)),
    "one_cell": ("pooled", (50.0, 70.0), 2, dict(image=(224, 224))),
    "swapped_anchor_pair": ("features", (10.0, 14.0, 23.0, 27.0), 2, dict(swap=True)),
    "grid_offset": ("features", (10.0, 14.0, 23.0, 27.0), 2, dict(offset=0.5)),
    "softplus": ("features", (10.0, 14.0, 23.0, 27.0), 2, dict(wh="softplus")),
    "wrong_stride": ("features", (10.0, 14.0, 23.0, 27.0), 2, dict(y_stride=16.0)),
    # a grid of any size, from tf.shape: at stride 32 a YoloDecode, at 96 / W (a fixed image size over
    # the grid: the stride the graph computes changes with the grid, the op's cannot) a near miss
    "any_grid": ("any", (12.0, 16.0, 19.0, 36.0), 2, dict(dynamic=32)),
    "fixed_image": ("any", (12.0, 16.0, 19.0, 36.0), 2, dict(dynamic=96, per_cell=True)),
}
FUSING = ("plain", "scaled", "one_cell", "any_grid")
GRIDS = {"features": (5, 7), "pooled": (1, 1), "any": (None, None)}
FED = {"features": (5, 7), "pooled": (1, 1), "any": (4, 6)}   # the open grid fed at 4x6 (checked at 3x3 and 3x4)


def _head_weights(seed=0):
    rng = np.random.default_rng(seed)
    out = {}
    for name, (_, anchors, c, _) in HEADS.items():
        ch = len(anchors) // 2 * (5 + c)
        out[name] = ((rng.standard_normal((1, 1, CHANNELS, ch)) * 0.3).astype("float32"),
                     (rng.standard_normal(ch) * 0.5).astype("float32"))
    return out


def _tf_decode_any(raw, anchors, c, dynamic, per_cell=False):
    """A decode of any grid (tf.shape, tf.meshgrid), centres * `dynamic`, or * `dynamic` / W."""
    import tensorflow as tf
    a = len(anchors) // 2
    shape = tf.shape(raw)
    n, h, w = shape[0], shape[1], shape[2]
    p = tf.reshape(raw, tf.stack([n, h, w, a, 5 + c]))
    gy, gx = tf.meshgrid(tf.range(h), tf.range(w), indexing="ij")
    grid = tf.cast(tf.stack([gx, gy], axis=-1), raw.dtype)[:, :, tf.newaxis, :]
    stride = dynamic / tf.cast(w, raw.dtype) if per_cell else float(dynamic)
    xy = (tf.sigmoid(p[..., :2]) + grid) * stride
    wh = tf.exp(p[..., 2:4]) * tf.constant(np.reshape(anchors, (a, 2)), raw.dtype)
    rows = h * w * a
    return (tf.reshape(tf.concat([xy, wh], axis=-1), tf.stack([n, rows, 4])),
            tf.reshape(tf.sigmoid(p[..., 4]), tf.stack([n, rows])),
            tf.reshape(tf.sigmoid(p[..., 5:]), tf.stack([n, rows, c])))


def _tf_decode(raw, anchors, c, scale=1.0, offset=0.0, wh="exp", swap=False, y_stride=None, image=IMAGE,
               dynamic=None, per_cell=False):
    """A decode as a team writes it: static reshape, grids from tf.range, centres
    normalised by the grid and scaled to the image size."""
    import tensorflow as tf
    if dynamic:
        return _tf_decode_any(raw, anchors, c, dynamic, per_cell)
    a = len(anchors) // 2
    h, w = raw.shape[1], raw.shape[2]
    p = tf.reshape(raw, [-1, h, w, a, 5 + c])
    gx = tf.reshape(tf.range(w, dtype=tf.float32), [1, 1, w, 1])
    gy = tf.reshape(tf.range(h, dtype=tf.float32), [1, h, 1, 1])
    x = (scale * tf.sigmoid(p[..., 0]) - (scale - 1.0) / 2 + gx + offset) / w * image[1]
    y = scale * tf.sigmoid(p[..., 1]) - (scale - 1.0) / 2 + gy + offset
    y = y * y_stride if y_stride else y / h * image[0]
    twh = p[..., 3:1:-1] if swap else p[..., 2:4]
    grow = tf.exp if wh == "exp" else tf.math.softplus
    size = grow(twh) * tf.constant(np.reshape(anchors, (a, 2)), tf.float32)
    rows = h * w * a
    boxes = tf.reshape(tf.concat([tf.stack([x, y], axis=-1), size], axis=-1), [-1, rows, 4])
    return boxes, tf.reshape(tf.sigmoid(p[..., 4]), [-1, rows]), tf.reshape(tf.sigmoid(p[..., 5:]), [-1, rows, c])


def _np_decode(raw, anchors, c, scale=1.0, offset=0.0, wh="exp", swap=False, y_stride=None, image=IMAGE,
               dynamic=None, per_cell=False):
    """_tf_decode in numpy float64 (the near misses' reference)."""
    n, h, w, _ = raw.shape
    if dynamic:   # centres * stride on both axes: the image is (stride * h, stride * w)
        stride = dynamic / w if per_cell else dynamic
        image = (stride * h, stride * w)
    a = len(anchors) // 2
    p = raw.reshape(n, h, w, a, 5 + c)
    sig = lambda v: 1.0 / (1.0 + np.exp(-v))  # noqa: E731
    gx, gy = np.arange(w).reshape(1, 1, w, 1), np.arange(h).reshape(1, h, 1, 1)
    x = (scale * sig(p[..., 0]) - (scale - 1.0) / 2 + gx + offset) / w * image[1]
    y = scale * sig(p[..., 1]) - (scale - 1.0) / 2 + gy + offset
    y = y * y_stride if y_stride else y / h * image[0]
    twh = p[..., 3:1:-1] if swap else p[..., 2:4]
    size = (np.exp(twh) if wh == "exp" else np.logaddexp(0.0, twh)) * np.reshape(anchors, (a, 2))
    rows = h * w * a
    boxes = np.concatenate([np.stack([x, y], axis=-1), size], axis=-1).reshape(n, rows, 4)
    return boxes, sig(p[..., 4]).reshape(n, rows), sig(p[..., 5:]).reshape(n, rows, c)


def _decode_module():
    import tensorflow as tf
    weights = {k: (tf.Variable(w), tf.Variable(b)) for k, (w, b) in _head_weights().items()}

    class Decoders(tf.Module):
        def __init__(self):
            super().__init__(name="decoders")
            self.heads = weights

        @tf.function(input_signature=[tf.TensorSpec([None, *GRIDS[k], CHANNELS], tf.float32, name=k) for k in GRIDS])
        def __call__(self, features, pooled, any):
            inputs = {"features": features, "pooled": pooled, "any": any}
            out = {}
            for name, (src, anchors, c, planted) in HEADS.items():
                w, b = self.heads[name]
                with tf.name_scope(name):
                    raw = tf.nn.bias_add(tf.nn.conv2d(inputs[src], w, 1, "VALID"), b)
                    decoded = _tf_decode(raw, anchors, c, **planted)
                for k, t in zip(("boxes", "objectness", "class_probs"), decoded):
                    out[f"{name}_{k}"] = t
            return out

    return Decoders()


def _module_reference(inputs):
    """{output name: float64} for the module: each head's raw output in numpy, then
    the op's reference for the YoloDecodes (independent of _np_decode) and the
    planted formula for the near misses."""
    out = {}
    for name, (src, anchors, c, planted) in HEADS.items():
        w, b = (v.astype(np.float64) for v in _head_weights()[name])
        raw = np.einsum("nhwc,cd->nhwd", np.asarray(inputs[src], np.float64), w[0, 0]) + b
        if name in FUSING:
            stride = planted.get("dynamic") or planted.get("image", IMAGE)[1] // GRIDS[src][1]
            got = _decode.SPEC.reference(raw, anchors=anchors, num_classes=c, stride=stride,
                                         scale_x_y=planted.get("scale", 1.0))
        else:
            got = _np_decode(raw, anchors, c, **planted)
        out.update({f"{name}_{k}": v for k, v in zip(("boxes", "objectness", "class_probs"), got)})
    return out


@pytest.fixture(scope="module")
def decoders(tmp_path_factory):
    import tensorflow as tf
    folder = tmp_path_factory.mktemp("decoders") / "saved"
    module = _decode_module()
    tf.saved_model.save(module, str(folder))
    fused, report = fuse_graph(str(folder))
    return folder, fused, report, module


def test_a_hand_written_module_decode_fuses_and_its_near_misses_stay(decoders):
    """The three real decodes (a 5x7 grid, scale_x_y 1.05 with one class, a 1x1
    grid; a grid of any size from tf.shape) become YoloDecode with the attributes they compute; the five planted
    near misses are each one near-miss row and keep their TF ops; every output
    equals numpy float64 at batch 1, 3 and 0."""
    from bridge.converters.graph_model import load
    folder, fused, report, _ = decoders
    assert report.fused("yolo_decode") == len(FUSING), report.render()
    misses = report.skipped("yolo_decode")
    assert len(misses) == len(HEADS) - len(FUSING), report.render()
    assert all("computes something else than YoloDecode" in m.reason for m in misses), report.render()
    text = report.render()
    assert "skipped (near misses):" in text
    assert text.count("computes something else than YoloDecode") == len(HEADS) - len(FUSING)
    counts = fused.op_counts()
    assert counts.get("YoloDecode") == len(FUSING)
    assert counts.get("Softplus") == 1 and counts.get("Exp") == 4, counts   # the near misses keep theirs
    found = {}
    for node in fused.graph_def.node:
        if node.op == "YoloDecode":
            a = node.attr
            found[(tuple(round(v, 4) for v in a["anchors"].list.f), a["num_classes"].i)] = \
                (a["stride"].i, round(a["scale_x_y"].f, 6))
    assert found == {((10.0, 14.0, 23.0, 27.0, 37.0, 58.0), 3): (32, 1.0), ((81.0, 82.0, 135.0, 169.0), 1): (32, 1.05),
                     ((50.0, 70.0), 2): (224, 1.0), ((12.0, 16.0, 19.0, 36.0), 2): (32, 1.0)}, found
    unfused = load(str(folder))
    for batch in _batches(1, 3, 0):
        rng = np.random.default_rng(batch)
        inputs = {k: rng.standard_normal((batch, *FED[k], CHANNELS)).astype("float32") for k in GRIDS}
        want = _module_reference(inputs)
        for graph in (unfused, fused):
            got = graph.function()(*[inputs[name] for _, name, _, _ in graph.inputs])
            assert set(got) == set(want)
            for k in want:
                _close(got[k].numpy(), want[k])


def test_a_near_miss_is_one_row_naming_its_nodes(decoders):
    """Each near miss is reported once (not once per output it has), naming nodes
    of its own head, with how far off it is."""
    _, _, report, _ = decoders
    rows = report.to_dict()["patterns"]["yolo_decode"]["skipped"]
    heads = [next((h for h in HEADS if any(h in n for n in r["layers"])), None) for r in rows]
    assert sorted(h for h in heads if h) == sorted(set(HEADS) - set(FUSING)), rows
    assert all("off by" in r["reason"] for r in rows)


def test_the_module_as_a_tf1_frozen_pb_fuses_the_same(decoders, tmp_path):
    """The same decodes in a TF1 frozen GraphDef (convert_variables_to_constants_v2),
    read with its tensor names: the same fused count and near misses, the outputs
    against numpy float64."""
    import graph_models
    _, _, report, module = decoders
    pb = tmp_path / "decoders.pb"
    inputs, outputs = graph_models.frozen_pb(module, pb)
    fused, pb_report = fuse_graph(str(pb), inputs=inputs, outputs=list(outputs.values()))
    assert pb_report.fused("yolo_decode") == report.fused("yolo_decode") == len(FUSING), pb_report.render()
    assert len(pb_report.skipped("yolo_decode")) == len(HEADS) - len(FUSING)
    rng = np.random.default_rng(11)
    feeds = {k: rng.standard_normal((2, *FED[k], CHANNELS)).astype("float32") for k in GRIDS}
    args = [feeds[name] for _, name, _, _ in fused.inputs]
    got = fused.function()(*args)
    want = _module_reference(feeds)
    by_tensor = {t[:-2] if t.endswith(":0") else t: k for k, t in outputs.items()}
    assert len(got) == len(want)
    for name, value in got.items():
        _close(value.numpy(), want[by_tensor[name]])


def test_a_graph_pattern_tolerance_is_checked_when_a_spec_registers():
    """GraphPattern.tolerance (the decode's 1e-5) is a small float or the spec is refused by field."""
    import dataclasses
    from bridge.ops import SpecError, registry
    from bridge.ops.graph_fusion import GraphPattern
    assert _decode.SPEC.graph_fusion[0].tolerance == 1e-5
    for bad in (1.0, 0.0, "1e-5"):
        pattern = GraphPattern("d", "x", ends=("Reshape",), ops=("Reshape",), identify=lambda r: "no", tolerance=bad)
        with pytest.raises(SpecError, match=r"graph_fusion\[0\]\.tolerance.*must be a float in \(0, 0.01\)"):
            registry.check(dataclasses.replace(_decode.SPEC, graph_fusion=(pattern,)), "test")
