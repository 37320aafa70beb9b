"""`bridge op new`'s LiteRT kernel (`litert/`): compiled by `--litert-library`'s
machinery into a build of bridge's LiteRT kernels, it serves the op of the spec
it was generated from, reads alpha from the custom options the TFLite converter
writes (the spec's default where a node has none), matches a numpy float64
reference on awkward shapes, refuses a bad bias or dtype by op, argument and
shape, and carries a SavedModel with the op through `bridge export --to tflite
--mode custom`, verified.

One LiteRT build serves the module (`library`); the planted kernel that ignores
alpha is a second one, so its test is slow. The op is registered only in
subprocesses; its kernel's numbers are checked here on one-op .tflite files."""
from __future__ import annotations

import json
import shutil
from dataclasses import replace

import numpy as np
import pytest

pytest.importorskip("ai_edge_litert", reason="ai-edge-litert is not installed (pip install ai-edge-litert)")

from bridge.litert import runtime, team_libraries  # noqa: E402
from bridge.litert.one_op import one_op_model  # noqa: E402
from test_op_new_ort import OP, savedmodel, spec  # noqa: E402,F401 (fixtures on the scaffold conftest shares)
from test_team_litert_library import _build, _outcomes  # noqa: E402 (_build skips where LiteRT cannot build)
from test_team_ops import _bridge  # noqa: E402

# x shapes: odd, size 1, rank 1..4; the empty ones LiteRT's CompiledModel itself refuses
SHAPES = [(7,), (1,), (1, 1), (3, 33), (2, 5, 17), (2, 1, 1, 9)]
ALPHAS = (None, 2.5, -0.75)  # None: the node's options have no alpha


@pytest.fixture(scope="module")
def scaffold(op_new_scaffold):
    """conftest's `bridge op new` folder (its --litert-library line checked there), shared with
    tests/test_op_new_ort.py: one scaffold and one SavedModel for both."""
    return op_new_scaffold


@pytest.fixture(scope="module")
def library(scaffold):
    return _build(scaffold / "litert")


def _one_op(x_shape, bias, options):
    """A lone node of the op: x a runtime input, bias a constant."""
    return one_op_model(OP, [("x", list(x_shape)), ("bias", bias)], ["y"], options)


def _worst_excess(lib, spec) -> float:
    """The largest error over every shape and alpha, as a fraction of the spec's
    float32 tolerance, against y = relu(x + bias) * alpha in float64."""
    tolerance = spec.tolerance["float32"]
    rng = np.random.default_rng(0)
    worst = 0.0
    for alpha in ALPHAS:
        options = {"T": 0} if alpha is None else {"T": 0, "alpha": alpha}
        scale = spec.attr("alpha").default if alpha is None else alpha
        for shape in SHAPES:
            x = (rng.standard_normal(shape) * 3).astype(np.float32)
            bias = rng.standard_normal(shape[-1:]).astype(np.float32)
            model = runtime.Model(_one_op(shape, bias, options), lib=lib)
            try:
                y = model.run({"x": x})["y"]
            finally:
                model.close()
            assert y.shape == x.shape and y.dtype == np.float32, (shape, y.shape, y.dtype)
            want = np.maximum(x.astype(np.float64) + bias, 0.0) * scale
            worst = max(worst, tolerance.excess(y, want))
    return worst


def test_the_scaffolded_kernel_matches_the_float64_reference(library, spec):
    assert spec.attr("alpha").default == 1.0
    assert runtime.served_ops(library)[OP] is None
    assert _worst_excess(library, spec) <= 1.0


def test_an_empty_input_is_refused_clearly_by_litert(library):
    model = runtime.Model(_one_op((1, 4), np.ones(4, np.float32), {"T": 0}), lib=library)
    try:
        with pytest.raises(runtime.LiteRTError, match="has an empty dimension"):
            model.run({"x": np.zeros((0, 4), np.float32)})
    finally:
        model.close()


def test_bad_bias_dtype_or_alpha_names_the_op_the_argument_and_the_shapes(library, tmp_path):
    """Refused at prepare, never run (each in a child process, so a crash is seen as one)."""
    ones = np.ones(5, np.float32)
    files = [_one_op((3, 5), np.ones(4, np.float32), {"T": 0}), _one_op((3, 5), np.ones((1, 5), np.float32), {}),
             _one_op((3, 5), ones, {"T": 1}), _one_op((3, 5), ones, {"T": 0, "alpha": "two"}),
             _one_op((3, 5), ones, {"T": 0, "alpha": 2.0})]
    assert _outcomes(tmp_path, library, (3, 5), files) == [
        f"ERROR: {OP}: argument 'bias': must have shape [C] (the last dim of x [3,5]), got [4]",
        f"ERROR: {OP}: argument 'bias': must have shape [C] (the last dim of x [3,5]), got [1,5]",
        f"ERROR: {OP}: argument 'T': this LiteRT kernel runs float32 (TensorType 0) only, got TensorType 1 "
        "(--mode lowered runs the other types)",
        f"ERROR: {OP}: argument 'alpha': must be a float, got string",
        "RAN",  # the good file they differ from
    ]


def test_what_the_template_cannot_express_is_refused_by_name(spec):
    from bridge.commands import _op_litert, _op_ort
    with pytest.raises(_op_ort.TemplateError, match=rf"{OP}: bridge's LiteRT kernels run float32 only"):
        _op_litert.kernel_cc(replace(spec, dtypes=("float16",)))
    with pytest.raises(_op_ort.TemplateError, match=rf"{OP}: attribute 'alpha' of type string"):
        _op_litert.kernel_cc(replace(spec, attrs=(replace(spec.attrs[0], type="string", default="a"),)))


def _export(scaffold, saved, out, litert):
    return _bridge("export", saved, "--to", "tflite", "--mode", "custom", "-o", out, "--input-shape", "x:2,3,5",
                   "--op-spec", scaffold / "fused_bias_relu.py", "--op-library", scaffold,
                   team_libraries.FLAG, litert, "--json")


def test_export_custom_mode_is_verified_with_the_scaffolded_kernel(scaffold, library, savedmodel, tmp_path):
    """The converter's custom options carry the TensorFlow attribute (alpha=2.5) the kernel reads."""
    done = _export(scaffold, savedmodel, tmp_path / "m.tflite", scaffold / "litert")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["details"]["custom_ops"] == {OP: [{"T": 0, "alpha": 2.5}]}, result["details"]
    assert result["not_verified"] is None and result["checks"], result
    assert all(c["status"] == "pass" for c in result["checks"]), result["checks"]


IGNORES_ALPHA = ("y[i] = (z > 0.f ? z : 0.f) * alpha;", "y[i] = z > 0.f ? z : 0.f;")


@pytest.mark.slow
def test_a_kernel_that_ignores_alpha_fails_the_numeric_check_and_the_export(scaffold, spec, savedmodel, tmp_path):
    folder = tmp_path / "litert"
    shutil.copytree(scaffold / "litert", folder)
    source = folder / "fused_bias_relu.cc"
    text = source.read_text()
    assert text.count(IGNORES_ALPHA[0]) == 1, "the planted bug no longer matches the kernel"
    source.write_text(text.replace(*IGNORES_ALPHA))
    assert _worst_excess(_build(folder), spec) > 1.0
    done = _export(scaffold, savedmodel, tmp_path / "m.tflite", folder)
    assert done.returncode != 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert any(c["status"] != "pass" for c in json.loads(done.stdout)["checks"]), done.stdout[-3000:]
