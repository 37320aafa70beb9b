"""YoloConvBnLeaky's numpy float64 reference: the BatchNorm fold, a plain NHWC
convolution, and the TF32 error bound the CUDA checks use."""
from __future__ import annotations

import numpy as np

from .shape_rule import resolve_pads


def fold(filt, conv_bias, bn_gamma, bn_beta, bn_mean, bn_variance, epsilon):
    """BatchNorm folded into the conv: (W', b'). The conv bias and the BN mean are
    combined once, never added twice (seed 001's pitfall)."""
    s = bn_gamma / np.sqrt(bn_variance + epsilon)
    return filt * s, (conv_bias - bn_mean) * s + bn_beta



def conv2d_nhwc(x, w, pads, strides, dilations):
    """Plain float64 convolution, NHWC x HWIO, explicit [top,left,bottom,right] pads."""
    t, l, b, r = pads
    xp = np.pad(x, ((0, 0), (t, b), (l, r), (0, 0)))
    kh, kw, cin, cout = w.shape
    sh, sw = strides
    dh, dw = dilations
    n, hp, wp, _ = xp.shape
    oh = (hp - (kh - 1) * dh - 1) // sh + 1 if hp >= (kh - 1) * dh + 1 else 0
    ow = (wp - (kw - 1) * dw - 1) // sw + 1 if wp >= (kw - 1) * dw + 1 else 0
    y = np.zeros((n, oh, ow, cout), dtype=np.float64)
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, i * dh: i * dh + (oh - 1) * sh + 1: sh, j * dw: j * dw + (ow - 1) * sw + 1: sw, :]
            if patch.size:
                y += np.tensordot(patch, w[i, j], axes=([3], [0]))
    return y



def reference(x, filt, conv_bias, bn_gamma, bn_beta, bn_mean, bn_variance, *,
               strides, padding, explicit_paddings, dilations, epsilon, alpha):
    pads, _ = resolve_pads(x.shape, filt.shape, strides, padding, explicit_paddings, dilations)
    w, b = fold(filt, conv_bias, bn_gamma, bn_beta, bn_mean, bn_variance, epsilon)
    z = conv2d_nhwc(x, w, pads, strides[1:3], dilations[1:3]) + b
    return np.where(z > 0, z, alpha * z)



def tf32_error_bound(x, filt, conv_bias, bn_gamma, bn_beta, bn_mean, bn_variance, *,
                     strides, padding, explicit_paddings, dilations, epsilon, alpha):
    """Per output element, the most a product in TF32 can differ from the exact one:
    TF32 keeps 10 mantissa bits of each operand (rounded or truncated: at most 2^-10
    relative each), so 2^-9 * sum_k |x_k| |w'_k|, w' the BN-folded filter. (Float32
    accumulation comes on top: docs/ops.md's float32 bound.) Arguments as the reference's,
    attributes resolved."""
    x, filt = np.asarray(x, np.float64), np.asarray(filt, np.float64)
    pads, _ = resolve_pads(x.shape, filt.shape, strides, padding, explicit_paddings, dilations)
    w, _ = fold(filt, *(np.asarray(a, np.float64) for a in (conv_bias, bn_gamma, bn_beta, bn_mean, bn_variance)),
                epsilon)
    return 2.0 ** -9 * conv2d_nhwc(np.abs(x), np.abs(w), pads, strides[1:3], dilations[1:3])
