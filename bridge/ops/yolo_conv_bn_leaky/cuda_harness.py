"""YoloConvBnLeaky on the CUDA harness (bridge.cuda): its C entry points in
cuda_harness.cu beside it, the call the harness gains, and the roads `bridge cuda` checks.

    y = k.yolo_conv_bn_leaky(x, filter, conv_bias, bn_gamma, bn_beta, bn_mean, bn_variance,
                             strides=[1, 2, 2, 1], padding="SAME", allow_tf32=False)
"""
from typing import Tuple

import numpy as np

from bridge import ops as specs
from bridge.cuda import F32, I64, I64_ARRAY, INT, Call, Entry, numel, preload_cublaslt, shapes_of
from bridge.ops.yolo_conv_bn_leaky import tf32_error_bound

OP = "YoloConvBnLeaky"
# harness flags (kernel.cuh beside this file)
ALLOW_TF32 = 1
NO_EPILOGUE = 2
TENSOR_CORES = 4

# After the spec's pointers (seven inputs, y): the 15 geometry values, epsilon, alpha, flags.
ENTRIES = [Entry("bridge_yolo_conv_bn_leaky", (I64_ARRAY, F32, F32, INT))]


def conv_geometry(shapes, **attrs) -> Tuple[Tuple[int, ...], Tuple[int, ...]]:
    """The harness's 15 geometry values (n, h, w, cin, kh, kw, cout, oh, ow, sh, sw,
    dh, dw, pad_top, pad_left) and the output shape, from the spec's own shape
    inference and padding resolution (raises its OpError on bad input)."""
    spec = specs.get(OP)
    attrs = spec.resolve(attrs)
    (out,) = spec.infer_shapes(shapes, **attrs)
    onnx = spec.to_onnx_attrs(shapes, **attrs)
    n, h, w, cin = shapes[0]
    kh, kw, _, cout = shapes[1]
    top, left, _, _ = onnx["pads"]
    return (n, h, w, cin, kh, kw, cout, out[1], out[2], *onnx["strides"], *onnx["dilations"], top, left), tuple(out)


def yolo_conv_bn_leaky(k, x, filter, conv_bias, bn_gamma, bn_beta, bn_mean, bn_variance,
                       allow_tf32: bool = False, bias_epilogue: bool = True, tensor_cores: bool = False, **attrs):
    """`allow_tf32`: float32 products in TF32 (faster; ~1e-3 relative error,
    outside ops.md's float32 tolerance). `bias_epilogue=False` adds the bias in
    the LeakyReLU pass instead of cuBLASLt's epilogue (the fallback road).
    `tensor_cores`: the implicit GEMM on tensor cores, no im2col matrix, bias
    and LeakyReLU on the accumulators (float16, and float32 with allow_tf32;
    elsewhere it has no effect)."""
    c = Call(k, OP, (x, filter, conv_bias, bn_gamma, bn_beta, bn_mean, bn_variance), attrs)
    geometry, out_shape = conv_geometry(shapes_of(c.arrays), **c.attrs)
    y = c.empty(out_shape)
    if numel(out_shape):
        if not k.emulated:
            preload_cublaslt()
        flags = ((ALLOW_TF32 if allow_tf32 else 0) | (0 if bias_epilogue else NO_EPILOGUE)
                 | (TENSOR_CORES if tensor_cores else 0))
        geom = (I64 * len(geometry))(*geometry)
        c.launch("bridge_yolo_conv_bn_leaky", *c.ptrs(*c.arrays, y), geom, c.attrs["epsilon"], c.attrs["alpha"], flags)
    return y


CALLS = (yolo_conv_bn_leaky,)


def conv_inputs(rng, dtype, xs, fs):
    """x, filter and the five [Cout] parameters: random, with |y| near 1 and
    positive variances."""
    cout = fs[3]
    x = rng.normal(size=xs)
    filt = rng.normal(size=fs) / np.sqrt(max(1, fs[0] * fs[1] * fs[2]))  # keeps |y| near 1
    params = [rng.normal(size=cout) * 0.1, rng.normal(size=cout), rng.normal(size=cout) * 0.1,
              rng.normal(size=cout) * 0.1, rng.uniform(0.5, 2.0, size=cout)]
    return [a.astype(dtype) for a in [x, filt, *params]]


def _road(tensor_cores: bool):
    def check(k, dev, rng, example, dtype):
        tf32 = dtype == "tf32"
        arrays = list(example.cast("float32" if tf32 else dtype))
        attrs = example.attrs
        y = dev.get(k.yolo_conv_bn_leaky(*(dev.put(a) for a in arrays), allow_tf32=tf32,
                                         tensor_cores=tensor_cores, **attrs))
        spec = specs.get(OP)
        want = spec.reference(*arrays, **attrs)
        # TF32: float32's bound plus what rounding the operands to TF32 may cost
        extra = tf32_error_bound(*arrays, **spec.resolve(attrs)) if tf32 else 0.0
        return spec.tolerance["float32" if tf32 else dtype].excess(y, want, extra=extra)
    return check


# "tf32": float32 arrays with TF32 products (the float32 rows of the case table)
CHECKS = [("im2col + cuBLASLt", ("float32", "tf32", "float16"), _road(tensor_cores=False)),
          ("tensor cores", ("tf32", "float16"), _road(tensor_cores=True))]
