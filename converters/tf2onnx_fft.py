"""tf2onnx handlers for TensorFlow's 2-D FFT as Keras 3 emits it (keras.ops.fft2:
Complex -> FFT2D -> Real / Imag; keras_hub's FNet mixes tokens this way).
Registered by `tf2onnx_standard.register`.

ONNX has complex tensor types but onnxruntime runs no op on them, so a complex
value travels as a float tensor with a trailing axis of 2 (real, imag), the
layout ONNX DFT reads and writes. Only these handlers know that layout: a
complex value reaching any other op (tf2onnx's ComplexAbs uses a leading [2]
axis, a Cast to complex has no real/imag split) is refused, naming that op.

FFT2D transforms the two inner axes: [..., H, W] complex is [..., H, W, 2]
float here, DFT axes -3 and -2. DFT exists from opset 17, where the axis is an
attribute (opset 20 made it an input; tf2onnx 1.17 stops at 18). DFT wants a
batch axis in front of the transformed ones, so a leading axis of 1 is added
for the transform and removed after. Below opset 17 (the GE road exports at
11) FFT2D is two MatMuls by constant cos / sin matrices, for static H and W.
"""
from __future__ import annotations

import numpy as np

HANDLES_FFT = ("Complex", "FFT2D", "Real", "Imag")
# ops whose complex inputs and outputs are in the trailing-[2] layout
_TAKES_LAYOUT = frozenset({"FFT2D", "Real", "Imag"})
_FIRST_OPSET = 17


def _check_consumers(ctx, node) -> None:
    for out in node.output:
        for c in ctx.find_output_consumers(out):
            if c.type not in _TAKES_LAYOUT:
                raise ValueError(
                    f"{node.type} {node.name!r}: its complex output feeds {c.type} {c.name!r}; bridge carries "
                    f"complex values only through {', '.join(sorted(_TAKES_LAYOUT))} (as float [..., 2])")


def _is_complex_cast(ctx, src) -> bool:
    from onnx import TensorProto
    return (src is not None and src.type == "Cast" and src.get_attr_value("to") in
            (TensorProto.COMPLEX64, TensorProto.COMPLEX128)
            and ctx.get_dtype(src.input[0]) not in (TensorProto.COMPLEX64, TensorProto.COMPLEX128))


def _check_producer(ctx, node) -> None:
    src = node.inputs[0]
    if src is None or not getattr(src, "_bridge_complex", False):
        kind = "a graph input" if src is None else f"{src.type} {src.name!r}"
        raise ValueError(
            f"{node.type} {node.name!r}: its complex input comes from {kind}; bridge carries complex values "
            f"only from Complex (tf.complex) or a cast of a real tensor, through FFT2D")


def _take_fft2d_input(ctx, node) -> None:
    """FFT2D's input in the float [..., 2] layout, its output going only where
    that layout is read; else a ValueError naming the op in the way."""
    if _is_complex_cast(ctx, node.inputs[0]):  # tf.cast(real, complex64): tf2onnx made an ONNX Cast
        _to_layout(ctx, node.inputs[0], node.inputs[0].input[0], None)
    _check_producer(ctx, node)
    _check_consumers(ctx, node)


def _to_layout(ctx, node, real: str, imag) -> None:
    """Replaces `node` (complex output from `real` and `imag`, None for zeros)
    by the float [..., 2] tensor under the same output name."""
    from tf2onnx import utils
    _check_consumers(ctx, node)
    out = node.output[0]
    shape = ctx.get_shape(out)
    dtype = _float_of(ctx, out)
    if imag is None:  # zeros of real's shape; real * 0 would turn inf into NaN
        size = ctx.make_node("Shape", [real], name=utils.make_name(f"{node.name}/Shape")).output[0]
        imag = ctx.make_node("ConstantOfShape", [size], name=utils.make_name(f"{node.name}/zeros"),
                             attr={"value": _zero_tensor(dtype)}).output[0]
    ctx.remove_node(node.name)
    _concat_parts(ctx, node.name, out, real, imag, shape, dtype)


def _concat_parts(ctx, name: str, out: str, real: str, imag: str, shape, dtype) -> None:
    from tf2onnx.graph_builder import GraphBuilder
    parts = [GraphBuilder(ctx).make_unsqueeze({"data": x, "axes": [-1]}) for x in (real, imag)]
    new = ctx.make_node("Concat", parts, attr={"axis": -1}, outputs=[out], name=name,
                        shapes=[None if shape is None else list(shape) + [2]], dtypes=[dtype])
    new._bridge_complex = True


def _dft_matrices(n: int, dtype):
    """cos and sin of 2 pi j k / n (F = C - i S), from exact integer angles."""
    jk = np.outer(np.arange(n), np.arange(n)) % n
    return np.cos(2 * np.pi * jk / n).astype(dtype), np.sin(2 * np.pi * jk / n).astype(dtype)


