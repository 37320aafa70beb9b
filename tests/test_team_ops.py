"""A team's own op from outside the package (examples/custom_op: FusedBiasGelu,
its spec file and its TensorFlow kernel library) over bridge's roads, with no
file of the package edited: the door of `--op-spec` / `--op-library`.

The CLI runs in subprocesses so that the team op never joins this process's
registry (the other tests list exactly bridge's own ops)."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bridge import ops
from bridge.ops import registry

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "custom_op"
SPEC_FILE = EXAMPLE / "fused_bias_gelu.py"


def _bridge(*args, timeout=600):
    done = subprocess.run([sys.executable, "-m", "bridge", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    return done


def _team(*args):
    return (*args, "--op-spec", SPEC_FILE, "--op-library", EXAMPLE)


@pytest.fixture(scope="module")
def savedmodel(tmp_path_factory):
    out = tmp_path_factory.mktemp("team") / "mlp_gelu"
    done = subprocess.run([sys.executable, str(EXAMPLE / "make_model.py"), str(out)], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def _gelu(z):
    return 0.5 * z * (1.0 + np.vectorize(math.erf, otypes=[np.float64])(z / math.sqrt(2.0)))


def _spec_in_a_scratch_registry():
    """The example's spec, loaded without registering it in this process."""
    import importlib.util
    m = importlib.util.spec_from_file_location("scratch_fused_bias_gelu", SPEC_FILE)
    module = importlib.util.module_from_spec(m)
    m.loader.exec_module(module)
    return module.SPEC


def test_the_example_spec_passes_the_checks_and_its_reference_is_gelu():
    spec = registry.check(_spec_in_a_scratch_registry(), str(SPEC_FILE))
    rng = np.random.default_rng(0)
    for shape in [(3, 5), (1,), (2, 1, 7), (0, 4)]:
        x = rng.standard_normal(shape)
        b = rng.standard_normal(shape[-1:])
        np.testing.assert_allclose(spec.reference(x, b), _gelu(x + b), rtol=0, atol=1e-12)
    with pytest.raises(ops.OpError, match=r"FusedBiasGelu: argument 'bias': must have shape \[C\]=\[5\]"):
        spec.infer_shapes([(3, 5), (4,)])


def test_the_body_on_onnxruntime_matches_gelu_on_awkward_shapes():
    import onnxruntime as ort
    from onnx import helper, TensorProto
    from bridge.onnx_plugins.functions import Body
    spec = _spec_in_a_scratch_registry()
    for opset in (11, 13, 18):
        b = Body(spec, opset, dtype="float32", attrs={})
        nodes = b.build(["x", "bias"], ["y"])
        graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None),
                                               helper.make_tensor_value_info("bias", TensorProto.FLOAT, None)],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        rng = np.random.default_rng(opset)
        for shape in [(4, 9), (1, 1), (2, 3, 5), (0, 3)]:
            x = (rng.standard_normal(shape) * 3).astype("float32")
            bias = rng.standard_normal(shape[-1:]).astype("float32")
            (y,) = sess.run(None, {"x": x, "bias": bias})
            np.testing.assert_allclose(y, _gelu(x.astype(np.float64) + bias), rtol=0, atol=2e-6)


def test_bad_specs_name_the_file_and_the_field(tmp_path):
    good = SPEC_FILE.read_text()
    cases = {
        "reference": ("_reference=_reference,", "_reference=None,", "field '_reference'"),
        "default": ("attrs=(),", 'attrs=(Attr("scale", "float", "big"),),', "field 'attrs.scale'"),
        "tolerance": ('"float16": Tolerance(3e-3)', '"float16": 3e-3', "field 'tolerance'"),
        "name": ('NAME = "FusedBiasGelu"', 'NAME = "fused bias gelu"', "field 'name'"),
    }
    for what, (old, new, field) in cases.items():
        assert old in good, what
        path = tmp_path / f"bad_{what}.py"
        text = good.replace(old, new)
        if what == "default":
            text = text.replace("from bridge.ops import Arg,", "from bridge.ops import Arg, Attr,")
        path.write_text(text)
        with pytest.raises(ops.SpecError) as e:
            ops.load_spec_file(path)
        assert str(path) in str(e.value) and field in str(e.value), (what, str(e.value))
        assert "FusedBiasGelu" not in ops.SPECS
    empty = tmp_path / "nothing.py"
    empty.write_text("X = 1\n")
    with pytest.raises(ops.SpecError, match="defines no SPEC"):
        ops.load_spec_file(empty)


