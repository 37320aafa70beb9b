"""A team op written as one C++ kernel core (examples/custom_op/fused_bias_gelu/
kernel.h, bridge's op ABI) runs on TensorFlow, onnxruntime and LiteRT through
bridge's generic hosts: each kernel against the numpy float64 reference of the
spec on awkward shapes, and a bad bias refused in the same words everywhere
(TensorFlow's shape function too). The team's own kernels beside it
(`--op-library examples/custom_op` and its ort/, litert/ folders) keep working:
tests/test_team_*.py."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from bridge import native, ops
from test_team_ops import EXAMPLE, SPEC_FILE, _gelu
from test_team_ops import _spec_in_a_scratch_registry as _scratch_spec
from test_team_ort_library import _session  # a lone com.example::FusedBiasGelu node

CORE = EXAMPLE / "fused_bias_gelu"
# x shapes: odd, size 1, rank 1..4, and empty ones (LiteRT's CompiledModel takes no empty tensor)
SHAPES = [(7,), (1,), (1, 1), (3, 33), (2, 5, 17), (2, 1, 1, 9), (64, 1031)]
EMPTY = [(0, 4), (4, 0), (3, 0, 5)]
BAD_BIAS = (r"FusedBiasGelu: argument 'bias': must have shape \[C\]=\[5\] \(the last dim of x \[3,5\]\), "
            r"got \[4\]")


@pytest.fixture(scope="module")
def spec():
    """The team spec registered for the builds only (the other tests list exactly bridge's own ops)."""
    s = _scratch_spec()
    ops.SPECS[s.name], ops.ORIGINS[s.name] = s, str(SPEC_FILE)
    yield s
    ops.SPECS.pop(s.name, None)
    ops.ORIGINS.pop(s.name, None)


def _library(spec, runtime):
    try:
        return native.core_build(CORE, runtime).library(quiet=True)
    except native.BuildError as e:
        pytest.skip(f"the {runtime} host does not build here: {str(e).splitlines()[0]}")


def _inputs(rng, shape, dtype):
    x = (rng.standard_normal(shape) * 3).astype(dtype)  # |z| up to ~10: both tails and the middle
    return x, rng.standard_normal(shape[-1:]).astype(dtype)


def test_the_core_folder_is_told_apart_from_the_team_cmake_folders():
    assert native.is_core_folder(CORE)
    assert not native.is_core_folder(EXAMPLE) and not native.is_core_folder(EXAMPLE / "ort")


def test_a_core_without_its_spec_is_refused_naming_the_fix():
    with pytest.raises(native.BuildError, match=r"module 'fused_bias_gelu'.*--op-spec FILE"):
        native.core_build(CORE, "ort")


def test_onnxruntime(spec):
    from onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument
    lib = _library(spec, "ort")
    rng = np.random.default_rng(0)
    for dtype in spec.dtypes:
        sess = _session(lib, dtype)
        for shape in SHAPES + EMPTY:
            x, bias = _inputs(rng, shape, dtype)
            (y,) = sess.run(None, {"x": x, "bias": bias})
            assert y.shape == x.shape and y.dtype == x.dtype, (shape, dtype)
            assert spec.tolerance[dtype].excess(y, _gelu(x.astype(np.float64) + bias)) <= 1, (shape, dtype)
    assert native.ort_library_build(CORE).library(quiet=True) == lib  # what --ort-library DIR builds
    with pytest.raises(InvalidArgument, match=BAD_BIAS):
        _session(lib, "float32").run(None, {"x": np.ones((3, 5), np.float32), "bias": np.ones(4, np.float32)})


# TensorFlow in a child process: the team's --op-library (test_team_ops) registers
# the same op name in the test process.
TF_CHILD = r"""
import json, math, sys
import numpy as np
import tensorflow as tf
lib = tf.load_op_library(sys.argv[1])
shapes = json.loads(sys.argv[2])
rng = np.random.default_rng(0)
erf = np.vectorize(math.erf, otypes=[np.float64])
worst = {}
for dtype, tol in (("float32", 1e-5), ("float16", 3e-3)):
    for shape in shapes:
        x = (rng.standard_normal(shape) * 3).astype(dtype)
        b = rng.standard_normal(shape[-1:]).astype(dtype)
        y = lib.fused_bias_gelu(x, b).numpy()
        assert y.shape == x.shape and y.dtype == x.dtype, (shape, dtype)
        z = x.astype(np.float64) + b
        ref = 0.5 * z * (1.0 + erf(z / math.sqrt(2.0)))
        err = np.abs(y - ref) / np.maximum(tol * np.maximum(1.0, np.abs(ref)), 1e-300)
        worst[dtype] = max(worst.get(dtype, 0.0), float(np.max(err)) if y.size else 0.0)
errors = {}
try:
    lib.fused_bias_gelu(np.ones((3, 5), np.float32), np.ones(4, np.float32))
except tf.errors.InvalidArgumentError as e:
    errors["eager"] = e.message
try:
    tf.function(lambda x: lib.fused_bias_gelu(x, tf.ones([4])),
                input_signature=[tf.TensorSpec([None, 5], tf.float32)]).get_concrete_function()
except ValueError as e:
    errors["graph"] = str(e)
print(json.dumps({"worst": worst, "errors": errors}))
"""


def test_tensorflow(spec):
    pytest.importorskip("tensorflow")
    lib = _library(spec, "tf")
    assert native.op_library_build(CORE).library(quiet=True) == lib  # what --op-library DIR builds
    done = subprocess.run([sys.executable, "-c", TF_CHILD, str(lib), json.dumps(SHAPES + EMPTY)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["worst"]["float32"] <= 1 and got["worst"]["float16"] <= 1, got["worst"]
    import re
    assert re.search(BAD_BIAS, got["errors"]["eager"]), got["errors"]
    assert re.search(BAD_BIAS.replace(r"x \[3,5\]", r"x \[\?,5\]"), got["errors"]["graph"]), got["errors"]


def test_litert(spec):
    pytest.importorskip("ai_edge_litert", reason="ai-edge-litert is not installed")
    from bridge.litert import runtime, team_libraries
    from bridge.litert.one_op import one_op_model
    lib = _library(spec, "litert")
    try:  # what --litert-library DIR does: this build, self-tested, serving the team's op
        assert team_libraries.add(CORE) == ["FusedBiasGelu"] and runtime.library() == lib
    finally:
        team_libraries.forget()
    rng = np.random.default_rng(0)
    for shape in SHAPES:
        x, bias = _inputs(rng, shape, np.float32)
        model = runtime.Model(one_op_model("FusedBiasGelu", [("x", list(shape)), ("bias", bias)], ["y"], {"T": 0}),
                              lib=lib)
        try:
            y = model.run({"x": x})["y"]
        finally:
            model.close()
        assert y.shape == x.shape and spec.tolerance["float32"].excess(y, _gelu(x.astype(np.float64) + bias)) <= 1
    with pytest.raises(runtime.LiteRTError, match=BAD_BIAS):
        model = runtime.Model(one_op_model("FusedBiasGelu", [("x", [3, 5]), ("bias", np.ones(4, np.float32))],
                                           ["y"], {"T": 0}), lib=lib)
        try:
            model.run({"x": np.ones((3, 5), np.float32)})
        finally:
            model.close()
