"""`bridge parity` end to end on small models: a Keras model (plain layers)
with its tf2onnx export given through --onnx, and .onnx models built with
onnx.helper. The reference is independent of every runtime compared: TF for
the Keras model, onnx's ReferenceEvaluator for the .onnx models."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from bridge.cli import main
from bridge.parity import run_parity
from bridge.parity.inputs import InputError

ONNX_ONLY = "ort-lowered"  # needs onnxruntime only: runs whatever else has landed


# -- fixtures ------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A Conv-BN-LeakyReLU block, an upsample and a head (odd sizes, two
    outputs), saved as .keras, and its plain tf2onnx export."""
    import keras
    import tensorflow as tf
    import tf2onnx
    folder = tmp_path_factory.mktemp("tiny")
    keras.utils.set_random_seed(7)
    inp = keras.Input((11, 11, 3), name="image")
    x = keras.layers.ZeroPadding2D(((1, 0), (1, 0)), name="pad")(inp)
    x = keras.layers.Conv2D(6, 3, strides=2, use_bias=False, name="conv_a")(x)
    x = keras.layers.BatchNormalization(name="bn_a")(x)
    x = keras.layers.LeakyReLU(0.1, name="leaky_a")(x)
    y = keras.layers.UpSampling2D(2, name="up")(x)
    z = keras.layers.Conv2D(5, 1, name="head")(y)
    model = keras.Model(inp, [z, x], name="tiny")
    bn = model.get_layer("bn_a")  # realistic statistics, so a folding error would show
    rng = np.random.default_rng(0)
    bn.set_weights([rng.uniform(0.5, 1.5, 6), rng.normal(size=6) * 0.1, rng.normal(size=6) * 0.1,
                    rng.uniform(0.5, 1.5, 6)])
    path = folder / "tiny.keras"
    model.save(path)
    spec = [tf.TensorSpec((1, 11, 11, 3), tf.float32, name="image")]
    fn = tf.function(lambda image: model([image], training=False))
    proto, _ = tf2onnx.convert.from_function(fn, input_signature=spec, opset=17)
    good = folder / "tiny.onnx"
    onnx.save(proto, good)
    return {"keras": str(path), "onnx": str(good), "proto": proto, "folder": folder}


def _planted(proto, folder, op_type="LeakyRelu", attr="alpha", value=0.3):
    """The export with one node altered on purpose; returns (path, node name)."""
    bad = onnx.ModelProto()
    bad.CopyFrom(proto)
    node = next(n for n in bad.graph.node if n.op_type == op_type)
    for a in node.attribute:
        if a.name == attr:
            a.f = value
    path = folder / f"planted_{op_type}.onnx"
    onnx.save(bad, path)
    return str(path), node.name


def _small_onnx(path, scale=1.0):
    """Gather (ids within a 10-row table) + Add + Relu + Gemm, dynamic batch."""
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array((rng.normal(size=(4, 3)) * scale).astype(np.float32), "W")
    table = numpy_helper.from_array(rng.normal(size=(10, 3)).astype(np.float32), "E")
    nodes = [helper.make_node("Gather", ["E", "ids"], ["emb"], name="gather"),
             helper.make_node("Add", ["x", "emb"], ["s"], name="add"),
             helper.make_node("Relu", ["s"], ["r"], name="relu"),
             helper.make_node("Gemm", ["r", "W"], ["y"], transB=1, name="gemm")]
    graph = helper.make_graph(nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3]),
                                               helper.make_tensor_value_info("ids", TensorProto.INT64, ["N"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])], [w, table])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, path)
    return str(path)


def _numbers(report_json):
    """Every comparison number of a JSON report (timings left out)."""
    return {r["name"]: r["outputs"] for r in report_json["runtimes"]}


# -- Keras model, its export given with --onnx ---------------------------------------
def test_keras_model_passes_with_all_numbers(tiny):
    report = run_parity(tiny["keras"], runtimes=["tf", ONNX_ONLY], onnx_file=tiny["onnx"], seed=3)
    assert report.passed, report.to_json()
    row = next(r for r in report.runtimes if r.name == ONNX_ONLY)
    assert row.status == "ok" and set(row.outputs) == {"head", "leaky_a"}
    c = row.outputs["head"]
    assert c.shape == (1, 10, 10, 5) and 0 < c.max_abs_error < 1e-4 and c.cosine > 0.99999
    data = report.to_json()
    json.dumps(data, allow_nan=False)
    numbers = data["runtimes"][1]["outputs"]["head"]
    for key in ("max_abs_error", "max_rel_error", "mean_abs_error", "cosine", "worst_index", "passed",
                "atol", "rtol", "allowed", "excess"):
        assert numbers[key] is not None, key


