"""Every bad input ops.md lists raises a clear error naming the op, the argument and
the shapes (or values): eagerly tf.errors.InvalidArgumentError from the kernel (bad
shapes) or ValueError from the wrapper (bad attributes, dtypes), and ValueError
while tracing. The nastiest inputs go straight to the kernels in a subprocess,
which must finish cleanly.

Adding an op's cases: append `Case`s to CASES (one per bad input).
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from typing import Callable, Dict, Tuple

import numpy as np
import pytest
import tensorflow as tf

from bridge import tf_ops


@dataclass
class Case:
    op: str                        # module name, e.g. fused_layer_norm
    id: str
    shapes: Tuple[tuple, ...]      # input shapes (random non-zero data)
    attrs: Dict = field(default_factory=dict)
    arg: str = ""                  # the argument the message must name
    mentions: Tuple[str, ...] = ()  # shapes or values the message must show
    kind: str = "shape"            # shape: the kernel rejects it eagerly; attr: the wrapper always
    dtype: str = "float32"
    fn: Callable = None            # for cases that call the op in another way

    def inputs(self):
        rng = np.random.default_rng(0)
        return [np.asarray(rng.uniform(0.5, 1.5, s)).astype(self.dtype) for s in self.shapes]


FLN = "fused_layer_norm"
DEC = "yolo_decode"
CONV = "yolo_conv_bn_leaky"
DEC_ATTRS = dict(anchors=(10, 13, 16, 30), num_classes=3, stride=8)  # A=2, C=3: 16 channels
CONV_PARAMS = ((8,),) * 5  # conv_bias, bn_gamma, bn_beta, bn_mean, bn_variance

CASES = [
    Case(FLN, "gamma-size", ((2, 4), (3,), (4,)), arg="gamma", mentions=("[2,4]", "[3]")),
    Case(FLN, "beta-size", ((2, 3, 5), (5,), (6,)), arg="beta", mentions=("[2,3,5]", "[6]")),
    Case(FLN, "gamma-rank", ((2, 4), (1, 4), (4,)), arg="gamma", mentions=("[2,4]", "[1,4]")),
    Case(FLN, "beta-scalar", ((2, 4), (4,), ()), arg="beta", mentions=("[2,4]", "[]")),
    Case(FLN, "gamma-empty", ((2, 4), (0,), (4,)), arg="gamma", mentions=("[2,4]", "[0]")),
    Case(FLN, "x-scalar", ((), (1,), (1,)), arg="x", mentions=("[]",)),
    Case(FLN, "int32", ((2, 4), (4,), (4,)), arg="T", mentions=("int32",), kind="attr", dtype="int32"),
    Case(FLN, "float64", ((2, 4), (4,), (4,)), arg="T", mentions=("float64",), kind="attr", dtype="float64"),
    Case(FLN, "epsilon-not-a-float", ((2, 4), (4,), (4,)), dict(epsilon="tiny"), arg="epsilon",
         mentions=("tiny",), kind="attr"),

    Case(DEC, "last-dim", ((1, 2, 2, 15),), DEC_ATTRS, arg="raw", mentions=("[1,2,2,15]", "16")),
    Case(DEC, "last-dim-classes", ((1, 2, 2, 16),), dict(DEC_ATTRS, num_classes=4), arg="raw",
         mentions=("[1,2,2,16]", "18")),
    Case(DEC, "rank-3", ((2, 2, 16),), DEC_ATTRS, arg="raw", mentions=("[2,2,16]",)),
    Case(DEC, "rank-5", ((1, 1, 2, 2, 16),), DEC_ATTRS, arg="raw", mentions=("[1,1,2,2,16]",)),
    Case(DEC, "anchors-odd", ((1, 2, 2, 16),), dict(DEC_ATTRS, anchors=(10, 13, 16)), arg="anchors",
         mentions=("3",), kind="attr"),
    Case(DEC, "anchors-empty", ((1, 2, 2, 16),), dict(DEC_ATTRS, anchors=()), arg="anchors", mentions=("0",),
         kind="attr"),
    Case(DEC, "anchors-negative", ((1, 2, 2, 16),), dict(DEC_ATTRS, anchors=(10, -13, 16, 30)), arg="anchors",
         mentions=("-13",), kind="attr"),
    Case(DEC, "anchors-zero", ((1, 2, 2, 16),), dict(DEC_ATTRS, anchors=(10, 13, 0, 30)), arg="anchors",
         mentions=("0",), kind="attr"),
    Case(DEC, "num-classes-0", ((1, 2, 2, 10),), dict(DEC_ATTRS, num_classes=0), arg="num_classes",
         mentions=("0",), kind="attr"),
    Case(DEC, "stride-0", ((1, 2, 2, 16),), dict(DEC_ATTRS, stride=0), arg="stride", mentions=("0",), kind="attr"),
    Case(DEC, "stride-negative", ((1, 2, 2, 16),), dict(DEC_ATTRS, stride=-8), arg="stride", mentions=("-8",),
         kind="attr"),
    Case(DEC, "int32", ((1, 2, 2, 16),), DEC_ATTRS, arg="T", mentions=("int32",), kind="attr", dtype="int32"),

    Case(CONV, "x-rank", ((5, 5, 3), (3, 3, 3, 8), *CONV_PARAMS), arg="x", mentions=("[5,5,3]",)),
    Case(CONV, "filter-rank", ((1, 5, 5, 3), (3, 3, 3), *CONV_PARAMS), arg="filter", mentions=("[3,3,3]",)),
    Case(CONV, "cin", ((1, 5, 5, 3), (3, 3, 4, 8), *CONV_PARAMS), arg="filter", mentions=("[1,5,5,3]", "[3,3,4,8]")),
    Case(CONV, "bias-size", ((1, 5, 5, 3), (3, 3, 3, 8), (7,), *CONV_PARAMS[1:]), arg="conv_bias",
         mentions=("[7]",)),
    Case(CONV, "variance-rank", ((1, 5, 5, 3), (3, 3, 3, 8), *CONV_PARAMS[:4], (1, 8)), arg="bn_variance",
         mentions=("[1,8]",)),
    Case(CONV, "strides-3", ((1, 5, 5, 3), (3, 3, 3, 8), *CONV_PARAMS), dict(strides=(1, 2, 2)), arg="strides",
         kind="attr"),
    Case(CONV, "strides-batch", ((1, 5, 5, 3), (3, 3, 3, 8), *CONV_PARAMS), dict(strides=(2, 1, 1, 1)),
         arg="strides", kind="attr"),
    Case(CONV, "strides-zero", ((1, 5, 5, 3), (3, 3, 3, 8), *CONV_PARAMS), dict(strides=(1, 0, 1, 1)),
         arg="strides", kind="attr"),
    Case(CONV, "dilations-channel", ((1, 5, 5, 3), (3, 3, 3, 8), *CONV_PARAMS), dict(dilations=(1, 1, 1, 2)),
         arg="dilations", kind="attr"),
    Case(CONV, "padding", ((1, 5, 5, 3), (3, 3, 3, 8), *CONV_PARAMS), dict(padding="FULL"), arg="padding",
         mentions=("FULL",), kind="attr"),
    Case(CONV, "explicit-without-8", ((1, 5, 5, 3), (3, 3, 3, 8), *CONV_PARAMS),
         dict(padding="EXPLICIT", explicit_paddings=(0, 0, 1, 1)), arg="explicit_paddings", kind="attr"),
]


def _ids(cases):
    return [f"{c.op}-{c.id}" for c in cases]


def _check_message(case, text, exact_shapes=True):
    assert tf_ops.op_module(case.op).SPEC.name in text, text
    assert f"'{case.arg}'" in text, text
    if case.kind == "shape":
        assert "[" in text, text  # the shapes involved
    for m in case.mentions if exact_shapes else ():
        assert m in text, f"{m!r} missing from: {text}"


@pytest.mark.parametrize("case", CASES, ids=_ids(CASES))
def test_eager(case):
    fn = getattr(tf_ops, case.op)
    error = tf.errors.InvalidArgumentError if case.kind == "shape" else ValueError
    with pytest.raises(error) as e:
        fn(*case.inputs(), **case.attrs)
    _check_message(case, e.value.message if case.kind == "shape" else str(e.value))


@pytest.mark.parametrize("case", CASES, ids=_ids(CASES))
def test_trace_time(case):
    fn = getattr(tf_ops, case.op)
    signature = [tf.TensorSpec(x.shape, x.dtype) for x in case.inputs()]
    with pytest.raises(ValueError) as e:
        tf.function(lambda *a: fn(*a, **case.attrs)).get_concrete_function(*signature)
    _check_message(case, str(e.value))


@pytest.mark.parametrize("case", [c for c in CASES if c.kind == "shape"],
                         ids=_ids([c for c in CASES if c.kind == "shape"]))
def test_trace_time_with_unknown_leading_dims(case):
    """Only the dims a check needs are known; the shape function still catches it."""
    inputs = case.inputs()
    signature = [tf.TensorSpec([None] * (x.ndim - 1) + list(x.shape[-1:]) if x.ndim else [], x.dtype)
                 for x in inputs]
    fn = getattr(tf_ops, case.op)
    try:
        concrete = tf.function(lambda *a: fn(*a, **case.attrs)).get_concrete_function(*signature)
    except ValueError as e:
        _check_message(case, str(e), exact_shapes=False)  # the shapes now print with ? dims
        return
    # The mismatch involved a dim now unknown: the kernel must catch it at run time.
    with pytest.raises(tf.errors.InvalidArgumentError) as e:
        concrete(*inputs)
    _check_message(case, e.value.message)


# Straight to the kernels (no Python checks in front), in a subprocess: each must
# raise InvalidArgumentError and the process must exit normally.
NASTY = textwrap.dedent("""
    import numpy as np, tensorflow as tf
    from bridge import tf_ops
    lib = tf_ops.load()
    f32 = lambda *s: np.ones(s, np.float32)
    cases = {
        "fln-gamma-longer": lambda: lib.fused_layer_norm(f32(2, 4), f32(1 << 16), f32(4)),
        "fln-gamma-empty": lambda: lib.fused_layer_norm(f32(3, 1024), f32(0), f32(1024)),
        "fln-beta-2d": lambda: lib.fused_layer_norm(f32(2, 4), f32(4), f32(4, 4)),
        "fln-scalar": lambda: lib.fused_layer_norm(np.float32(1), f32(1), f32(1)),
        "fln-half-gamma-short": lambda: lib.fused_layer_norm(f32(2, 9).astype(np.float16),
                                                             f32(3).astype(np.float16), f32(9).astype(np.float16)),
        "dec-huge-classes": lambda: lib.yolo_decode(f32(1, 2, 2, 16), anchors=[1, 1], num_classes=(1 << 62),
                                                    stride=8),
        "dec-classes-negative": lambda: lib.yolo_decode(f32(1, 2, 2, 16), anchors=[1, 1], num_classes=-(1 << 40),
                                                        stride=8),
        "dec-stride-negative": lambda: lib.yolo_decode(f32(1, 2, 2, 16), anchors=[10, 13, 16, 30],
                                                       num_classes=3, stride=-(1 << 40)),
        "dec-anchors-empty": lambda: lib.yolo_decode(f32(1, 2, 2, 16), anchors=[], num_classes=3, stride=8),
        "dec-anchors-nan": lambda: lib.yolo_decode(f32(1, 2, 2, 16), anchors=[float("nan"), 13, 16, 30],
                                                   num_classes=3, stride=8),
        "dec-anchors-inf-odd": lambda: lib.yolo_decode(f32(1, 2, 2, 16), anchors=[float("inf")] * 3,
                                                       num_classes=3, stride=8),
        "dec-channels-short": lambda: lib.yolo_decode(f32(1, 3, 3, 15), anchors=[10, 13, 16, 30], num_classes=3,
                                                      stride=8),
        "dec-rank-1": lambda: lib.yolo_decode(f32(16), anchors=[10, 13, 16, 30], num_classes=3, stride=8),
        "dec-trace-huge-grid": lambda: tf.function(
            lambda r: lib.yolo_decode(r, anchors=[1, 1] * 8, num_classes=1, stride=8)).get_concrete_function(
            tf.TensorSpec([1, 1 << 40, 1 << 40, 48])),
        "conv-cin": lambda: lib.yolo_conv_bn_leaky(f32(1, 5, 5, 3), f32(3, 3, 4, 8), *[f32(8)] * 5,
                                                   strides=[1, 1, 1, 1], padding="SAME"),
        "conv-params-short": lambda: lib.yolo_conv_bn_leaky(f32(1, 5, 5, 3), f32(3, 3, 3, 8), f32(8), f32(8), f32(2),
                                                            f32(8), f32(8), strides=[1, 1, 1, 1], padding="SAME"),
        "conv-stride-zero": lambda: lib.yolo_conv_bn_leaky(f32(1, 5, 5, 3), f32(3, 3, 3, 8), *[f32(8)] * 5,
                                                           strides=[1, 0, 0, 1], padding="SAME"),
        "conv-stride-huge": lambda: lib.yolo_conv_bn_leaky(f32(1, 5, 5, 3), f32(3, 3, 3, 8), *[f32(8)] * 5,
                                                           strides=[1, 1 << 62, 1, 1], padding="VALID",
                                                           dilations=[1, 1 << 62, 1, 1]),
        "conv-explicit-negative": lambda: lib.yolo_conv_bn_leaky(f32(1, 5, 5, 3), f32(3, 3, 3, 8), *[f32(8)] * 5,
                                                                 strides=[1, 1, 1, 1], padding="EXPLICIT",
                                                                 explicit_paddings=[0, 0, -9, 0, 0, 0, 0, 0]),
        "conv-explicit-huge": lambda: lib.yolo_conv_bn_leaky(f32(1, 5, 5, 3), f32(3, 3, 3, 8), *[f32(8)] * 5,
                                                             strides=[1, 1, 1, 1], padding="EXPLICIT",
                                                             explicit_paddings=[0, 0, 1 << 62, 1 << 62, 0, 0, 0, 0]),
    }
    for name, call in cases.items():
        try:
            call()
            print(name, "NO-ERROR", flush=True)
        except (tf.errors.InvalidArgumentError, ValueError) as e:
            print(name, "OK", type(e).__name__, flush=True)
""")


def test_nastiest_inputs_do_not_crash_the_process():
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    run = subprocess.run([sys.executable, "-c", NASTY], capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, f"exit {run.returncode}\n{run.stdout}\n{run.stderr[-3000:]}"
    lines = dict(line.split(" ", 1) for line in run.stdout.splitlines() if " " in line)
    bad = {k: v for k, v in lines.items() if not v.startswith("OK")}
    assert not bad, bad
    assert len(lines) == NASTY.count('": lambda')
