"""A team's own LiteRT kernel (examples/custom_op/litert: FusedBiasGelu written
against litert/native/common.h) through `--litert-library`: compiled into
a build of bridge's LiteRT kernels of its own, its outputs against the numpy
float64 reference of the spec (one-op .tflite files), a bad bias named, and the
TFLite custom-op road of a SavedModel verified by `bridge export` and `bridge
parity`'s tflite-custom row; without the flag both say the op is not served and
name the flag.

One extra LiteRT build serves the module (the `library` fixture); the planted
wrong kernel is a second one, so its tests are slow. The team op is registered
only in subprocesses (the other tests list exactly bridge's own ops)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("ai_edge_litert", reason="ai-edge-litert is not installed (pip install ai-edge-litert)")

from bridge import native  # noqa: E402
from bridge.litert import runtime, team_libraries  # noqa: E402
from bridge.litert.one_op import one_op_model  # noqa: E402
from test_team_ops import EXAMPLE, SPEC_FILE, _bridge, _gelu, savedmodel  # noqa: E402,F401 (a fixture)
from test_team_ops import _spec_in_a_scratch_registry as _spec  # noqa: E402

LITERT_FOLDER = EXAMPLE / "litert"
# x shapes: odd, size 1, rank 1..4; the empty ones LiteRT's CompiledModel itself refuses
SHAPES = [(7,), (1,), (1, 1), (3, 33), (2, 5, 17), (2, 1, 1, 9), (64, 1031)]
EMPTY = [(0, 4), (4, 0), (3, 0, 5)]
SHAPE_ARGS = ("--input-shape", "tokens:2,5,32")
TEAM = ("--op-spec", SPEC_FILE, "--op-library", EXAMPLE)


def _build(folder):
    try:
        return native.litert_library_build(folder).library(quiet=True)
    except native.BuildError as e:
        pytest.skip(f"bridge's LiteRT kernels do not build here (ai-edge-litert or a compiler is missing): "
                    f"{str(e).splitlines()[0]}")


@pytest.fixture(scope="module")
def library():
    return _build(LITERT_FOLDER)


def _one_op(x_shape, bias, options=None):
    """A lone FusedBiasGelu CUSTOM node: x a runtime input, bias a constant."""
    return one_op_model("FusedBiasGelu", [("x", list(x_shape)), ("bias", bias)], ["y"],
                        {"T": 0} if options is None else options)


def _errors(lib):
    """{shape: max |y - reference|} and the worst error as a fraction of the spec's float32 tolerance."""
    tolerance = _spec().tolerance["float32"]
    rng = np.random.default_rng(0)
    errors, worst = {}, 0.0
    for shape in SHAPES:
        x = (rng.standard_normal(shape) * 3).astype(np.float32)  # |z| up to ~10: both tails and the middle
        bias = rng.standard_normal(shape[-1:]).astype(np.float32)
        model = runtime.Model(_one_op(shape, bias), lib=lib)
        try:
            y = model.run({"x": x})["y"]
        finally:
            model.close()
        assert y.shape == x.shape and y.dtype == np.float32, (shape, y.shape, y.dtype)
        ref = _gelu(x.astype(np.float64) + bias)  # of the float32 values the kernel sees
        errors[shape] = float(np.max(np.abs(y - ref)))
        worst = max(worst, tolerance.excess(y, ref))
    return errors, worst


def test_the_kernel_matches_the_float64_reference_on_awkward_shapes(library):
    errors, worst = _errors(library)
    print("max |error| per shape:", errors)
    assert worst <= 1.0, errors


@pytest.mark.parametrize("shape", EMPTY, ids=str)
def test_an_empty_input_is_refused_clearly_by_litert(library, shape):
    model = runtime.Model(_one_op([max(d, 1) for d in shape], np.ones(shape[-1:], np.float32)), lib=library)
    try:
        with pytest.raises(runtime.LiteRTError, match=r"has an empty dimension, which LiteRT's CompiledModel "
                                                      r"does not take"):
            model.run({"x": np.zeros(shape, np.float32)})
    finally:
        model.close()


