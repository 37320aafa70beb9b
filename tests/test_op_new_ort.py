"""`bridge op new`'s onnxruntime kernel (`ort/`): it builds as written, serves the
domain, tensors, element types and attribute default of the spec it was
generated from, matches a numpy float64 reference on awkward shapes, refuses bad
input by op, argument and shape, and carries the op over `bridge parity`'s ort
road. The op is registered only in subprocesses; its kernel's numbers are
checked here on plain onnxruntime."""
from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest

from bridge import native
from test_team_ops import _bridge

OP = "FusedBiasRelu"
# x shapes: odd, size 1, rank 1..4, empty batch, empty channel axis
SHAPES = [(7,), (1,), (1, 1), (3, 33), (2, 5, 17), (2, 1, 1, 9), (0, 4), (4, 0), (3, 0, 5)]


@pytest.fixture(scope="module")
def scaffold(op_new_scaffold):
    """The files as test_team_ops's scaffold has them: the two share one TensorFlow build
    (conftest's, shared with tests/test_op_new_litert.py)."""
    return op_new_scaffold


def _scaffold(folder, *args, with_stdout=False):
    done = _bridge("op", "new", OP, *args, "-o", folder)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"--ort-library {folder / 'ort'}" in done.stdout, done.stdout
    return (folder, done.stdout) if with_stdout else folder


@pytest.fixture(scope="module")
def spec(scaffold):
    """The scaffold's spec, loaded without registering it in this process."""
    m = importlib.util.spec_from_file_location("scratch_fused_bias_relu", scaffold / "fused_bias_relu.py")
    module = importlib.util.module_from_spec(m)
    m.loader.exec_module(module)
    return module.SPEC


def _build(folder):
    try:
        return native.ort_library_build(folder).library(quiet=True)
    except native.BuildError as e:
        pytest.skip(f"the onnxruntime headers or a compiler are missing here: {str(e).splitlines()[0]}")


@pytest.fixture(scope="module")
def library(scaffold):
    return _build(scaffold / "ort")


def _session(lib, dtype, domain="com.example", **attrs):
    """A lone node of the op on plain onnxruntime with `lib`, no function to fall back on."""
    import onnxruntime as ort
    from onnx import helper
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    node = helper.make_node(OP, ["x", "bias"], ["y"], domain=domain, **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", elem, None),
                                            helper.make_tensor_value_info("bias", elem, None)],
                              [helper.make_tensor_value_info("y", elem, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(domain, 1)],
                              ir_version=8)
    so = ort.SessionOptions()
    so.register_custom_ops_library(str(lib))
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _worst_excess(lib, spec) -> float:
    """The largest error over every shape, dtype and alpha (none: the default), as a
    fraction of the spec's tolerance, against y = relu(x + bias) * alpha in float64."""
    rng = np.random.default_rng(0)
    worst = 0.0
    for dtype in spec.dtypes:
        for alpha in (None, 2.5, -0.75):
            sess = _session(lib, dtype, **({} if alpha is None else {"alpha": alpha}))
            scale = spec.onnx_attr("alpha").default if alpha is None else alpha
            for shape in SHAPES:
                x = (rng.standard_normal(shape) * 3).astype(dtype)
                bias = rng.standard_normal(shape[-1:]).astype(dtype)
                (y,) = sess.run(None, {"x": x, "bias": bias})
                assert y.shape == x.shape and y.dtype == x.dtype, (shape, dtype, y.shape, y.dtype)
                want = np.maximum(x.astype(np.float64) + bias, 0.0) * scale
                worst = max(worst, spec.tolerance[dtype].excess(y, want))
    return worst


def test_the_scaffolded_kernel_matches_the_float64_reference(library, spec):
    assert spec.dtypes == ("float32", "float16") and spec.onnx_attr("alpha").default == 1.0
    assert _worst_excess(library, spec) <= 1.0


def test_the_scaffolded_kernel_refuses_bad_input_by_op_argument_and_shape(library):
    from onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument, RuntimeException
    sess = _session(library, "float32")
    for bias, got in ((np.ones(4, np.float32), r"\[4\]"), (np.ones((1, 5), np.float32), r"\[1,5\]")):
        with pytest.raises(InvalidArgument, match=rf"{OP}: argument 'bias': must have shape \[C\] \(the last dim of x "
                                            rf"\[3,5\]\), got {got}"):
            sess.run(None, {"x": np.ones((3, 5), np.float32), "bias": bias})
    with pytest.raises(InvalidArgument, match=rf"{OP}: argument 'x': must have rank >= 1, got a scalar"):
        sess.run(None, {"x": np.array(1, np.float32), "bias": np.ones(1, np.float32)})
    with pytest.raises(RuntimeException, match=rf"{OP}: argument 'alpha': must be a float"):  # at session start
        _session(library, "float32", alpha=2)  # an int attribute is not taken for the default