def test_per_layer_compares_every_shared_layer(tiny):
    report = run_parity(tiny["keras"], runtimes=["tf", ONNX_ONLY], onnx_file=tiny["onnx"], per_layer=True)
    assert report.passed
    layers = next(r for r in report.runtimes if r.name == ONNX_ONLY).layers
    names = [c.name for c in layers.checks]
    # tf2onnx folds the pad and the BN into the conv (a node named after neither): those have no tensor
    assert {"leaky_a", "up", "head"} <= set(names) and "conv_a" not in names and "pad" not in names
    assert names == sorted(names, key=["pad", "conv_a", "bn_a", "leaky_a", "up", "head"].index)
    assert layers.failed == 0 and layers.first_fail is None and layers.last_pass.name == "head"


def test_planted_fault_is_found_at_its_node(tiny):
    path, node = _planted(tiny["proto"], tiny["folder"])
    report = run_parity(tiny["keras"], runtimes=["tf", ONNX_ONLY], onnx_file=path, per_layer=True)
    assert not report.passed
    row = next(r for r in report.runtimes if r.name == ONNX_ONLY)
    assert not row.outputs["leaky_a"].passed and not row.outputs["head"].passed
    first = row.layers.first_fail
    assert first.name == "leaky_a" and first.node == node
    assert row.layers.last_pass is None  # nothing before it survives the export as a tensor
    assert row.layers.failed == 3  # leaky_a and everything after it


def test_cli_exit_codes_json_and_inputs_roundtrip(tiny, tmp_path, capsys):
    out1, out2, saved = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "in.npz"
    argv = [tiny["keras"], "--runtimes", f"tf,{ONNX_ONLY}", "--onnx", tiny["onnx"], "-q", "--seed", "5"]
    assert main(["parity", *argv, "--json", str(out1), "--save-inputs", str(saved)]) == 0
    text = capsys.readouterr().out
    assert "PASS: 1 runtime agrees with the model in float64 (tf-float64) on 2 outputs" in text and "leaky_a" in text
    assert main(["parity", *argv[:-2], "--json", str(out2), "--load-inputs", str(saved)]) == 0
    a, b = json.loads(out1.read_text()), json.loads(out2.read_text())
    assert _numbers(a) == _numbers(b) and a["inputs"] == b["inputs"]
    assert np.load(saved)["image"].shape == (1, 11, 11, 3)
    # a different seed gives different numbers: the roundtrip above is not vacuous
    assert main(["parity", *argv[:-2], "--seed", "6", "--json", str(out2)]) == 0
    assert _numbers(json.loads(out2.read_text())) != _numbers(a)
    planted, _ = _planted(tiny["proto"], tiny["folder"])
    assert main(["parity", tiny["keras"], "--runtimes", f"tf,{ONNX_ONLY}", "--onnx", planted, "-q",
                 "--per-layer"]) == 1
    text = capsys.readouterr().out
    assert "FAIL: ort-lowered differs on head, leaky_a (first at layer leaky_a)" in text


def test_load_outputs_pass_and_perturbed_fail(tiny, tmp_path, capsys):
    import onnxruntime as ort
    saved = tmp_path / "in.npz"
    argv = ["parity", tiny["keras"], "--runtimes", "tf", "-q"]
    assert main([*argv, "--save-inputs", str(saved), "--onnx", tiny["onnx"]]) == 1  # nothing compared
    assert "nothing was compared" in capsys.readouterr().out
    session = ort.InferenceSession(tiny["onnx"], providers=["CPUExecutionProvider"])
    feeds = dict(np.load(saved))
    names = [o.name for o in session.get_outputs()]
    got = dict(zip(names, session.run(None, feeds)))
    outs = tmp_path / "board.npz"
    np.savez(outs, *[got[n] for n in names])  # positional, as a board script would write them
    assert main([*argv, "--load-inputs", str(saved), "--load-outputs", f"board={outs}"]) == 0
    assert "PASS: 1 runtime agrees with the model in float64 (tf-float64) on 2 outputs" in capsys.readouterr().out
    bins = tmp_path / "msame"
    bins.mkdir()
    for i, n in enumerate(names):
        got[n].tofile(bins / f"tiny_output_{i}.bin")
    assert main([*argv, "--load-inputs", str(saved), "--load-outputs", f"ge={bins}"]) == 0
    np.savez(outs, *[got[n] * 1.01 for n in names])
    assert main([*argv, "--load-inputs", str(saved), "--load-outputs", f"board={outs}"]) == 1
    assert "FAIL: board differs on head, leaky_a" in capsys.readouterr().out
    # a looser tolerance for exactly those outputs makes it pass
    assert main([*argv, "--load-inputs", str(saved), "--load-outputs", f"board={outs}",
                 "--rtol", "head=0.02", "--rtol", "leaky_a=0.02"]) == 0


