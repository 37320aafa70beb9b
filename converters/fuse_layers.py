"""The Keras layers a fused model is made of: each calls one bridge.tf_ops op.

They hold the original, unfolded weights (the Conv2D kernel and bias, the
BatchNorm gamma/beta/moving statistics, the LayerNorm gamma/beta) and pass them to
the op, which folds per call (docs/ops.md). Attributes are the op's own (TF form, from
the op spec), validated at construction. `FusedOp` stands for any other spec'd
op (a pattern a spec declares, bridge.ops.fusion). All are registered as Keras
serializable (package "bridge"): a `.keras` file of a fused model loads after
importing this module (bridge.models.load does), and running it needs the op
library (bridge.tf_ops, imported on the first call).

`replaces` records the names of the original layers a fused layer stands for.
"""
from __future__ import annotations

import keras
import tensorflow as tf

from bridge import ops as _specs

CONV = _specs.get("yolo_conv_bn_leaky")
NORM = _specs.get("fused_layer_norm")
DECODE = _specs.get("yolo_decode")


def _tf_ops():
    from bridge import tf_ops  # loads (or builds) the op library on first use
    return tf_ops


def _shape(shape):
    return None if shape is None else tuple(shape)


def tf_function(spec):
    """`bridge.tf_ops.<module>` of the op, or None while no kernel is loaded for
    it (a team's op: until its library is given)."""
    return getattr(_tf_ops(), spec.module, None)


def no_kernel(spec) -> str:
    return (f"{spec.name}: no TensorFlow kernel is loaded for it: give its library "
            f"(--op-library LIB, or bridge.tf_ops.load_op_library)")


def _infer(spec, shapes, **attrs):
    """spec.infer_shapes, raising a plain ValueError with the OpError's message:
    Keras re-raises errors from a layer call as `type(e)(message)`, which an
    OpError's constructor does not take (it would surface as a RuntimeError)."""
    try:
        return spec.infer_shapes(shapes, **attrs)
    except _specs.OpError as e:
        raise ValueError(str(e)) from e


class _Fused(keras.layers.Layer):
    def __init__(self, replaces=(), **kwargs):
        super().__init__(**kwargs)
        self.replaces = [str(n) for n in replaces]

    def get_config(self):
        return {**super().get_config(), "replaces": list(self.replaces)}


class _EagerKernel:
    def __init__(self, fn):
        self.fn = fn


@keras.saving.register_keras_serializable(package="bridge")
class FusedConvBnLeaky(_Fused):
    """Conv2D (+ bias) -> inference BatchNormalization -> LeakyReLU as one
    YoloConvBnLeaky. `kernel_size` is (KH, KW); the other attributes are the op's
    (strides [1,sh,sw,1], padding SAME/VALID/EXPLICIT, explicit_paddings,
    dilations, epsilon, alpha)."""

    def __init__(self, filters, kernel_size, use_bias=False, center=True, scale=True, strides=None, padding=None,
                 explicit_paddings=None, dilations=None, epsilon=None, alpha=None, **kwargs):
        super().__init__(**kwargs)
        self.filters = int(filters)
        self.kernel_size = tuple(int(k) for k in kernel_size)
        self.use_bias, self.center, self.scale = bool(use_bias), bool(center), bool(scale)
        self.op_attrs = CONV.resolve(dict(strides=strides, padding=padding, explicit_paddings=explicit_paddings,
                                          dilations=dilations, epsilon=epsilon, alpha=alpha))

    def build(self, input_shape):
        c = self.filters
        self.kernel = self.add_weight(shape=(*self.kernel_size, input_shape[-1], c), name="kernel",
                                      initializer="glorot_uniform")
        self.bias = self.add_weight(shape=(c,), name="bias", initializer="zeros") if self.use_bias else None
        self.gamma = self.add_weight(shape=(c,), name="gamma", initializer="ones") if self.scale else None
        self.beta = self.add_weight(shape=(c,), name="beta", initializer="zeros") if self.center else None
        self.moving_mean = self.add_weight(shape=(c,), name="moving_mean", initializer="zeros", trainable=False)
        self.moving_variance = self.add_weight(shape=(c,), name="moving_variance", initializer="ones",
                                               trainable=False)

    def _params(self, dt):
        zeros, ones = tf.zeros([self.filters], dt), tf.ones([self.filters], dt)
        cast = lambda v, default: default if v is None else tf.cast(v, dt)  # noqa: E731
        return (tf.cast(self.kernel, dt), cast(self.bias, zeros), cast(self.gamma, ones), cast(self.beta, zeros),
                tf.cast(self.moving_mean, dt), tf.cast(self.moving_variance, dt))

    def _op(self, x):
        # The attributes were checked at construction: the raw op, without the
        # public wrapper's per-call re-checks (Python time that eager mode pays).
        return _tf_ops().load().yolo_conv_bn_leaky(x, *self._params(x.dtype), **self.op_attrs)

    def call(self, x):
        ops = _tf_ops()
        if ops.is_lowered():
            return ops.yolo_conv_bn_leaky(x, *self._params(x.dtype), **self.op_attrs)
        if tf.executing_eagerly():
            # TensorFlow shares one eager kernel among all layers with the same
            # attributes; through a function of its own this layer gets a kernel of
            # its own, whose packed filter (tf_ops/yolo_conv_bn_leaky.cc) then
            # survives from call to call. The holder is a plain object, so neither
            # Keras nor SavedModel tracks the function.
            holder = self.__dict__.get("_eager_kernel")
            if holder is None:
                fn = tf.function(self._op, autograph=False, reduce_retracing=True)
                # TensorFlow counts traces per code object, so seventy layers each
                # tracing its own function once read as "frequent retracing" and warn;
                # the flag is tf.function's own switch for that warning.
                fn._omit_frequent_tracing_warning = True
                holder = self.__dict__["_eager_kernel"] = _EagerKernel(fn)
            return holder.fn(x)
        return self._op(x)

    def compute_output_shape(self, input_shape):
        c = (self.filters,)
        return _infer(CONV, [_shape(input_shape), (*self.kernel_size, input_shape[-1], self.filters)] + [c] * 5,
                      **self.op_attrs)[0]

    def get_config(self):
        attrs = {k: list(v) if isinstance(v, tuple) else v for k, v in self.op_attrs.items()}
        return {**super().get_config(), "filters": self.filters, "kernel_size": list(self.kernel_size),
                "use_bias": self.use_bias, "center": self.center, "scale": self.scale, **attrs}