def _fft2d_matmul(ctx, node) -> None:
    """FFT2D below opset 17 (no DFT; the GE road is at 11): Y = F_H X F_W with
    constant cos / sin matrices, for static H and W only."""
    from onnx import helper
    from tf2onnx import utils
    in_shape = ctx.get_shape(node.input[0])
    h, w = (None, None) if in_shape is None or len(in_shape) < 3 else in_shape[-3:-1]
    if not (isinstance(h, int) and isinstance(w, int) and h > 0 and w > 0):
        raise ValueError(f"FFT2D {node.name!r}: with sizes not known before run time ({in_shape}) the ONNX "
                         f"DFT it converts to requires opset {_FIRST_OPSET}")
    out = node.output[0]
    shape, dtype = ctx.get_shape(out), _float_of(ctx, out)
    np_dtype = helper.tensor_dtype_to_np_dtype(dtype)

    def op(kind, *inputs):
        return ctx.make_node(kind, list(inputs), name=utils.make_name(f"{node.name}/{kind}")).output[0]

    def part(index):
        idx = ctx.make_const(utils.make_name(f"{node.name}/part"), np.array(index, np.int64)).output[0]
        return ctx.make_node("Gather", [node.input[0], idx], attr={"axis": -1},
                             name=utils.make_name(f"{node.name}/Gather")).output[0]

    def consts(n):
        return [ctx.make_const(utils.make_name(f"{node.name}/dft{n}"), m).output[0] for m in _dft_matrices(n, np_dtype)]

    xr, xi = part(0), part(1)
    cw, sw = consts(w)
    ch, sh = consts(h)
    # rows (x F_W), then columns (F_H z); F = C - i S
    zr = op("Add", op("MatMul", xr, cw), op("MatMul", xi, sw))
    zi = op("Sub", op("MatMul", xi, cw), op("MatMul", xr, sw))
    yr = op("Add", op("MatMul", ch, zr), op("MatMul", sh, zi))
    yi = op("Sub", op("MatMul", ch, zi), op("MatMul", sh, zr))
    ctx.remove_node(node.name)
    _concat_parts(ctx, node.name, out, yr, yi, shape, dtype)


def _zero_tensor(dtype):
    from onnx import helper
    return helper.make_tensor("zero", dtype, [1], [0])


def _float_of(ctx, name):
    from onnx import TensorProto
    return {TensorProto.COMPLEX64: TensorProto.FLOAT,
            TensorProto.COMPLEX128: TensorProto.DOUBLE}.get(ctx.get_dtype(name), ctx.get_dtype(name))


def register() -> None:
    from tf2onnx import utils
    from tf2onnx.handler import tf_op

    @tf_op("Complex")
    class Complex:  # noqa: F841  (registered by the decorator)
        @classmethod
        def version_1(cls, ctx, node, **kwargs):
            _to_layout(ctx, node, node.input[0], node.input[1])

    @tf_op("FFT2D")
    class FFT2D:  # noqa: F841
        @classmethod
        def version_1(cls, ctx, node, **kwargs):
            _take_fft2d_input(ctx, node)
            _fft2d_matmul(ctx, node)

        @classmethod
        def version_17(cls, ctx, node, **kwargs):
            _take_fft2d_input(ctx, node)
            out = node.output[0]
            shape = ctx.get_shape(out)
            dtype = _float_of(ctx, out)
            zero = ctx.make_const(utils.make_name(f"{node.name}/batch"), np.array([0], np.int64)).output[0]
            x = ctx.make_node("Unsqueeze", [node.input[0], zero], name=utils.make_name(f"{node.name}/Unsqueeze"))
            for axis in (-3, -2):
                x = ctx.make_node("DFT", [x.output[0]], attr={"axis": axis, "inverse": 0, "onesided": 0},
                                  name=utils.make_name(f"{node.name}/DFT"))
            ctx.remove_node(node.name)
            new = ctx.make_node("Squeeze", [x.output[0], zero], outputs=[out], name=node.name,
                                shapes=[None if shape is None else list(shape) + [2]], dtypes=[dtype])
            new._bridge_complex = True

    def _part(index: int):
        @classmethod
        def version_1(cls, ctx, node, **kwargs):
            _check_producer(ctx, node)
            out = node.output[0]
            shape, dtype = ctx.get_shape(out), ctx.get_dtype(out)
            idx = ctx.make_const(utils.make_name(f"{node.name}/part"), np.array(index, np.int64)).output[0]
            ctx.remove_node(node.name)
            ctx.make_node("Gather", [node.input[0], idx], attr={"axis": -1}, outputs=[out], name=node.name,
                          shapes=[shape], dtypes=[dtype])
        return version_1

    tf_op("Real")(type("Real", (), {"version_1": _part(0)}))
    tf_op("Imag")(type("Imag", (), {"version_1": _part(1)}))
