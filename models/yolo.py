"""YOLOv3 and YOLOv3-tiny, written as the common Keras ports write them.

Only standard Keras 3 layers, plus the decode layer a user writes
(`YoloDecodeHead`: sigmoid/exp/grid arithmetic in plain TF ops, with its anchors,
class count and stride in its config). This is the unfused original that
`bridge.converters.fuse` rewrites.

- yolov3: Darknet-53 (52 Conv-BN-LeakyReLU blocks, stride-2 convs as
  ZeroPadding2D(((1,0),(1,0))) + VALID conv), a three-scale FPN neck (18 blocks in
  the heads, 2 before the upsamplings): 72 blocks, then 3 plain 1x1 output convs
  with bias. 62.0 M parameters at width 1.
- yolov3-tiny: 11 Conv-BN-LeakyReLU blocks (13 convolutions in darknet's
  yolov3-tiny.cfg, of which the two output convs are plain), six MaxPooling2D
  including the stride-1 one at 13x13, two heads (strides 32 and 16).

`width` multiplies every block's channel count (the heads keep A*(5+C) channels),
so a thin model has exactly the full model's architecture.
"""
from __future__ import annotations

import numpy as np

import keras
import tensorflow as tf

from . import weights as _w

DEFAULT_SIZE = 416
# stride -> anchor (w, h) triples, in input pixels (docs/ops.md)
YOLOV3_ANCHORS = {
    32: ((116, 90), (156, 198), (373, 326)),
    16: ((30, 61), (62, 45), (59, 119)),
    8: ((10, 13), (16, 30), (33, 23)),
}
# darknet's yolov3-tiny.cfg masks: 3,4,5 at stride 32 and 1,2,3 at stride 16
YOLOV3_TINY_ANCHORS = {
    32: ((81, 82), (135, 169), (344, 319)),
    16: ((23, 27), (37, 58), (81, 82)),
}
YOLOV3_BLOCKS = 72
YOLOV3_TINY_BLOCKS = 11
_CALIBRATION_SIZE = 128  # BatchNorm statistics are taken at this size, whatever input_size is


@keras.saving.register_keras_serializable(package="bridge")
class YoloDecodeHead(keras.layers.Layer):
    """The decode step a user writes for one YOLOv3 head: raw [N,H,W,A*(5+C)] ->
    boxes [N,H*W*A,4] (x_center, y_center, w, h in input pixels), objectness
    [N,H*W*A], class_probs [N,H*W*A,C]; row (h*W + w)*A + a."""

    def __init__(self, anchors, num_classes, stride, scale_x_y=1.0, **kwargs):
        super().__init__(**kwargs)
        self.anchors = [float(v) for v in np.ravel(anchors)]
        self.num_classes = int(num_classes)
        self.stride = int(stride)
        self.scale_x_y = float(scale_x_y)
        if len(self.anchors) < 2 or len(self.anchors) % 2:
            raise ValueError(f"YoloDecodeHead: argument 'anchors': needs [w0,h0,w1,h1,...], got {self.anchors}")

    @property
    def num_anchors(self):
        return len(self.anchors) // 2

    def call(self, raw):
        a, c = self.num_anchors, self.num_classes
        shape = tf.shape(raw)
        n, h, w = shape[0], shape[1], shape[2]
        p = tf.reshape(raw, tf.stack([n, h, w, a, 5 + c]))
        txy, twh, obj, cls = tf.split(p, [2, 2, 1, c], axis=-1)
        gx, gy = tf.meshgrid(tf.range(w), tf.range(h))  # [h, w] each
        grid = tf.cast(tf.stack([gx, gy], axis=-1), raw.dtype)[tf.newaxis, :, :, tf.newaxis, :]
        s = self.scale_x_y
        xy = (s * tf.sigmoid(txy) - (s - 1.0) / 2.0 + grid) * float(self.stride)
        wh = tf.exp(twh) * tf.constant(np.reshape(self.anchors, (a, 2)), raw.dtype)
        rows = h * w * a
        boxes = tf.reshape(tf.concat([xy, wh], axis=-1), tf.stack([n, rows, 4]))
        objectness = tf.reshape(tf.sigmoid(obj), tf.stack([n, rows]))
        class_probs = tf.reshape(tf.sigmoid(cls), tf.stack([n, rows, c]))
        return boxes, objectness, class_probs

    def compute_output_shape(self, raw_shape):
        n, h, w, _ = raw_shape
        rows = None if h is None or w is None else h * w * self.num_anchors
        return (n, rows, 4), (n, rows), (n, rows, self.num_classes)

    def get_config(self):
        return {**super().get_config(), "anchors": list(self.anchors), "num_classes": self.num_classes,
                "stride": self.stride, "scale_x_y": self.scale_x_y}


