"""YoloConvBnLeaky's case table: the examples every backend runs and the bad inputs
every backend refuses in the same words."""
from __future__ import annotations

import numpy as np

from ..cases import BadInput, Example
from . import NAME


def examples():
    rng = np.random.default_rng(12)

    def conv(id, x, k, cout, pads, strides=(1, 1), padding="SAME", dilations=(1, 1), explicit=(),
             epsilon=1e-3, alpha=0.2, **kw):
        """`pads`: the ONNX node's [top, left, bottom, right], worked out by hand."""
        cin = x[3]
        filt = rng.standard_normal((*k, cin, cout)) / np.sqrt(k[0] * k[1] * max(cin, 1))
        params = [rng.standard_normal(cout) * 0.3 for _ in range(4)] + [rng.uniform(0.5, 2.0, cout)]
        attrs = dict(strides=(1, *strides, 1), padding=padding, explicit_paddings=explicit,
                     dilations=(1, *dilations, 1), epsilon=epsilon, alpha=alpha)
        onnx = dict(strides=strides, pads=pads, dilations=dilations, epsilon=epsilon, alpha=alpha)
        return Example(id, (rng.standard_normal(x), filt, *params), attrs, onnx, **kw)

    return [
        # SAME, even input, stride 2: total padding 1, the odd pixel at the bottom/right
        conv("same-s2-even", (1, 8, 8, 3), (3, 3), 5, [0, 0, 1, 1], strides=(2, 2)),
        conv("same-s2-mixed", (2, 6, 7, 4), (3, 3), 3, [0, 1, 1, 1], strides=(2, 2)),
        conv("same-k2", (1, 5, 6, 2), (2, 2), 4, [0, 0, 1, 1]),
        conv("same-s1", (1, 5, 6, 3), (3, 3), 4, [1, 1, 1, 1]),
        conv("valid-s2-odd", (2, 7, 9, 2), (3, 3), 4, [0, 0, 0, 0], strides=(2, 2), padding="VALID"),
        conv("valid-s12", (1, 8, 9, 2), (2, 3), 4, [0, 0, 0, 0], strides=(1, 2), padding="VALID"),
        conv("dilation2", (1, 9, 10, 4), (3, 3), 6, [2, 2, 2, 2], dilations=(2, 2)),
        # effective filter 5, even input, stride 2: total padding 3 -> (1, 2)
        conv("dilation2-s2-even", (1, 8, 8, 2), (3, 3), 3, [1, 1, 2, 2], strides=(2, 2), dilations=(2, 2)),
        conv("explicit-asym-K360", (1, 6, 5, 40), (3, 3), 40, [2, 1, 0, 3], padding="EXPLICIT",
             explicit=(0, 0, 2, 0, 1, 3, 0, 0)),
        conv("1x1-cout33", (2, 5, 3, 8), (1, 1), 33, [0, 0, 0, 0]),
        conv("all-1", (1, 1, 1, 1), (1, 1), 1, [0, 0, 0, 0]),
        # pointwise, in bands of pixels that split no row evenly (143 = 11 x 13)
        conv("1x1-pixel-bands", (1, 13, 11, 64), (1, 1), 32, [0, 0, 0, 0]),
        conv("1x1-batch3-odd", (3, 7, 5, 16), (1, 1), 24, [0, 0, 0, 0]),
        conv("empty-batch", (0, 5, 5, 3), (3, 3), 4, [1, 1, 1, 1]),
        conv("alpha0-eps0.5", (1, 4, 5, 3), (3, 3), 2, [1, 1, 1, 1], epsilon=0.5, alpha=0.0),
        conv("alpha-negative-defaults", (1, 4, 4, 2), (3, 3), 3, [1, 1, 1, 1], epsilon=1e-5, alpha=-0.3),
        conv("26x26x64-s2", (1, 26, 26, 64), (3, 3), 64, [0, 0, 1, 1], strides=(2, 2), large=True),
    ]



def bad_inputs():
    p8 = ((8,),) * 5  # conv_bias, bn_gamma, bn_beta, bn_mean, bn_variance
    x, f = (1, 5, 5, 3), (3, 3, 3, 8)

    def bad(id, shapes, arg, message, attrs=None, **kw):
        return BadInput(id, shapes, attrs or {}, arg, f"{NAME}: argument '{arg}': {message}", **kw)

    return [
        bad("x-rank", ((5, 5, 3), f, *p8), "x", "must have rank 4 [N,H,W,Cin], got [5,5,3]"),
        bad("filter-rank", (x, (3, 3, 3), *p8), "filter", "must have rank 4 [KH,KW,Cin,Cout], got [3,3,3]"),
        bad("cin", (x, (3, 3, 4, 8), *p8), "filter", "Cin mismatch: x [1,5,5,3] has Cin=3, filter [3,3,4,8] has Cin=4"),
        bad("bias-size", (x, f, (7,), *p8[1:]), "conv_bias", "must have shape [Cout]=[8] (filter [3,3,3,8]), got [7]"),
        bad("variance-rank", (x, f, *p8[:4], (1, 8)), "bn_variance",
            "must have shape [Cout]=[8] (filter [3,3,3,8]), got [1,8]"),
        bad("filter-larger-than-x", ((1, 1, 5, 3), f, *p8), "x",
            "H axis of x [1,1,5,3] with filter [3,3,3,8]: computed output size would be negative", dict(padding="VALID"),
            onnx_attrs={}),
        bad("strides-3", (x, f, *p8), "strides", "needs 4 values [1,sh,sw,1], got [1, 2, 2]", dict(strides=(1, 2, 2)),
            kind="attr", onnx_attrs=dict(strides=(1, 2, 2)),
            onnx_message=f"{NAME}: argument 'strides': needs 2 positive values [sh,sw], got [1,2,2]"),
        bad("strides-batch", (x, f, *p8), "strides", "must be 1 at N and C ([1,h,w,1]), got [2, 1, 1, 1]",
            dict(strides=(2, 1, 1, 1)), kind="attr", in_onnx=False),
        bad("strides-zero", (x, f, *p8), "strides", "must be positive, got [1, 0, 1, 1]", dict(strides=(1, 0, 1, 1)),
            kind="attr", onnx_attrs=dict(strides=(0, 1)),
            onnx_message=f"{NAME}: argument 'strides': needs 2 positive values [sh,sw], got [0,1]"),
        bad("dilations-channel", (x, f, *p8), "dilations", "must be 1 at N and C ([1,h,w,1]), got [1, 1, 1, 2]",
            dict(dilations=(1, 1, 1, 2)), kind="attr", in_onnx=False),
        bad("padding", (x, f, *p8), "padding", "'FULL' is not one of", dict(padding="FULL"), kind="attr",
            in_onnx=False),
        bad("explicit-without-8", (x, f, *p8), "explicit_paddings", "EXPLICIT padding needs 8 values",
            dict(padding="EXPLICIT", explicit_paddings=(0, 0, 1, 1)), kind="attr",
            onnx_attrs=dict(pads=(1, 1, -1, 0)),
            onnx_message=f"{NAME}: argument 'pads': needs 4 non-negative values [top,left,bottom,right], got [1,1,-1,0]"),
    ]