# Each bad file's outcome, in a child process so that a crash is seen as one.
RUN_FILES = """
import json, sys
import numpy as np
from bridge.litert import runtime
lib, shape = sys.argv[1], json.loads(sys.argv[2])
for path in sys.argv[3:]:
    try:
        runtime.Model(path, lib=lib).run({"x": np.ones(shape, np.float32)})
        print(json.dumps("RAN"))
    except runtime.LiteRTError as e:
        print(json.dumps(f"ERROR: {e}"))
"""


def _outcomes(tmp_path, lib, x_shape, files):
    paths = []
    for k, data in enumerate(files):
        paths.append(tmp_path / f"bad{k}.tflite")
        paths[-1].write_bytes(data)
    done = subprocess.run([sys.executable, "-c", RUN_FILES, str(lib), json.dumps(list(x_shape)), *map(str, paths)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr[-2000:])  # no crash
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith('"')]


def test_a_bad_bias_or_dtype_names_the_op_the_argument_and_the_shapes(library, tmp_path):
    """Refused at prepare, never run: a bias of the wrong length or rank, float16 (T=1)."""
    files = [_one_op((3, 5), np.ones(4, np.float32)), _one_op((3, 5), np.ones((1, 5), np.float32)),
             _one_op((3, 5), np.ones(5, np.float32), {"T": 1}), _one_op((3, 5), np.ones(5, np.float32))]
    assert _outcomes(tmp_path, library, (3, 5), files) == [
        "ERROR: FusedBiasGelu: argument 'bias': must have shape [C]=[5] (the last dim of x [3,5]), got [4]",
        "ERROR: FusedBiasGelu: argument 'bias': must have shape [C]=[5] (the last dim of x [3,5]), got [1,5]",
        "ERROR: FusedBiasGelu: argument 'T': this LiteRT kernel runs float32 (TensorType 0) only, got TensorType 1 "
        "(--mode lowered runs the other types)",
        "RAN",  # the good file they differ from
    ]


def test_the_team_build_is_apart_from_bridges_own_and_keyed_by_the_team_files(library, tmp_path):
    own = native.litert_build()
    team = native.litert_library_build(LITERT_FOLDER)
    assert library.parent == team.folder() != own.folder()
    assert runtime.served_ops(library)["FusedBiasGelu"] is None
    copy = tmp_path / "litert"
    shutil.copytree(LITERT_FOLDER, copy)
    before = native.litert_library_build(copy).key()
    assert before == team.key()  # the same files elsewhere (a tmp folder): the same build, not a rebuild
    source = copy / "fused_bias_gelu.cc"
    source.write_text(source.read_text() + "\n// one more line\n")
    assert native.litert_library_build(copy).key() != before  # the same folder, another kernel: rebuilt
    assert native.litert_build().key() == own.key()  # bridge's own build does not see the team's files
    assert native.team_library_build(LITERT_FOLDER).folder() == team.folder()  # `bridge build DIR` finds it


def test_a_folder_without_the_team_op_or_without_sources_is_refused(library, tmp_path):
    """In this process no team spec is registered: the build serves none of the team's ops."""
    with pytest.raises(team_libraries.LiteRTLibraryError, match=r"--litert-library .* serves no kernel for the "
                                                                r"team's ops: none .*its files register: FusedBiasGelu"):
        team_libraries.add(LITERT_FOLDER)
    with pytest.raises(team_libraries.LiteRTLibraryError, match=r"--litert-library .*: not a folder of .cc files"):
        team_libraries.add(tmp_path)
    assert team_libraries.build() is None and team_libraries.folder() is None  # bridge's own build stays in use


# -- the CLI: export, parity, ops ------------------------------------------------------
def _export(savedmodel, out, *flag):
    return _bridge("export", savedmodel, "--to", "tflite", "--mode", "custom", "-o", out, *SHAPE_ARGS, *TEAM, *flag,
                   "--json")


def test_export_custom_mode_is_verified_with_the_team_kernel(savedmodel, library, tmp_path):
    done = _export(savedmodel, tmp_path / "m.tflite", team_libraries.FLAG, LITERT_FOLDER)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["details"]["custom_ops"] == {"FusedBiasGelu": [{"T": 0}]}, result["details"]
    assert result["not_verified"] is None and result["checks"], result
    assert all(c["status"] == "pass" for c in result["checks"]), result["checks"]


