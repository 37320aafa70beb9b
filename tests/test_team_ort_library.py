"""A team's own onnxruntime kernel library (examples/custom_op/ort: FusedBiasGelu
against onnxruntime's C API) through `--ort-library`: built like bridge's own,
its outputs against the numpy float64 reference of the spec, registered in the
sessions bridge makes, shown by `bridge ops`, run by `bridge parity --runtimes
ort`; a library that serves none of the team's ops is refused by name.

The team op is registered only in subprocesses (the other tests list exactly
bridge's own ops); the kernel's numbers are checked here on plain onnxruntime."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

from bridge import native
from test_team_ops import EXAMPLE, SPEC_FILE, _bridge, _gelu, savedmodel  # noqa: F401 (a fixture)
from test_team_ops import _spec_in_a_scratch_registry as _spec

ORT_FOLDER = EXAMPLE / "ort"
# x shapes: odd, size 1, rank 1..4, empty batch, empty channel axis
SHAPES = [(7,), (1,), (1, 1), (3, 33), (2, 5, 17), (2, 1, 1, 9), (0, 4), (4, 0), (3, 0, 5)]


@pytest.fixture(scope="module")
def library():
    try:
        return native.ort_library_build(ORT_FOLDER).library(quiet=True)
    except native.BuildError as e:
        pytest.skip(f"the onnxruntime headers or a compiler are missing here: {str(e).splitlines()[0]}")


def _session(lib, dtype):
    """A lone com.example::FusedBiasGelu node on plain onnxruntime with `lib`, no function to fall back on."""
    import onnxruntime as ort
    from onnx import helper
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    node = helper.make_node("FusedBiasGelu", ["x", "bias"], ["y"], domain="com.example")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", elem, None),
                                            helper.make_tensor_value_info("bias", elem, None)],
                              [helper.make_tensor_value_info("y", elem, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)],
                              ir_version=8)
    so = ort.SessionOptions()
    so.register_custom_ops_library(str(lib))
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _worst_excess(lib) -> float:
    """The largest error over every shape and dtype, as a fraction of the spec's tolerance."""
    spec = _spec()
    rng = np.random.default_rng(0)
    worst = 0.0
    for dtype in spec.dtypes:
        sess = _session(lib, dtype)
        for shape in SHAPES:
            x = (rng.standard_normal(shape) * 3).astype(dtype)  # |z| up to ~10: both tails and the middle
            bias = rng.standard_normal(shape[-1:]).astype(dtype)
            (y,) = sess.run(None, {"x": x, "bias": bias})
            assert y.shape == x.shape and y.dtype == x.dtype, (shape, dtype, y.shape, y.dtype)
            # the reference on the inputs as the kernel sees them; float16 rounds z = x + bias once more
            worst = max(worst, spec.tolerance[dtype].excess(y, _gelu(x.astype(np.float64) + bias)))
    return worst


def test_the_kernel_matches_the_float64_reference_on_awkward_shapes(library):
    assert _worst_excess(library) <= 1.0


def test_the_kernel_refuses_a_bad_bias_naming_the_op_the_argument_and_the_shapes(library):
    from onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument
    sess = _session(library, "float32")
    with pytest.raises(InvalidArgument, match=r"FusedBiasGelu: argument 'bias': must have shape \[C\]=\[5\] \(the last "
                                        r"dim of x \[3,5\]\), got \[4\]"):
        sess.run(None, {"x": np.ones((3, 5), np.float32), "bias": np.ones(4, np.float32)})


def _planted(tmp_path, old, new):
    folder = tmp_path / "ort"
    shutil.copytree(ORT_FOLDER, folder)
    source = folder / "fused_bias_gelu_ort.cc"
    text = source.read_text()
    assert text.count(old) == 1, f"the planted bug no longer matches: {old!r}"
    source.write_text(text.replace(old, new))
    return native.ort_library_build(folder).library(quiet=True)


TANH_GELU = ("0.5f * z * (1.0f + std::erf(z * 0.70710678118654752f))",
             "0.5f * z * (1.0f + std::tanh(0.7978845608f * (z + 0.044715f * z * z * z)))")


def test_a_tanh_gelu_kernel_fails_the_numeric_check(library, tmp_path):
    """The check can fail: the tanh approximation (off by up to ~5e-4) is caught."""
    assert _worst_excess(_planted(tmp_path, *TANH_GELU)) > 1.0


def test_bridge_ops_shows_the_team_kernel():
    done = _bridge("ops", "--json", "--op-spec", SPEC_FILE, "--ort-library", ORT_FOLDER)
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(done.stdout)
    assert doc["ops"]["FusedBiasGelu"]["ort_kernel"] == "yes (libfused_bias_gelu_ort.so)"
    assert not [h for h in doc["holes"] if "ORT kernel" in h], doc["holes"]  # a team's kernel is no hole