def test_the_kernel_serves_the_domain_it_was_scaffolded_with(tmp_path):
    from onnxruntime.capi.onnxruntime_pybind11_state import Fail
    lib = _build(_scaffold(tmp_path / "op", "--domain", "org.team.ops") / "ort")
    (y,) = _session(lib, "float32", domain="org.team.ops", alpha=2.0).run(
        None, {"x": np.array([[-1.0, 0.5]], np.float32), "bias": np.array([0.25, 0.25], np.float32)})
    np.testing.assert_array_equal(y, [[0.0, 1.5]])
    with pytest.raises(Fail, match="is not a registered function/op"):
        _session(lib, "float32")


def test_what_the_template_cannot_express_is_refused_by_name(spec):
    from bridge.commands import _op_ort
    with pytest.raises(_op_ort.TemplateError, match=rf"{OP}: dtype float64"):
        _op_ort.kernel_cc(replace(spec, dtypes=("float32", "float64")))
    with pytest.raises(_op_ort.TemplateError, match=rf"{OP}: attribute 'alpha' of type string"):
        _op_ort.kernel_cc(replace(spec, onnx_attrs=(replace(spec.onnx_attrs[0], type="string", default="a"),)))


def _planted(scaffold, tmp_path, old, new):
    """The scaffold's ort/ folder, copied apart, with one line of its kernel changed."""
    folder = tmp_path / "ort"
    shutil.copytree(scaffold / "ort", folder)
    source = folder / "fused_bias_relu_ort.cc"
    text = source.read_text()
    assert text.count(old) == 1, f"the planted bug no longer matches: {old!r}"
    source.write_text(text.replace(old, new))
    return _build(folder)


IGNORES_ALPHA = ("Store((z > 0.f ? z : 0.f) * attrs.alpha, yp + i);", "Store(z > 0.f ? z : 0.f, yp + i);")


def test_a_kernel_that_ignores_alpha_fails_the_numeric_check(scaffold, spec, tmp_path):
    assert _worst_excess(_planted(scaffold, tmp_path, *IGNORES_ALPHA), spec) > 1.0


SAVEDMODEL_SCRIPT = """
import sys, numpy as np, tensorflow as tf
from bridge import native
lib = tf.load_op_library(str(native.op_library_build(sys.argv[1]).library(quiet=True)))
class M(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([2, 3, 5], tf.float32, name="x")])
    def __call__(self, x):
        return {"y": lib.fused_bias_relu(x * 1.5, tf.constant(np.linspace(-1, 1, 5, dtype="float32")), alpha=2.5)}
m = M()
tf.saved_model.save(m, sys.argv[2], signatures={"serving_default": m.__call__})
"""


def _parity(scaffold, saved, ort_library, report):
    return _bridge("parity", saved, "--runtimes", "tf,ort", "--input-shape", "x:2,3,5", "--op-spec",
                   scaffold / "fused_bias_relu.py", "--op-library", scaffold, "--ort-library", ort_library,
                   "--json", report)


def make_savedmodel(scaffold, saved):
    made = subprocess.run([sys.executable, "-c", SAVEDMODEL_SCRIPT, str(scaffold), str(saved)], capture_output=True,
                          text=True, timeout=600)
    assert made.returncode == 0, made.stderr[-3000:]
    return saved


@pytest.fixture(scope="module")
def savedmodel(op_new_savedmodel):
    """conftest's, made once for this module and tests/test_op_new_litert.py."""
    return op_new_savedmodel


def test_parity_runs_the_scaffolded_op_on_its_ort_kernel(scaffold, library, savedmodel, tmp_path):
    done = _parity(scaffold, savedmodel, scaffold / "ort", tmp_path / "parity.json")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = {r["name"]: r for r in json.loads((tmp_path / "parity.json").read_text())["runtimes"]}
    assert "ort" in rows and all(o["status"] == "pass" for o in rows["ort"]["outputs"].values()), rows.get("ort")


@pytest.mark.slow
def test_parity_fails_with_a_wrong_scaffolded_kernel(scaffold, savedmodel, tmp_path):
    """With alpha ignored in the kernel, `ort` fails: the row ran the kernel, not the body."""
    broken = _planted(scaffold, tmp_path, *IGNORES_ALPHA)
    done = _parity(scaffold, savedmodel, broken, tmp_path / "parity.json")
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert "FAIL" in done.stdout