@keras.saving.register_keras_serializable(package="bridge")
class FusedLayerNormalization(_Fused):
    """LayerNormalization over the last axis as one FusedLayerNorm; center=False
    passes beta zeros, scale=False gamma ones (as Keras does)."""

    def __init__(self, epsilon=None, center=True, scale=True, **kwargs):
        super().__init__(**kwargs)
        self.epsilon = NORM.resolve({"epsilon": epsilon})["epsilon"]
        self.center, self.scale = bool(center), bool(scale)
        self.supports_masking = True

    def build(self, input_shape):
        h = input_shape[-1]
        self.gamma = self.add_weight(shape=(h,), name="gamma", initializer="ones") if self.scale else None
        self.beta = self.add_weight(shape=(h,), name="beta", initializer="zeros") if self.center else None

    def call(self, x):
        dt = x.dtype
        h = tf.shape(x)[-1:]
        gamma = tf.ones(h, dt) if self.gamma is None else tf.cast(self.gamma, dt)
        beta = tf.zeros(h, dt) if self.beta is None else tf.cast(self.beta, dt)
        return _tf_ops().fused_layer_norm(x, gamma, beta, epsilon=self.epsilon)

    def compute_output_shape(self, input_shape):
        h = (input_shape[-1],)
        return _infer(NORM, [_shape(input_shape), h, h], epsilon=self.epsilon)[0]

    def get_config(self):
        return {**super().get_config(), "epsilon": self.epsilon, "center": self.center, "scale": self.scale}


@keras.saving.register_keras_serializable(package="bridge")
class FusedYoloDecode(_Fused):
    """A YOLO head's decode step as one YoloDecode: raw -> (boxes, objectness, class_probs)."""

    def __init__(self, anchors, num_classes, stride, scale_x_y=None, **kwargs):
        super().__init__(**kwargs)
        self.op_attrs = DECODE.resolve(dict(anchors=anchors, num_classes=num_classes, stride=stride,
                                            scale_x_y=scale_x_y))
        DECODE.infer_shapes([None], **self.op_attrs)  # the attribute checks (anchors, stride, classes)

    def call(self, raw):
        a = self.op_attrs
        return tuple(_tf_ops().yolo_decode(raw, a["anchors"], a["num_classes"], a["stride"],
                                           scale_x_y=a["scale_x_y"]))

    def compute_output_shape(self, raw_shape):
        return _infer(DECODE, [_shape(raw_shape)], **self.op_attrs)

    def get_config(self):
        attrs = {k: list(v) if isinstance(v, tuple) else v for k, v in self.op_attrs.items()}
        return {**super().get_config(), **attrs}


@keras.saving.register_keras_serializable(package="bridge")
class FusedOp(_Fused):
    """Any spec'd op as a Keras layer, for the patterns a spec declares
    (bridge.ops.fusion): the layer's input is the op's first input, its weights
    the others (named and shaped as `weights` says: [(input name, shape)]), and
    `attrs` the op's attributes. It calls `bridge.tf_ops.<module>`, so a team's
    op needs its library loaded (`--op-library`) to run, and its spec registered
    (`--op-spec`) to load from a .keras file."""

    def __init__(self, op, attrs=None, weights=(), **kwargs):
        super().__init__(**kwargs)
        try:
            self.spec = _specs.get(op)
        except KeyError:
            raise ValueError(f"FusedOp: op {op!r} is not registered: give its spec (--op-spec FILE, or "
                             f"bridge.ops.load_spec_file) before loading or building the model") from None
        self.op_attrs = self.spec.resolve(dict(attrs or {}))
        self.weight_shapes = [(str(name), tuple(int(d) for d in shape)) for name, shape in weights]
        want = [a.name for a in self.spec.inputs[1:]]
        if [name for name, _ in self.weight_shapes] != want:
            raise ValueError(f"FusedOp: {self.spec.name} takes the weights {want} after its first input, got "
                             f"{[name for name, _ in self.weight_shapes]}")

    def build(self, input_shape):
        self.params = [self.add_weight(shape=shape, name=name, initializer="zeros")
                       for name, shape in self.weight_shapes]

    def _fn(self):
        fn = tf_function(self.spec)
        if fn is None:
            raise ValueError(no_kernel(self.spec))
        return fn

    def call(self, x):
        out = self._fn()(x, *[tf.cast(w, x.dtype) for w in self.params], **self.op_attrs)
        return tuple(out) if isinstance(out, (list, tuple)) else out

    def compute_output_shape(self, input_shape):
        shapes = _infer(self.spec, [_shape(input_shape)] + [shape for _, shape in self.weight_shapes],
                        **self.op_attrs)
        return shapes[0] if len(shapes) == 1 else shapes

    def get_config(self):
        attrs = {k: list(v) if isinstance(v, tuple) else v for k, v in self.op_attrs.items()}
        return {**super().get_config(), "op": self.spec.name, "attrs": attrs,
                "weights": [[name, list(shape)] for name, shape in self.weight_shapes]}