def test_without_the_flag_the_export_is_not_verified_and_names_the_flag(savedmodel, tmp_path):
    done = _export(savedmodel, tmp_path / "m.tflite")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["checks"] == [] and "do not serve them" in result["not_verified"], result
    assert team_libraries.FLAG in result["not_verified"]


def _parity(savedmodel, report, *flag):
    return _bridge("parity", savedmodel, "--runtimes", "tf,tflite-custom", *SHAPE_ARGS, *TEAM, *flag,
                   "--json", report)


def _rows(report):
    return {r["name"]: r for r in json.loads(report.read_text())["runtimes"]}


def test_parity_tflite_custom_runs_the_team_kernel(savedmodel, library, tmp_path):
    done = _parity(savedmodel, tmp_path / "p.json", team_libraries.FLAG, LITERT_FOLDER)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    row = _rows(tmp_path / "p.json")["tflite-custom"]
    assert row["status"] == "ok" and row["passed"] and row["outputs"], row
    assert all(o["passed"] and o["status"] == "pass" for o in row["outputs"].values()), row["outputs"]


def test_bridge_ops_fills_the_team_ops_tflite_cell(library):
    done = _bridge("ops", "--json", "--op-spec", SPEC_FILE, team_libraries.FLAG, LITERT_FOLDER)
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(done.stdout)
    assert doc["ops"]["FusedBiasGelu"]["tflite"] == "yes (litert/)", doc["ops"]["FusedBiasGelu"]
    assert {op: row["tflite"] for op, row in doc["ops"].items() if op != "FusedBiasGelu"} == \
        {op: "yes" for op in doc["ops"] if op != "FusedBiasGelu"}  # bridge's own ops stay served
    assert not [h for h in doc["holes"] if "TFLite" in h], doc["holes"]


def test_a_bad_folder_on_the_command_line_is_a_short_usage_error(tmp_path):
    (tmp_path / "notes.txt").write_text("no kernels here")
    done = _bridge("ops", "--op-spec", SPEC_FILE, team_libraries.FLAG, tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert f"bridge ops: error: {team_libraries.FLAG} {tmp_path}: not a folder of .cc files" in done.stderr


# -- a planted wrong kernel: the checks can fail ------------------------------------------
ERF_GELU = "0.5f * z * (1.0f + std::erf(z * 0.70710678118654752f))"
TANH_GELU = "0.5f * z * (1.0f + std::tanh(0.7978845608f * (z + 0.044715f * z * z * z)))"


@pytest.fixture(scope="module")
def tanh_library(tmp_path_factory):
    folder = tmp_path_factory.mktemp("planted") / "litert"
    shutil.copytree(LITERT_FOLDER, folder)
    source = folder / "fused_bias_gelu.cc"
    text = source.read_text()
    assert text.count(ERF_GELU) == 1, "the planted bug no longer matches the kernel"
    source.write_text(text.replace(ERF_GELU, TANH_GELU))
    return folder, _build(folder)


@pytest.mark.slow
def test_a_tanh_gelu_kernel_fails_the_numeric_check_and_parity(savedmodel, tanh_library, tmp_path):
    """The tanh approximation (off by up to ~5e-4) is caught by both judges."""
    folder, lib = tanh_library
    assert _errors(lib)[1] > 1.0
    done = _parity(savedmodel, tmp_path / "p.json", team_libraries.FLAG, folder)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    row = _rows(tmp_path / "p.json")["tflite-custom"]
    assert row["status"] == "ok" and not row["passed"], row  # it ran, and its numbers fail


@pytest.mark.slow
def test_without_the_flag_parity_tflite_custom_is_unavailable_and_names_the_flag(savedmodel, tmp_path):
    _parity(savedmodel, tmp_path / "p.json")
    row = _rows(tmp_path / "p.json")["tflite-custom"]
    assert row["status"] == "unavailable" and "have no FusedBiasGelu" in row["reason"], row
    assert team_libraries.FLAG in row["reason"], row["reason"]