def test_a_decomposition_without_a_ge_mapping_is_named():
    from dataclasses import replace
    from bridge.ascend.from_body import UnmappedOp, decomposition_from_body

    def body(b, x, bias, *, outputs):
        b.op("Softplus", b.op("Add", x, bias), out=outputs[0])
    spec = replace(_spec_in_a_scratch_registry(), body=body)
    with pytest.raises(UnmappedOp, match="FusedBiasGelu: its decomposition uses the ONNX op Softplus"):
        decomposition_from_body(spec)
    g = decomposition_from_body(_spec_in_a_scratch_registry())
    assert [k for _, k in g.step_ids()].count("Erf") == 1


def test_bridge_ops_fills_the_team_op_row():
    done = _bridge(*_team("ops", "--json"))
    assert done.returncode in (0, 1), done.stderr[-3000:]
    row = json.loads(done.stdout)["ops"]["FusedBiasGelu"]
    for column in ("tf_cpu", "gradient", "composite", "onnx_schema", "onnx_function", "tf2onnx", "ascend"):
        assert row[column] == "yes", (column, row)
    assert "not in the library" in row["ort_kernel"]  # said, and parity runs the body instead


def test_export_and_parity_of_a_savedmodel_with_the_team_op(savedmodel, tmp_path):
    import onnx
    shape = ("--input-shape", "tokens:2,5,32")
    onnx_out = tmp_path / "m.onnx"
    done = _bridge(*_team("export", savedmodel, "--to", "onnx", "-o", onnx_out, *shape))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "com.example: 1 FusedBiasGelu" in done.stdout + done.stderr  # the summary names the op's own domain
    model = onnx.load(str(onnx_out))
    assert [(n.domain, n.op_type) for n in model.graph.node if n.domain] == [("com.example", "FusedBiasGelu")]
    assert [f.name for f in model.functions] == ["FusedBiasGelu"]
    # Independent of bridge: onnxruntime on the function body against numpy on the SavedModel's weights.
    import onnxruntime as ort
    import tensorflow as tf
    from bridge import native
    tf.load_op_library(str(native.op_library_build(EXAMPLE).library(quiet=True)))
    loaded = tf.saved_model.load(str(savedmodel))
    w1, b1, w2 = (loaded.w1.numpy().astype(np.float64), loaded.b1.numpy().astype(np.float64),
                  loaded.w2.numpy().astype(np.float64))
    x = np.random.default_rng(1).standard_normal((2, 5, 32)).astype("float32")
    (got,) = ort.InferenceSession(str(onnx_out), providers=["CPUExecutionProvider"]).run(None, {"tokens": x})
    want = _gelu(x @ w1 + b1) @ w2
    assert np.all(np.abs(got - want) <= 1e-4 * np.maximum(1, np.abs(want)))

    ge_out = tmp_path / "ge"
    done = _bridge(*_team("export", savedmodel, "--to", "ge", "-o", ge_out, *shape))
    assert done.returncode == 0, done.stderr[-3000:]
    plugin = (ge_out / "opp" / "framework" / "onnx_plugin" / "fused_bias_gelu_onnx_plugin.cc").read_text()
    assert "com.example::1::FusedBiasGelu" in plugin and '"Erf"' in plugin

    done = _bridge(*_team("parity", savedmodel, *shape, "--json", tmp_path / "parity.json"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((tmp_path / "parity.json").read_text())
    rows = {r["name"]: r for r in report["runtimes"]}
    assert report["passed"] and not report["problem"], report["problem"]
    assert rows["tf"]["status"] == "reference"
    # these run the team op (its TF kernel, or its function body: no team ONNX kernel is given) and agree
    # (tflite: the graph-fused SavedModel with the op lowered to its body's composite, as export --to tflite)
    ran = ("tf-fused", "ort", "ort-functions", "ort-lowered", "onnx-reference", "tflite", "ge-builtin")
    for name in ran:
        r = rows[name]
        assert r["status"] == "ok" and r["passed"], (name, r["status"], r["reason"])
        assert [o["status"] for o in r["outputs"].values()] == ["pass"], (name, r["outputs"])
    # these need a team library not given here, and say which
    for name, why in (("tflite-custom", "--litert-library"), ("ge", "FusedBiasGelu")):
        assert rows[name]["status"] == "unavailable" and why in rows[name]["reason"], (name, rows[name])
    assert set(rows) - {"tf-float64"} == {"tf", *ran, "tflite-custom", "ge"}, sorted(rows)
    verdict = next(line for line in done.stdout.splitlines() if line.startswith(("PASS", "FAIL", "ILL")))
    assert verdict.startswith(f"PASS: {len(ran)} runtimes agree with tf on 1 output; "
                              "not run here: tflite-custom, ge"), verdict


def test_a_savedmodel_whose_library_was_not_given_names_the_op_and_the_flag(savedmodel, tmp_path):
    done = _bridge("export", savedmodel, "--to", "onnx", "-o", tmp_path / "m.onnx", "--op-spec", SPEC_FILE)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert "FusedBiasGelu" in done.stderr and "--op-library" in done.stderr
    assert not (tmp_path / "m.onnx").exists()


def test_the_library_registration_is_checked_against_the_spec():
    from dataclasses import replace
    import tensorflow as tf
    from bridge import native
    from bridge.tf_ops import team_ops
    lib = native.op_library_build(EXAMPLE).library(quiet=True)
    tf.load_op_library(str(lib))
    spec = _spec_in_a_scratch_registry()
    team_ops.check_registration(spec, str(lib))  # agrees
    with pytest.raises(team_ops.TeamOpError, match=r"FusedBiasGelu .*T in \['float16', 'float32'\] in the library, "
                                                   r"\['float32'\] in the spec"):
        team_ops.check_registration(replace(spec, dtypes=("float32",)), str(lib))
    with pytest.raises(team_ops.TeamOpError, match="inputs"):
        team_ops.check_registration(replace(spec, inputs=spec.inputs[:1]), str(lib))


def test_a_scaffolded_op_with_an_attribute_goes_over_the_roads(tmp_path):
    """`bridge op new`'s files build as they are, and the op's attribute reaches
    every runtime: a SavedModel with alpha=2.5, parity on every ONNX road."""
    folder = tmp_path / "fused_bias_relu"
    done = _bridge("op", "new", "FusedBiasRelu", "-o", folder)
    assert done.returncode == 0, done.stderr[-3000:]
    script = f"""
import sys, numpy as np, tensorflow as tf
from bridge import native
lib = tf.load_op_library(str(native.op_library_build({str(folder)!r}).library(quiet=True)))
class M(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([2, 3, 5], tf.float32, name="x")])
    def __call__(self, x):
        return {{"y": lib.fused_bias_relu(x * 1.5, tf.constant(np.linspace(-1, 1, 5, dtype="float32")), alpha=2.5)}}
m = M()
tf.saved_model.save(m, sys.argv[1], signatures={{"serving_default": m.__call__}})
"""
    saved = tmp_path / "sm"
    made = subprocess.run([sys.executable, "-c", script, str(saved)], capture_output=True, text=True, timeout=600)
    assert made.returncode == 0, made.stderr[-3000:]
    spec_file = folder / "fused_bias_relu.py"
    onnx_out = tmp_path / "relu.onnx"
    done = _bridge("export", saved, "--to", "onnx", "-o", onnx_out, "--op-spec", spec_file, "--op-library", folder)
    assert done.returncode == 0, done.stderr[-3000:]
    import onnx
    import onnxruntime as ort
    node = next(n for n in onnx.load(str(onnx_out)).graph.node if n.op_type == "FusedBiasRelu")
    assert node.domain == "com.example" and [(a.name, round(a.f, 6)) for a in node.attribute] == [("alpha", 2.5)]
    x = np.random.default_rng(3).standard_normal((2, 3, 5)).astype("float32")
    (got,) = ort.InferenceSession(str(onnx_out), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    want = np.maximum(x.astype(np.float64) * 1.5 + np.linspace(-1, 1, 5), 0) * 2.5
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


def test_the_composite_and_gradient_come_from_the_body_and_lower_to_tflite_builtins():
    """In a process of its own: the op through bridge.tf_ops, its composite
    (derived from the ONNX body) under lowered(), the TFLite builtins that trace
    gives, and the gradient (the composite's), each against numpy float64."""
    script = f"""
import math, sys, numpy as np, tensorflow as tf
from bridge import ops
ops.load_spec_file({str(SPEC_FILE)!r})
from bridge import tf_ops
tf_ops.load_op_library({str(EXAMPLE)!r})
erf = np.vectorize(math.erf, otypes=[np.float64])
gelu = lambda z: 0.5 * z * (1 + erf(z / math.sqrt(2)))
dgelu = lambda z: 0.5 * (1 + erf(z / math.sqrt(2))) + z * np.exp(-z * z / 2) / math.sqrt(2 * math.pi)
rng = np.random.default_rng(5)
worst = 0.0
for shape in [(3, 7), (1, 1), (2, 4, 5)]:
    x = (rng.standard_normal(shape) * 2).astype("float32"); b = rng.standard_normal(shape[-1:]).astype("float32")
    want = gelu(x.astype(np.float64) + b)
    with tf_ops.lowered():
        low = tf_ops.fused_bias_gelu(x, b).numpy()
    kernel = tf_ops.fused_bias_gelu(x, b).numpy()
    xs, bs = tf.constant(x), tf.constant(b)
    with tf.GradientTape() as tape:
        tape.watch([xs, bs]); y = tf_ops.fused_bias_gelu(xs, bs)
    gx, gb = tape.gradient(y, [xs, bs])
    dz = dgelu(x.astype(np.float64) + b)
    for got, ref in ((low, want), (kernel, want), (gx.numpy(), dz), (gb.numpy(), dz.reshape(-1, shape[-1]).sum(0))):
        worst = max(worst, float(np.max(np.abs(got - ref) / np.maximum(1, np.abs(ref)))))
b = rng.standard_normal(7).astype("float32")
fn = tf.function(lambda x: tf_ops.fused_bias_gelu(x, b), input_signature=[tf.TensorSpec([3, 7], tf.float32)])
with tf_ops.lowered():
    cf = fn.get_concrete_function()
flat = tf.lite.TFLiteConverter.from_concrete_functions([cf], fn).convert()
from ai_edge_litert.interpreter import Interpreter
it = Interpreter(model_content=flat); it.allocate_tensors()
x = rng.standard_normal((3, 7)).astype("float32")
it.set_tensor(it.get_input_details()[0]["index"], x); it.invoke()
got = it.get_tensor(it.get_output_details()[0]["index"])
ref = gelu(x.astype(np.float64) + b)
worst = max(worst, float(np.max(np.abs(got - ref) / np.maximum(1, np.abs(ref)))))
kinds = {{d["op_name"] for d in it._get_ops_details()}}
print("WORST", worst, "CUSTOM" if any("CUSTOM" in k or "Gelu" in k for k in kinds) else "BUILTINS")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(l for l in done.stdout.splitlines() if l.startswith("WORST"))
    _, worst, kind = line.split()
    assert kind == "BUILTINS"  # no custom op left in the lowered TFLite file
    assert float(worst) <= 2e-5, line
