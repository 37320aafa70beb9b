"""What YoloConvBnLeaky replaces: the Keras patterns (matched by keras_fusion.py) and
the TensorFlow graph pattern (bridge/ops/graph_fusion.py)."""
from __future__ import annotations

import numpy as np

from ..fusion import Link, Pattern
from ..graph_fusion import GraphPattern


# -- the TensorFlow subgraphs it replaces (graph_fusion): [Pad ->] Conv2D [->
# BiasAdd] -> FusedBatchNormV3 (inference) or its folded Mul/Add (Keras's
# BatchNormalization as saved) -> LeakyRelu or Maximum(y, a*y). The affine map
# between the conv and the activation is read off by evaluating that part of the
# subgraph (BN scale and shift per channel; the conv bias folded in); the rewriter
# then checks the whole subgraph numerically.
GRAPH_OPS = ("Pad", "PadV2", "Conv2D", "BiasAdd", "Mul", "AddV2", "Add", "Sub", "RealDiv", "FusedBatchNorm",
             "FusedBatchNormV3", "LeakyRelu", "Maximum", "Identity")



def _one_conv(region) -> bool:
    return sum(n.op == "Conv2D" for n in region.nodes) == 1



def _leaky(region):
    """(alpha, the tensor before the activation) or the reason there is none."""
    end = region.end
    if end.op == "LeakyRelu":
        return float(end.attrs.get("alpha", 0.2)), end.inputs[0]
    for y, other in (end.inputs, end.inputs[::-1]):
        mul = region.node(other)
        if mul is None or mul.op != "Mul" or y not in mul.inputs:
            continue
        a = region.constant(mul.inputs[1] if mul.inputs[0] == y else mul.inputs[0])
        if a is not None and a.size == 1 and 0 <= float(a) < 1:
            return float(a), y
    return f"{end} is not max(y, a*y) with a constant 0 <= a < 1"



def _between(region, conv, tensor):
    """The region's nodes after `conv` that `tensor` is computed from (itself included)."""
    out, stack = [], [tensor]
    while stack:
        n = region.node(stack.pop())
        if n is not None and n is not conv and n not in out:
            out.append(n)
            stack.extend(n.inputs)
    return out



def _graph_identify(region):
    conv = next(n for n in region.nodes if n.op == "Conv2D")
    if conv.attrs.get("data_format", "NHWC") != "NHWC":
        return f"{conv} is {conv.attrs.get('data_format')}; the fused op is NHWC"
    w = region.constant(conv.inputs[1])
    if w is None:
        return f"the filter of {conv} is not a constant"
    attrs = dict(strides=conv.attrs.get("strides", (1, 1, 1, 1)), dilations=conv.attrs.get("dilations", (1, 1, 1, 1)),
                 padding=conv.attrs["padding"], explicit_paddings=conv.attrs.get("explicit_paddings", ()))
    for pad in (n for n in region.nodes if n.op in ("Pad", "PadV2")):
        p = region.constant(pad.inputs[1])
        value = region.constant(pad.inputs[2]) if pad.op == "PadV2" else np.zeros(())
        if p is None or p.shape != (4, 2) or p[0].any() or p[3].any() or value is None or value.any():
            return f"{pad} is not a zero padding of H and W only"
        if attrs["padding"] != "VALID":
            return f"{conv} pads itself ({attrs['padding']}) after {pad}: the op takes one padding"
        attrs.update(padding="EXPLICIT", explicit_paddings=(0, 0, *(int(v) for v in p[1:3].ravel()), 0, 0))
    leaky = _leaky(region)
    if isinstance(leaky, str):
        return leaky
    alpha, pre = leaky
    for bn in (n for n in region.nodes if n.op.startswith("FusedBatchNorm")):
        if bn.attrs.get("is_training", True):
            return f"{bn} is in training mode (batch statistics)"
    if not any(n.op.startswith("FusedBatchNorm") or n.op in ("Mul", "RealDiv") for n in _between(region, conv, pre)):
        return f"no BatchNormalization (nor its folded Mul/Add) between {conv} and {region.end}"
    cout = w.shape[3]
    # the BN (and conv bias) as the affine map y = conv * scale + shift, per channel
    zero = region.evaluate(None, given={conv.name: np.zeros((1, 1, 1, cout))}, at=pre)
    one = region.evaluate(None, given={conv.name: np.ones((1, 1, 1, cout))}, at=pre)
    shift = np.broadcast_to(zero, (1, 1, 1, cout)).reshape(cout)
    scale = np.broadcast_to(one, (1, 1, 1, cout)).reshape(cout) - shift
    zeros = np.zeros(cout)
    return (w, zeros, scale, shift, zeros, np.ones(cout)), dict(attrs, epsilon=0.0, alpha=alpha)



def _graph_probe(region):
    conv = next(n for n in region.nodes if n.op == "Conv2D")
    w = region.constant(conv.inputs[1])
    n, h, wd, c = region.x_shape
    strides, dil = conv.attrs.get("strides", (1, 1, 1, 1)), conv.attrs.get("dilations", (1, 1, 1, 1))
    size = [(k - 1) * d + 1 + s + 1 for k, d, s in zip(w.shape[:2], dil[1:3], strides[1:3])]
    return (1, min(h or size[0], size[0]), min(wd or size[1], size[1]), c)



def _graph_folds(region):
    return ("zero_padding",) if any(n.op in ("Pad", "PadV2") for n in region.nodes) else ()



GRAPH_FUSION = (GraphPattern("conv_bn_leaky", "[Pad ->] Conv2D [-> BiasAdd] -> FusedBatchNormV3 (inference) or its "
                             "Mul/Add -> LeakyRelu or Maximum(y, a*y)",
                             ends=("LeakyRelu", "Maximum"), ops=GRAPH_OPS, start=("Conv2D", "Pad", "PadV2"),
                             when=_one_conv, identify=_graph_identify, probe=_graph_probe, folds=_graph_folds),)


KERAS_FUSION = (Pattern("conv_bn_leaky", "Conv2D -> BatchNormalization -> LeakyReLU (or Activation('leaky_relu'), "
                        "at its own slope)",
                        (Link("Conv2D"), Link("BatchNormalization"), Link(("LeakyReLU", "Activation"), "leaky_re_lu")),
                        hook="bridge.ops.yolo_conv_bn_leaky.keras_fusion"),
                Pattern("zero_padding", "ZeroPadding2D before a VALID Conv2D (folded into EXPLICIT pads)",
                        (Link("ZeroPadding2D"), Link("Conv2D")), folded_into="conv_bn_leaky"))