def test_a_library_without_the_team_op_names_the_op_the_library_and_the_flag():
    """bridge's own library serves com.bridge ops only, not com.example::FusedBiasGelu."""
    from bridge import onnx_plugins
    own = onnx_plugins.ort_library_path()
    done = _bridge("ops", "--op-spec", SPEC_FILE, "--ort-library", own)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    for word in ("com.example::FusedBiasGelu", str(own), "--ort-library"):
        assert word in done.stderr, (word, done.stderr)


SESSION_SCRIPT = """
import ctypes, json, sys
import numpy as np
import onnx
from onnx import helper
from bridge import ops
ops.load_spec_file(sys.argv[1])
from bridge import onnx_plugins
from bridge.onnx_plugins import team_libraries
print(json.dumps({"served": team_libraries.add(sys.argv[2])}))
lib = ctypes.CDLL(str(team_libraries.library_for("FusedBiasGelu")[0]))
node = helper.make_node("FusedBiasGelu", ["x", "bias"], ["y"], domain="com.example")
graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", 1, [2, 3]),
                          helper.make_tensor_value_info("bias", 1, [3])], [helper.make_tensor_value_info("y", 1, [2, 3])])
model = onnx_plugins.add_functions(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                     helper.make_opsetid("com.example", 1)]))
x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
counts = {}
for kernels in ("all", "fastest", "none", ["FusedBiasGelu"]):
    before = lib.fused_bias_gelu_ort_calls()
    onnx_plugins.session(model, kernels=kernels).run(None, {"x": x, "bias": np.ones(3, np.float32)})
    counts[str(kernels)] = lib.fused_bias_gelu_ort_calls() - before
print(json.dumps(counts))
"""


def test_sessions_run_the_team_kernel_where_asked_and_the_body_elsewhere(library):
    done = subprocess.run([sys.executable, "-c", SESSION_SCRIPT, str(SPEC_FILE), str(ORT_FOLDER)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    served, counts = (json.loads(line) for line in done.stdout.strip().splitlines()[-2:])
    assert served == {"served": ["FusedBiasGelu"]}
    assert counts == {"all": 1, "fastest": 1, "none": 0, "['FusedBiasGelu']": 1}, counts


def _parity_ort(savedmodel, ort_library, report, runtimes="tf,ort"):
    return _bridge("parity", savedmodel, "--runtimes", runtimes, "--input-shape", "tokens:2,5,32", "--op-spec",
                   SPEC_FILE, "--op-library", EXAMPLE, "--ort-library", ort_library, "--json", report)


def test_parity_ort_runs_the_team_kernel(savedmodel, library, tmp_path):
    """`ort` and `ge` (the GE-bound export, the team kernel standing in for its
    Ascend one) both run the team's library."""
    done = _parity_ort(savedmodel, ORT_FOLDER, tmp_path / "parity.json", runtimes="tf,ort,ge")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = {r["name"]: r for r in json.loads((tmp_path / "parity.json").read_text())["runtimes"]}
    assert "PASS" in done.stdout and {"ort", "ge"} <= set(rows), sorted(rows)
    assert all(o["status"] == "pass" for name in ("ort", "ge") for o in rows[name]["outputs"].values()), rows["ge"]


def test_parity_ort_fails_with_a_wrong_team_kernel(savedmodel, library, tmp_path):
    """With the kernel's GELU planted wrong (y = x + bias) `ort` fails: the row is
    the kernel's, not the function body's (which stays right). CI's one run of the
    CLI catching a wrong team kernel (not slow: one small library and `tf,ort`)."""
    broken = _planted(tmp_path, "Store(Gelu(Load(xr[j]) + Load(bp[j])), yr + j)", "Store(Load(xr[j]) + Load(bp[j]), yr + j)")
    done = _parity_ort(savedmodel, broken, tmp_path / "parity.json")
    assert done.returncode == 1 and (tmp_path / "parity.json").is_file(), done.stdout[-3000:] + done.stderr[-3000:]
    rows = {r["name"]: r for r in json.loads((tmp_path / "parity.json").read_text())["runtimes"]}
    ort = rows["ort"]  # it ran and its numbers differ: no crash or missing library passes for the catch
    assert ort["status"] == "ok" and not ort["passed"], (ort["status"], ort["reason"])
    assert [o["status"] for o in ort["outputs"].values()] == ["FAIL"], ort["outputs"]
    assert "FAIL: ort differs on features" in done.stdout, done.stdout[-2000:]
