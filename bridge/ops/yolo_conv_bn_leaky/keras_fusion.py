"""YoloConvBnLeaky's Keras matcher (its spec's fusion hook): [ZeroPadding2D ->]
Conv2D -> BatchNormalization -> LeakyReLU becomes one FusedConvBnLeaky; an
Activation layer running keras.activations.leaky_relu counts as the LeakyReLU,
at the slope it runs with (`leaky_slope`). A
ZeroPadding2D before a VALID conv is folded into EXPLICIT padding (the
zero_padding pattern, counted as folds); conv bias and BN mean are passed
separately. A chain cannot say all of it: the BatchNorm must use its moving
statistics (no training=True on it or before it in the same call)."""
from __future__ import annotations

from bridge.converters.fuse_layers_common import dtype_problem, kind


def match(rw, node) -> None:
    import keras
    op = node.operation
    if isinstance(op, keras.layers.BatchNormalization):
        _match(rw, node)
    elif leaky_slope(op) is not None:
        src = rw.producer_of(node)
        if src is None or not isinstance(src.operation, keras.layers.BatchNormalization):
            what = "a model input" if src is None or src.is_input else kind(src.operation)
            rw.report.skip("conv_bn_leaky", [op.name], f"{_leaky_kind(op)} follows {what}, not a BatchNormalization")


def leaky_slope(layer):
    """The negative slope of a LeakyReLU layer, or of an Activation layer whose
    function is keras.activations.leaky_relu (Activation("leaky_relu"): that
    function's own default slope, 0.2 in Keras 3, not LeakyReLU's 0.3; a
    functools.partial of it: the slope it binds); None for any other layer."""
    import functools
    import inspect
    import keras
    if isinstance(layer, keras.layers.LeakyReLU):
        return float(layer.negative_slope)
    if not isinstance(layer, keras.layers.Activation):
        return None
    fn, bound = layer.activation, {}
    if isinstance(fn, functools.partial) and not fn.args:
        fn, bound = fn.func, fn.keywords
    if fn is not keras.activations.leaky_relu:
        return None
    slope = bound.get("negative_slope", inspect.signature(fn).parameters["negative_slope"].default)
    return float(slope)


def _leaky_kind(layer) -> str:
    return "LeakyReLU" if type(layer).__name__ == "LeakyReLU" else "Activation('leaky_relu')"


def _match(rw, bn_node):
    import keras
    from . import SPEC
    from .keras_layer import FusedConvBnLeaky
    bn = bn_node.operation
    conv_node = rw.producer_of(bn_node)
    conv = None if conv_node is None or conv_node.is_input else conv_node.operation
    names = [bn.name] if conv is None else [conv.name, bn.name]
    skip = lambda reason: rw.report.skip("conv_bn_leaky", names, reason)  # noqa: E731
    if not isinstance(conv, keras.layers.Conv2D):
        return skip(f"BatchNormalization follows {'a model input' if conv is None else kind(conv)}, not a Conv2D")
    if conv.data_format != "channels_last":
        return skip(f"Conv2D is {conv.data_format}; the fused op is NHWC")
    if conv.groups != 1:
        return skip(f"Conv2D has groups={conv.groups}; the fused op is a plain convolution")
    act = getattr(conv.activation, "__name__", str(conv.activation))
    if act != "linear":
        return skip(f"Conv2D has activation '{act}' before the BatchNormalization")
    _, why = rw.sole_consumer(conv_node.outputs[0])
    if why:
        return skip(f"the Conv2D output {why}; fusing would drop it")
    rank = len(bn_node.input_tensors[0].shape)
    if bn.axis % rank != rank - 1:
        return skip(f"BatchNormalization axis={bn.axis} is not the channel (last) axis")
    if getattr(bn, "renorm", False):
        return skip("BatchNormalization has renorm=True")
    if bn_node.arguments.kwargs.get("training") is True:
        return skip("BatchNormalization is called with training=True (batch statistics)")
    if rw.training_from is not None:
        return skip(f"runs after '{rw.training_from}', which is called with training=True: Keras runs "
                    f"the later layers of the call in training mode too (batch statistics)")
    leaky_node, why = rw.sole_consumer(bn_node.outputs[0])
    if why:
        return skip(f"the BatchNormalization output {why}; fusing would drop it")
    leaky = leaky_node.operation
    alpha = leaky_slope(leaky)
    if alpha is None:
        return skip(f"BatchNormalization is followed by {_followed(leaky)}, not a LeakyReLU")
    names.append(leaky.name)
    problem = dtype_problem(SPEC, conv, bn, leaky)
    if problem:
        return skip(problem)

    first, pad = conv_node, None
    attrs = dict(strides=(1, *conv.strides, 1), dilations=(1, *conv.dilation_rate, 1),
                 padding=conv.padding.upper(), explicit_paddings=())
    zp_node = rw.producer_of(conv_node)
    if zp_node is not None and not zp_node.is_input and isinstance(zp_node.operation, keras.layers.ZeroPadding2D):
        pad = _fold_padding(rw, zp_node, conv, attrs)
        if pad is not None:
            first = zp_node
    try:
        SPEC.infer_shapes([tuple(first.input_tensors[0].shape), tuple(conv.kernel.shape)]
                          + [(conv.filters,)] * 5, **attrs, epsilon=bn.epsilon, alpha=alpha)
    except ValueError as e:
        return skip(f"the fused op rejects it: {e}")
    originals = ([pad.name] if pad is not None else []) + names

    def make(layer_name):
        return FusedConvBnLeaky(conv.filters, conv.kernel_size, use_bias=conv.use_bias, center=bn.center,
                                scale=bn.scale, epsilon=bn.epsilon, alpha=alpha,
                                replaces=originals, name=layer_name, dtype=conv.dtype_policy, **attrs)

    def weights():
        w = [conv.kernel] + ([conv.bias] if conv.use_bias else []) + ([bn.gamma] if bn.scale else [])
        return w + ([bn.beta] if bn.center else []) + [bn.moving_mean, bn.moving_variance]

    rw.plan(leaky_node, "conv_bn_leaky", f"{conv.name}_bn_leaky", make, weights, first,
            [n for n in (first, conv_node, bn_node) if n is not leaky_node], originals,
            folds=("zero_padding",) if pad is not None else ())


def _followed(layer) -> str:
    """What follows the BatchNormalization, an Activation layer with its function's name."""
    import keras
    if isinstance(layer, keras.layers.Activation):
        fn = getattr(layer.activation, "func", layer.activation)
        return f"{kind(layer)} ({getattr(fn, '__name__', str(fn))})"
    return kind(layer)


def _fold_padding(rw, zp_node, conv, attrs):
    """Folds the ZeroPadding2D into `attrs` (EXPLICIT) and returns the layer, or
    reports why it stays and returns None."""
    zp = zp_node.operation
    skip = lambda reason: rw.report.skip("zero_padding", [zp.name, conv.name], reason)  # noqa: E731
    if zp.data_format != "channels_last":
        return skip(f"ZeroPadding2D is {zp.data_format}")
    _, why = rw.sole_consumer(zp_node.outputs[0])
    if why:
        return skip(f"the ZeroPadding2D output {why}; it stays, the conv is fused alone")
    if conv.padding != "valid":
        return skip(f"the Conv2D pads itself ('{conv.padding}'): the ZeroPadding2D stays, the conv is fused alone")
    (top, bottom), (left, right) = zp.padding
    attrs.update(padding="EXPLICIT", explicit_paddings=(0, 0, top, bottom, left, right, 0, 0))
    return zp
