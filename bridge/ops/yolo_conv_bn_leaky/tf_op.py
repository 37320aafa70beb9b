"""YoloConvBnLeaky in TensorFlow: the public wrapper and the gradient.

`op` runs the C++ kernel (the core kernel.h beside it, hosted by tf_ops/host.cc); its composite is the spec's body
on TfBody (tf_ops/from_body.py): folded weights, CONV_2D on NHWC, bias, LEAKY_RELU,
the form converters map to builtins; the gradient for all seven inputs is
registered on import.
"""
from __future__ import annotations

import tensorflow as tf

from bridge.ops import yolo_conv_bn_leaky as _spec_module

SPEC = _spec_module.SPEC
_D = SPEC.defaults()
_PARAMS = _spec_module.PARAMS


def _attrs(strides, padding, explicit_paddings, dilations, epsilon, alpha):
    """The attributes resolved and checked by the spec (OpError, a ValueError)."""
    attrs = SPEC.resolve(dict(strides=strides, padding=padding, explicit_paddings=explicit_paddings,
                              dilations=dilations, epsilon=epsilon, alpha=alpha))
    SPEC.infer_shapes([None] * len(SPEC.inputs), **attrs)  # attribute checks only
    return attrs


def _inputs(x, *rest):
    x = tf.convert_to_tensor(x)
    SPEC.check_dtype(x.dtype.as_numpy_dtype)
    return (x,) + tuple(tf.convert_to_tensor(t, dtype_hint=x.dtype) for t in rest)


def op(x, filter, conv_bias, bn_gamma, bn_beta, bn_mean, bn_variance,  # noqa: A002 (the spec's name)
       strides=_D["strides"], padding=_D["padding"], explicit_paddings=_D["explicit_paddings"],
       dilations=_D["dilations"], epsilon=_D["epsilon"], alpha=_D["alpha"], name=None):
    """leaky_relu(conv2d(x, filter * s) + (conv_bias - bn_mean) * s + bn_beta, alpha),
    s = bn_gamma / sqrt(bn_variance + epsilon); NHWC x HWIO, padding as tf.nn.conv2d.

    Bad attributes raise ValueError (bridge.ops.OpError) here; bad shapes raise
    ValueError while tracing and tf.errors.InvalidArgumentError eagerly."""
    from bridge import tf_ops
    attrs = _attrs(strides, padding, explicit_paddings, dilations, epsilon, alpha)
    args = _inputs(x, filter, conv_bias, bn_gamma, bn_beta, bn_mean, bn_variance)
    return tf_ops.load().yolo_conv_bn_leaky(*args, name=name, **attrs)


def _fold(filt, conv_bias, bn_gamma, bn_beta, bn_mean, bn_variance, epsilon):
    s = bn_gamma * tf.math.rsqrt(bn_variance + epsilon)
    return filt * s, (conv_bias - bn_mean) * s + bn_beta, s


def _conv_attrs(op_):
    return dict(strides=op_.get_attr("strides"), padding=op_.get_attr("padding"),
                explicit_paddings=op_.get_attr("explicit_paddings"), dilations=op_.get_attr("dilations"))


def _dilated(filt, dh: int, dw: int):
    """The HWIO filter with dh-1 / dw-1 zero rows / columns between its taps: [(KH-1)*dh+1, (KW-1)*dw+1, Cin, Cout]."""
    kh, kw, cin, cout = (tf.shape(filt)[i] for i in range(4))
    wide = tf.pad(filt[:, None], [[0, 0], [0, dh - 1], [0, 0], [0, 0], [0, 0]])
    wide = tf.reshape(wide, [kh * dh, kw, cin, cout])[:(kh - 1) * dh + 1]
    wide = tf.pad(wide[:, :, None], [[0, 0], [0, 0], [0, dw - 1], [0, 0], [0, 0]])
    return tf.reshape(wide, [(kh - 1) * dh + 1, kw * dw, cin, cout])[:, :(kw - 1) * dw + 1]


def _gradient(op_, dy):
    """All seven input gradients through the fold, from TF ops so that second
    derivatives compose:
    dz = dy * (1 where z > 0 else alpha);  W' = filter * s
    dx = conv2d_backprop_input(W', dz);  dW' = conv2d_backprop_filter(x, dz)
    dfilter = dW' * s;  db' = sum(dz);  dconv_bias = db' * s;  dbn_mean = -db' * s;  dbn_beta = db'
    ds = sum(dW' * filter) + db' * (conv_bias - bn_mean)
    dbn_gamma = ds * rsqrt(var + eps);  dbn_variance = -ds * s / (2 (var + eps))."""
    x, filt, conv_bias, bn_gamma, _, bn_mean, bn_variance = op_.inputs
    epsilon, alpha = op_.get_attr("epsilon"), op_.get_attr("alpha")
    conv = _conv_attrs(op_)
    y = op_.outputs[0]
    if alpha >= 0:
        positive = y > 0  # y > 0 exactly where z > 0 when alpha >= 0
    else:
        w_fold, b_fold, _ = _fold(filt, conv_bias, bn_gamma, op_.inputs[4], bn_mean, bn_variance, epsilon)
        z = tf.raw_ops.Conv2D(input=x, filter=w_fold, **conv) + b_fold
        positive = z > 0
    dz = tf.where(positive, dy, dy * tf.cast(alpha, dy.dtype))
    rstd = tf.math.rsqrt(bn_variance + epsilon)
    s = bn_gamma * rstd
    dh, dw = conv["dilations"][1], conv["dilations"][2]
    if dh > 1 or dw > 1:
        # TF's CPU backprop kernels refuse dilations > 1 where oneDNN is off (AVX2 CPUs): the same convolution with
        # the zeros written into the filter has dilation 1, and its filter gradient holds dW' on the dilated taps
        conv = dict(conv, dilations=[1, 1, 1, 1])
        wide = _dilated(filt, dh, dw)
        dx = tf.raw_ops.Conv2DBackpropInput(input_sizes=tf.shape(x), filter=wide * s, out_backprop=dz, **conv)
        dw_fold = tf.raw_ops.Conv2DBackpropFilter(input=x, filter_sizes=tf.shape(wide), out_backprop=dz,
                                                  **conv)[::dh, ::dw]
    else:
        dx = tf.raw_ops.Conv2DBackpropInput(input_sizes=tf.shape(x), filter=filt * s, out_backprop=dz, **conv)
        dw_fold = tf.raw_ops.Conv2DBackpropFilter(input=x, filter_sizes=tf.shape(filt), out_backprop=dz, **conv)
    db = tf.reduce_sum(dz, axis=[0, 1, 2])
    ds = tf.reduce_sum(dw_fold * filt, axis=[0, 1, 2]) + db * (conv_bias - bn_mean)
    d_gamma = ds * rstd
    d_variance = -0.5 * ds * s / (bn_variance + epsilon)
    return dx, dw_fold * s, db * s, d_gamma, db, -db * s, d_variance


try:
    tf.RegisterGradient(SPEC.name)(_gradient)
except KeyError:  # the module was imported again (importlib.reload): the first registration stands
    pass
