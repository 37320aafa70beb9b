"""Every bad input docs/ops.md lists raises a clear error naming the op, the argument and
the shapes (or values): eagerly tf.errors.InvalidArgumentError from the kernel (bad
shapes) or ValueError from the wrapper (bad attributes, dtypes), and ValueError
while tracing. The nastiest inputs go straight to the kernels in a subprocess,
which must finish cleanly.

The cases are the specs' bad-input tables (bridge/ops/<op>.py `bad_inputs()`),
plus the few only the TensorFlow wrappers see (TF_ONLY).
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from typing import Dict, Tuple

import numpy as np
import pytest
import tensorflow as tf

from bridge import ops as specs
from bridge import tf_ops


@dataclass
class Case:
    op: str                        # module name, e.g. fused_layer_norm
    id: str
    shapes: Tuple[tuple, ...]      # input shapes (random non-zero data)
    attrs: Dict = field(default_factory=dict)
    arg: str = ""                  # the argument the message must name
    message: str = ""              # words the message must contain (with unknown dims: op and arg only)
    kind: str = "shape"            # shape: the kernel rejects it eagerly; attr: the wrapper always
    dtype: str = "float32"

    def inputs(self):
        rng = np.random.default_rng(0)
        return [np.asarray(rng.uniform(0.5, 1.5, s)).astype(self.dtype) for s in self.shapes]


def _from_tables():
    for spec in specs.all_specs():
        for bad in spec.bad_inputs():
            yield Case(spec.module, bad.id, bad.shapes, bad.attrs, bad.arg, bad.message, bad.kind, bad.dtype)


FLN, DEC = "fused_layer_norm", "yolo_decode"
# What only the TensorFlow wrappers see: dtypes and attribute types.
TF_ONLY = [
    Case(FLN, "int32", ((2, 4), (4,), (4,)), arg="T", message="dtype int32 is not one of", kind="attr", dtype="int32"),
    Case(FLN, "float64", ((2, 4), (4,), (4,)), arg="T", message="dtype float64 is not one of", kind="attr",
         dtype="float64"),
    Case(FLN, "epsilon-not-a-float", ((2, 4), (4,), (4,)), dict(epsilon="tiny"), arg="epsilon",
         message="expected float, got 'tiny'", kind="attr"),
    Case(DEC, "anchors-empty", ((1, 2, 2, 16),), dict(anchors=(), num_classes=3, stride=8), arg="anchors",
         message="needs 2*A values [w0,h0,w1,h1,...], got 0", kind="attr"),
    Case(DEC, "int32", ((1, 2, 2, 16),), dict(anchors=(10, 13, 16, 30), num_classes=3, stride=8), arg="T",
         message="dtype int32 is not one of", kind="attr", dtype="int32"),
]
CASES = list(_from_tables()) + TF_ONLY


def _ids(cases):
    return [f"{c.op}-{c.id}" for c in cases]


def _check_message(case, text, exact_shapes=True):
    assert f"{tf_ops.op_module(case.op).SPEC.name}: argument '{case.arg}'" in text, text
    if case.kind == "shape":
        assert "[" in text, text  # the shapes involved
    if exact_shapes:
        assert case.message in text, f"{case.message!r} missing from: {text}"


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
# raise InvalidArgumentError (or ValueError while tracing) with the words given,
# and the process must exit normally.
NASTY = textwrap.dedent("""
    import numpy as np, tensorflow as tf
    from bridge import tf_ops
    lib = tf_ops.load()
    f32 = lambda *s: np.ones(s, np.float32)
    FLN, DEC, CONV = "FusedLayerNorm: argument ", "YoloDecode: argument ", "YoloConvBnLeaky: argument "
    cases = {
        "fln-gamma-longer": (lambda: lib.fused_layer_norm(f32(2, 4), f32(1 << 16), f32(4)),
                             FLN + "'gamma': must have shape [H]=[4] (the last dim of x [2,4]), got [65536]"),
        "fln-gamma-empty": (lambda: lib.fused_layer_norm(f32(3, 1024), f32(0), f32(1024)),
                            FLN + "'gamma': must have shape [H]=[1024] (the last dim of x [3,1024]), got [0]"),
        "fln-beta-2d": (lambda: lib.fused_layer_norm(f32(2, 4), f32(4), f32(4, 4)),
                        FLN + "'beta': must have shape [H]=[4] (the last dim of x [2,4]), got [4,4]"),
        "fln-scalar": (lambda: lib.fused_layer_norm(np.float32(1), f32(1), f32(1)),
                       FLN + "'x': must have rank >= 1, got a scalar (shape [])"),
        "fln-half-gamma-short": (lambda: lib.fused_layer_norm(f32(2, 9).astype(np.float16), f32(3).astype(np.float16),
                                                              f32(9).astype(np.float16)),
                                 FLN + "'gamma': must have shape [H]=[9] (the last dim of x [2,9]), got [3]"),
        "dec-huge-classes": (lambda: lib.yolo_decode(f32(1, 2, 2, 16), anchors=[1, 1], num_classes=(1 << 62), stride=8),
                             DEC + "'raw': last dim must be A*(5+C) = 1*(5+4611686018427387904) = 4611686018427387909, "
                                   "got [1,2,2,16]"),
        "dec-classes-negative": (lambda: lib.yolo_decode(f32(1, 2, 2, 16), anchors=[1, 1], num_classes=-(1 << 40),
                                                         stride=8),
                                 DEC + "'num_classes': must be >= 1, got -1099511627776"),
        "dec-stride-negative": (lambda: lib.yolo_decode(f32(1, 2, 2, 16), anchors=[10, 13, 16, 30], num_classes=3,
                                                        stride=-(1 << 40)),
                                DEC + "'stride': must be >= 1, got -1099511627776"),
        "dec-anchors-empty": (lambda: lib.yolo_decode(f32(1, 2, 2, 16), anchors=[], num_classes=3, stride=8),
                              DEC + "'anchors': needs 2*A values [w0,h0,w1,h1,...], got 0"),
        "dec-anchors-nan": (lambda: lib.yolo_decode(f32(1, 2, 2, 16), anchors=[float("nan"), 13, 16, 30],
                                                    num_classes=3, stride=8),
                            DEC + "'anchors': must all be positive, got nan in [nan, 13.0, 16.0, 30.0]"),
        "dec-anchors-inf-odd": (lambda: lib.yolo_decode(f32(1, 2, 2, 16), anchors=[float("inf")] * 3, num_classes=3,
                                                        stride=8),
                                DEC + "'anchors': needs 2*A values [w0,h0,w1,h1,...], got 3"),
        "dec-channels-short": (lambda: lib.yolo_decode(f32(1, 3, 3, 15), anchors=[10, 13, 16, 30], num_classes=3,
                                                       stride=8),
                               DEC + "'raw': last dim must be A*(5+C) = 2*(5+3) = 16, got [1,3,3,15]"),
        "dec-rank-1": (lambda: lib.yolo_decode(f32(16), anchors=[10, 13, 16, 30], num_classes=3, stride=8),
                       DEC + "'raw': must have rank 4 [N,H,W,A*(5+C)], got [16]"),
        # N unknown, so TensorFlow's own placeholder check passes and the shape function sees H*W*A
        "dec-trace-huge-grid": (lambda: tf.function(
            lambda r: lib.yolo_decode(r, anchors=[1, 1] * 8, num_classes=1, stride=8)).get_concrete_function(
            tf.TensorSpec([None, 1 << 40, 1 << 40, 48])),
                                DEC + "'raw': H*W*A overflows a tensor dimension, got [?,1099511627776,1099511627776,48]"),
        "conv-cin": (lambda: lib.yolo_conv_bn_leaky(f32(1, 5, 5, 3), f32(3, 3, 4, 8), *[f32(8)] * 5,
                                                    strides=[1, 1, 1, 1], padding="SAME"),
                     CONV + "'filter': Cin mismatch: x [1,5,5,3] has Cin=3, filter [3,3,4,8] has Cin=4"),
        "conv-params-short": (lambda: lib.yolo_conv_bn_leaky(f32(1, 5, 5, 3), f32(3, 3, 3, 8), f32(8), f32(8), f32(2),
                                                             f32(8), f32(8), strides=[1, 1, 1, 1], padding="SAME"),
                              CONV + "'bn_beta': must have shape [Cout]=[8] (filter [3,3,3,8]), got [2]"),
        "conv-stride-zero": (lambda: lib.yolo_conv_bn_leaky(f32(1, 5, 5, 3), f32(3, 3, 3, 8), *[f32(8)] * 5,
                                                            strides=[1, 0, 0, 1], padding="SAME"),
                             CONV + "'strides': must be positive, got [1, 0, 0, 1]"),
        # TensorFlow's own attribute check comes first: int32 attributes
        "conv-stride-huge": (lambda: lib.yolo_conv_bn_leaky(f32(1, 5, 5, 3), f32(3, 3, 3, 8), *[f32(8)] * 5,
                                                            strides=[1, 1 << 62, 1, 1], padding="VALID",
                                                            dilations=[1, 1 << 62, 1, 1]),
                             "Attr strides has value 4611686018427387904 out of range for an int32"),
        "conv-explicit-negative": (lambda: lib.yolo_conv_bn_leaky(f32(1, 5, 5, 3), f32(3, 3, 3, 8), *[f32(8)] * 5,
                                                                  strides=[1, 1, 1, 1], padding="EXPLICIT",
                                                                  explicit_paddings=[0, 0, -9, 0, 0, 0, 0, 0]),
                                   CONV + "'explicit_paddings': must be non-negative, got [0, 0, -9, 0, 0, 0, 0, 0]"),
        "conv-explicit-huge": (lambda: lib.yolo_conv_bn_leaky(f32(1, 5, 5, 3), f32(3, 3, 3, 8), *[f32(8)] * 5,
                                                              strides=[1, 1, 1, 1], padding="EXPLICIT",
                                                              explicit_paddings=[0, 0, 1 << 62, 1 << 62, 0, 0, 0, 0]),
                               "Attr explicit_paddings has value 4611686018427387904 out of range for an int32"),
    }
    for name, (call, want) in cases.items():
        try:
            call()
            print(name, "NO-ERROR", flush=True)
        except (tf.errors.InvalidArgumentError, ValueError) as e:
            text = e.message if isinstance(e, tf.errors.OpError) else str(e)
            print(name, "OK" if want in text else "WRONG-WORDS " + text.splitlines()[0][:300], flush=True)
""")


def test_nastiest_inputs_do_not_crash_the_process():
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    run = subprocess.run([sys.executable, "-c", NASTY], capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, f"exit {run.returncode}\n{run.stdout}\n{run.stderr[-3000:]}"
    lines = dict(line.split(" ", 1) for line in run.stdout.splitlines() if " " in line)
    bad = {k: v for k, v in lines.items() if v != "OK"}
    assert not bad, bad
    assert len(lines) == NASTY.count('": (lambda')