class _Net:
    """Names every layer by its role and index, so names do not depend on how many
    models this process built before (Keras' automatic names do)."""

    def __init__(self, width):
        if not width > 0:
            raise ValueError(f"yolo: argument 'width': must be > 0, got {width}")
        self.width = float(width)
        self.blocks = 0
        self.counts = {}

    def name(self, kind):
        self.counts[kind] = self.counts.get(kind, 0) + 1
        return f"{kind}_{self.counts[kind]}"

    def ch(self, channels):
        return max(1, int(round(channels * self.width)))

    def cbl(self, x, channels, k, strides=1):
        """Conv2D(use_bias=False) + BatchNormalization + LeakyReLU(0.1), stride 2 as
        ZeroPadding2D(((1,0),(1,0))) + VALID conv."""
        self.blocks += 1
        i = self.blocks
        padding = "same"
        if strides == 2:
            x = keras.layers.ZeroPadding2D(((1, 0), (1, 0)), name=f"pad_{i}")(x)
            padding = "valid"
        x = keras.layers.Conv2D(self.ch(channels), k, strides=strides, padding=padding, use_bias=False,
                                kernel_initializer="zeros", name=f"conv_{i}")(x)
        x = keras.layers.BatchNormalization(name=f"bn_{i}")(x)
        return keras.layers.LeakyReLU(negative_slope=0.1, name=f"leaky_{i}")(x)

    def residual_stage(self, x, channels, repeats):
        x = self.cbl(x, channels, 3, strides=2)
        for _ in range(repeats):
            y = self.cbl(x, channels // 2, 1)
            y = self.cbl(y, channels, 3)
            x = keras.layers.Add(name=self.name("add"))([x, y])
        return x

    def head_convs(self, x, channels):
        """The five alternating 1x1/3x3 blocks of each YOLOv3 head."""
        for k in (1, 3, 1, 3, 1):
            x = self.cbl(x, channels if k == 1 else 2 * channels, k)
        return x

    def output(self, x, stride, outputs):
        return keras.layers.Conv2D(outputs, 1, padding="same", use_bias=True, kernel_initializer="zeros",
                                   name=f"head_s{stride}")(x)

    def upsample_concat(self, x, skip, channels):
        x = self.cbl(x, channels, 1)
        x = keras.layers.UpSampling2D(2, name=self.name("upsample"))(x)
        return keras.layers.Concatenate(name=self.name("concat"))([x, skip])


def _check_size(model, input_size):
    size = DEFAULT_SIZE if input_size is None else input_size
    if isinstance(size, (tuple, list)):
        if len(size) != 2:
            raise ValueError(f"{model}: argument 'input_size': expected an int or (height, width), got {size!r}")
        h, w = size
    else:
        h = w = size
    for v in (h, w):
        if not isinstance(v, (int, np.integer)) or v < 32 or v % 32:
            raise ValueError(f"{model}: argument 'input_size': must be a multiple of 32 (>= 32), got {size!r}")
    return int(h), int(w)


def _decode_outputs(heads, anchors, num_classes):
    """Each head through YoloDecodeHead, then boxes/objectness/class_probs
    concatenated across heads (largest stride first)."""
    decoded = [YoloDecodeHead(np.ravel(anchors[s]).tolist(), num_classes, s, name=f"decode_s{s}")(h)
               for s, h in heads]
    names = ("boxes", "objectness", "class_probs")
    return [keras.layers.Concatenate(axis=1, name=n)([d[i] for d in decoded]) for i, n in enumerate(names)]


def yolov3(input_size=None, seed=0, width=1.0, num_classes=80, decode=False, name="yolov3"):
    h, w = _check_size(name, input_size)
    net = _Net(width)
    outputs = len(YOLOV3_ANCHORS[32]) * (5 + num_classes)
    image = keras.Input((h, w, 3), name="image")
    x = net.cbl(image, 32, 3)
    x = net.residual_stage(x, 64, 1)
    x = net.residual_stage(x, 128, 2)
    route8 = x = net.residual_stage(x, 256, 8)
    route16 = x = net.residual_stage(x, 512, 8)
    x = net.residual_stage(x, 1024, 4)

    x = net.head_convs(x, 512)
    y32 = net.output(net.cbl(x, 1024, 3), 32, outputs)
    x = net.upsample_concat(x, route16, 256)
    x = net.head_convs(x, 256)
    y16 = net.output(net.cbl(x, 512, 3), 16, outputs)
    x = net.upsample_concat(x, route8, 128)
    x = net.head_convs(x, 128)
    y8 = net.output(net.cbl(x, 256, 3), 8, outputs)
    assert net.blocks == YOLOV3_BLOCKS, net.blocks

    heads = [(32, y32), (16, y16), (8, y8)]
    out = _decode_outputs(heads, YOLOV3_ANCHORS, num_classes) if decode else [y for _, y in heads]
    model = keras.Model(image, out, name=name)
    _randomize(model, seed)
    return model


def yolov3_tiny(input_size=None, seed=0, width=1.0, num_classes=80, decode=False, name="yolov3_tiny"):
    h, w = _check_size(name, input_size)
    net = _Net(width)
    outputs = len(YOLOV3_TINY_ANCHORS[32]) * (5 + num_classes)
    image = keras.Input((h, w, 3), name="image")
    x = image
    for i, channels in enumerate((16, 32, 64, 128, 256)):
        if i:
            x = keras.layers.MaxPooling2D(2, strides=2, padding="same", name=net.name("maxpool"))(x)
        x = net.cbl(x, channels, 3)
    route16 = x
    x = keras.layers.MaxPooling2D(2, strides=2, padding="same", name=net.name("maxpool"))(x)
    x = net.cbl(x, 512, 3)
    x = keras.layers.MaxPooling2D(2, strides=1, padding="same", name=net.name("maxpool"))(x)
    x = net.cbl(x, 1024, 3)
    x = net.cbl(x, 256, 1)
    y32 = net.output(net.cbl(x, 512, 3), 32, outputs)
    x = net.upsample_concat(x, route16, 128)
    y16 = net.output(net.cbl(x, 256, 3), 16, outputs)
    assert net.blocks == YOLOV3_TINY_BLOCKS, net.blocks

    heads = [(32, y32), (16, y16)]
    out = _decode_outputs(heads, YOLOV3_TINY_ANCHORS, num_classes) if decode else [y for _, y in heads]
    model = keras.Model(image, out, name=name)
    _randomize(model, seed)
    return model


def sample_images(batch=1, size=(DEFAULT_SIZE, DEFAULT_SIZE), seed=0):
    """Images in [0, 1] with some spatial structure (coarse blobs plus noise), not
    a constant or pure white noise."""
    rng = np.random.default_rng(seed)
    h, w = size
    coarse = rng.uniform(0, 1, size=(batch, -(-h // 8), -(-w // 8), 3))
    img = np.repeat(np.repeat(coarse, 8, axis=1), 8, axis=2)[:, :h, :w]
    img = 0.8 * img + 0.2 * rng.uniform(0, 1, size=(batch, h, w, 3))
    return np.clip(img, 0, 1).astype(np.float32)


def _randomize(model, seed):
    rng = np.random.default_rng(seed)
    for layer in model.layers:
        if isinstance(layer, keras.layers.Conv2D):
            kernel = layer.kernel
            fan_in = int(np.prod(kernel.shape[:3]))
            if layer.use_bias:  # an output conv: linear, logits of order 1
                kernel.assign(_w.he_normal(rng, kernel.shape, fan_in, gain=0.1))
                layer.bias.assign((rng.standard_normal(layer.bias.shape) * 0.5).astype(np.float32))
            else:
                kernel.assign(_w.he_normal(rng, kernel.shape, fan_in))
        elif isinstance(layer, keras.layers.BatchNormalization):
            gamma, beta = _w.norm_scale_shift(rng, layer.gamma.shape[0])
            layer.gamma.assign(gamma)
            layer.beta.assign(beta)
    size = _CALIBRATION_SIZE
    _w.calibrate_batchnorm(model, sample_images(2, (size, size), seed=seed + 1), rng)
