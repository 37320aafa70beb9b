"""tf2onnx handlers for standard TensorFlow ops that tf2onnx 1.17 cannot convert
but real Keras 3 models emit. Registered by `tf2onnx_common.register_all`.

- Erfc: Keras 3's default (exact) GELU is `0.5 * x * erfc(-x / sqrt(2))`, which
  TensorFlow 2.21 traces as an Erfc node. ONNX has Erf only: Erfc(x) = 1 - Erf(x).
  The subtraction loses relative precision where erfc is tiny (x > ~4), but GELU
  multiplies it by 0.5 * x there and adds nothing: the absolute error stays at
  float32 rounding of 1.
- Complex, FFT2D, Real, Imag (keras.ops.fft2, FNet): converters/tf2onnx_fft.py.
- TensorListStack of a list filled in straight-line code (RWKV7's recurrence):
  converters/tf2onnx_tensor_list.py (tf2onnx's own handler, replaced, is kept
  in its REPLACED for the zoo's plain run).
"""
from __future__ import annotations

import numpy as np

from .tf2onnx_fft import HANDLES_FFT
from .tf2onnx_tensor_list import HANDLES_TENSOR_LIST, REPLACED  # noqa: F401  (REPLACED: for the zoo)

HANDLES_STANDARD = ("Erfc",) + HANDLES_FFT + HANDLES_TENSOR_LIST  # the zoo takes these out for its plain run
_registered = False


def register() -> None:
    """Registers the handlers with tf2onnx (once; tf2onnx keeps the first
    registration per op and opset)."""
    global _registered
    if _registered:
        return
    from onnx import helper
    from tf2onnx import utils
    from tf2onnx.handler import tf_op

    @tf_op("Erfc")
    class Erfc:  # noqa: F841  (registered by the decorator)
        @classmethod
        def version_9(cls, ctx, node, **kwargs):  # Erf exists from opset 9
            x = node.input[0]
            dtype = ctx.get_dtype(x)
            one = ctx.make_const(utils.make_name(f"{node.name}/one"),
                                 np.array(1, dtype=helper.tensor_dtype_to_np_dtype(dtype)))
            erf = ctx.make_node("Erf", [x], name=utils.make_name(f"{node.name}/Erf"),
                                shapes=[ctx.get_shape(x)], dtypes=[dtype])
            shapes, dtypes = ctx.get_shape(node.output[0]), ctx.get_dtype(node.output[0])
            ctx.remove_node(node.name)
            ctx.make_node("Sub", [one.output[0], erf.output[0]], outputs=node.output, name=node.name,
                          shapes=[shapes], dtypes=[dtypes])

    from . import tf2onnx_fft, tf2onnx_tensor_list
    tf2onnx_fft.register()
    tf2onnx_tensor_list.register()
    _registered = True