@pytest.mark.parametrize("args, message", [
    (["--runtimes", "tf,nope"], "unknown runtime 'nope'; known: tf"),
    (["--runtimes", ","], "--runtimes is empty"),
    (["--atol", "x"], "--atol 'x': expected a number or OUTPUT=NUMBER"),
    (["--rtol", "head=-1"], "--rtol 'head=-1': must be a non-negative number"),
    (["--batch", "0"], "--batch must be >= 1"),
    (["--load-inputs", "/nonexistent/in.npz"], "--load-inputs: no such file: /nonexistent/in.npz"),
    (["--load-outputs", "ge"], "--load-outputs 'ge': expected RUNTIME=FILE"),
    (["--input-shape", "nope:1,2"], "the model has no input 'nope'"),
    (["--onnx", "/nonexistent.onnx"], "--onnx /nonexistent.onnx: no such file"),
])
def test_cli_usage_errors_exit_2(tiny, capsys, args, message):
    assert main(["parity", tiny["keras"], "-q", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_bad_model_arguments_exit_2(tmp_path, capsys):
    assert main(["parity", "no-such-model", "-q"]) == 2
    assert "unknown model 'no-such-model'" in capsys.readouterr().err
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x00garbage")
    assert main(["parity", str(junk), "-q"]) == 2
    assert "junk.onnx" in capsys.readouterr().err
    wrong = tmp_path / "wrong.npz"
    np.savez(wrong, q=np.ones(3, np.float32))
    model = _small_onnx(tmp_path / "s.onnx")
    assert main(["parity", model, "-q", "--load-inputs", str(wrong)]) == 2
    assert "--load-inputs: no array for input 'x'" in capsys.readouterr().err


# -- .onnx MODEL: the ONNX runtimes against the ReferenceEvaluator ------------------------
def test_onnx_model_against_reference_evaluator(tmp_path):
    path = _small_onnx(tmp_path / "small.onnx")
    report = run_parity(path, batch=3, per_layer=True, seed=2)
    assert report.reference == "onnx-reference" and report.passed, report.to_json()
    assert report.inputs["ids"] == ((3,), "int64") and report.inputs["x"] == ((3, 3), "float32")
    row = next(r for r in report.runtimes if r.name == ONNX_ONLY)
    assert row.outputs["y"].passed and row.outputs["y"].shape == (3, 4)
    assert [c.name for c in row.layers.checks] == ["emb", "s", "r", "y"]
    assert not any(r.name.startswith("tf") for r in report.runtimes)  # no TF model, no TF runtime


def test_onnx_model_generated_ids_stay_in_the_vocabulary(tmp_path):
    from bridge.parity.source import open_source
    src = open_source(_small_onnx(tmp_path / "small.onnx"))
    ids = src.sample_inputs(batch=500, seed=0)["ids"]
    assert ids.min() >= 0 and ids.max() == 9


def test_unknown_dims_of_an_onnx_model_run_at_a_sample_shape(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "S"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "S"])
    model = helper.make_model(helper.make_graph([helper.make_node("Exp", ["x"], ["y"])], "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, tmp_path / "dyn.onnx")
    report = run_parity(str(tmp_path / "dyn.onnx"))  # batch 1, bridge's default length
    assert report.passed and report.inputs["x"] == ((1, 16), "float32")
    report = run_parity(str(tmp_path / "dyn.onnx"), input_shapes=["x:2,0"])  # empty is valid input
    assert report.passed and report.inputs["x"] == ((2, 0), "float32")


@pytest.mark.parametrize("pads, k, stride", [([0, 0, 1, 1], 2, 1), ([0, 0, 0, 0], 2, 2), ([1, 1, 1, 1], 3, 2),
                                             ([0, 1, 1, 0], 3, 1)])
def test_reference_maxpool_fix_matches_onnxruntime(rng, pads, k, stride):
    import onnxruntime as ort
    from onnx.reference import ReferenceEvaluator
    from bridge.parity.reference_fixes import OPS
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[k, k], strides=[stride, stride], pads=pads)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 5, 7])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    x = rng.normal(size=(2, 3, 5, 7)).astype(np.float32)
    got = ReferenceEvaluator(model, new_ops=OPS).run(None, {"x": x})[0]
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert got.shape == want.shape and np.array_equal(got, want)
