"""Recurrent layers as a team has them (issue 25, row 4): an LSTM +
Bidirectional(GRU) tagger and a SimpleRNN model (.keras) export to ONNX and
run on every ONNX runtime, onnx's reference evaluator included (its Loop
mended: reference_fixes.Loop), and on TFLite (converted at static shapes).
Where the reference evaluator cannot run a standard op the row is
unavailable, naming the op; a failure in a bridge op stays the row's error."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from bridge.parity.reference_fixes import OPS
from bridge.parity.runtime import Unavailable
from bridge.parity.runtimes.onnx_reference import OnnxReference, failed_standard_op

ONNX_ROWS = ("tf", "tf-fused", "ort", "ort-functions", "ort-lowered", "onnx-reference", "ge", "ge-builtin")


def _loop_model(step_shape, steps: int):
    """A Loop whose body scans `x + i` (x of `step_shape`) for `steps`
    iterations: tf2onnx's while loop of a recurrent layer in small."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Cast", ["i"], ["fi"], to=TensorProto.FLOAT),
         helper.make_node("Add", ["x", "fi"], ["scan"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("scan", TensorProto.FLOAT, None)])
    graph = helper.make_graph(
        [helper.make_node("Loop", ["M", "cond"], ["y"], body=body)], "loop",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(step_shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(np.asarray(steps, np.int64), "M"),
                     numpy_helper.from_array(np.asarray(True), "cond")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("shape", [(1, 5), (2, 3, 4), (3,), (), (1, 0)])
@pytest.mark.parametrize("steps", [1, 7])
def test_reference_loop_stacks_scan_outputs(rng, shape, steps):
    x = rng.standard_normal(shape).astype(np.float32)
    model = _loop_model(shape, steps)
    want = np.stack([x + i for i in range(steps)])          # numpy: the spec's [steps, *shape]
    got = ReferenceEvaluator(model, new_ops=OPS).run(None, {"x": x})[0]
    assert got.shape == want.shape and np.allclose(got, want, atol=0)
    theirs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert theirs.shape == want.shape
    if len(shape) >= 2 or not shape:  # the stock evaluator's np.vstack: what the fix is for
        assert ReferenceEvaluator(model).run(None, {"x": x})[0].shape != want.shape


def _after_loop(model):
    """`model`'s scan output transposed as tf2onnx does next ([T,1,5] -> [1,T,5])."""
    g = model.graph
    g.node.append(helper.make_node("Transpose", ["y"], ["z"], perm=[1, 0, 2]))
    del g.output[:]
    g.output.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, None))
    return model


def test_a_standard_op_the_evaluator_cannot_run_is_unavailable(rng, monkeypatch):
    model = _after_loop(_loop_model((1, 5), 7))
    x = rng.standard_normal((1, 5)).astype(np.float32)
    run = OnnxReference().executor(model)
    assert run({"x": x}, ["z"])[0].shape == (1, 7, 5)
    monkeypatch.setattr("bridge.parity.reference_fixes.OPS", [])  # the stock Loop: [7,5], then Transpose fails
    with pytest.raises(Unavailable, match=r"onnx's reference evaluator cannot run Transpose \(RuntimeError: "
                                          r"Inconsistent permutation"):
        OnnxReference().executor(model)({"x": x}, ["z"])


def _layer_norm_model(gamma_size: int, functions: bool):
    from bridge import onnx_plugins
    node = helper.make_node("FusedLayerNorm", ["x", "g", "b"], ["y"], domain="com.bridge", epsilon=1e-5)
    graph = helper.make_graph(
        [node], "ln", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(np.ones(gamma_size, np.float32), "g"),
                     numpy_helper.from_array(np.zeros(gamma_size, np.float32), "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.bridge", 1)])
    return onnx_plugins.add_functions(model) if functions else model


@pytest.mark.parametrize("functions", [False, True])
def test_a_failure_in_a_bridge_op_stays_an_error(rng, functions):
    x = rng.standard_normal((2, 6)).astype(np.float32)
    good = OnnxReference().executor(_layer_norm_model(6, functions))({"x": x}, ["y"])[0]
    ref = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)  # numpy float64
    assert np.abs(good - ref).max() < 1e-5
    bad = _layer_norm_model(4, functions)  # gamma of 4 for rows of 6: the op's own reference kernel refuses
    with pytest.raises(Exception) as info:
        OnnxReference().executor(bad)({"x": x}, ["y"])
    assert not isinstance(info.value, Unavailable), info.value
    assert failed_standard_op(info.value) is None
    # the same error raised inside a function body (standard nodes of the com.bridge function): not excused
    if functions:
        with pytest.raises(Exception) as inner:
            ReferenceEvaluator(bad).run(None, {"x": x})
        assert failed_standard_op(inner.value) is None


def _tagger():
    import keras
    from keras import layers
    x = keras.Input((7, 6), name="seq")
    h = layers.LSTM(8, return_sequences=True)(x)
    h = layers.Bidirectional(layers.GRU(5, return_sequences=True))(h)
    return keras.Model(x, layers.Dense(4, name="tags")(h))


def _simple_rnn():
    import keras
    from keras import layers
    x = keras.Input((5, 3), name="seq")
    return keras.Model(x, layers.Dense(2, name="y")(layers.SimpleRNN(6)(x)))


@pytest.fixture(scope="module")
def tagger_file(tmp_path_factory):
    pytest.importorskip("keras")
    path = tmp_path_factory.mktemp("rnn") / "tagger.keras"
    _tagger().save(path)
    return str(path)


def test_tagger_parity_on_onnx_runtimes(tagger_file):
    from bridge.parity import run_parity
    report = run_parity(tagger_file, runtimes=["tf", "ort", "onnx-reference"])
    rows = {r.name: r for r in report.runtimes}
    assert report.passed, (report.problem, [(r.name, r.status, r.reason) for r in report.runtimes])
    assert rows["onnx-reference"].status == "ok" and rows["onnx-reference"].outputs["tags"].max_abs_error < 1e-5


def test_tagger_exports_to_tflite_at_static_shapes(tagger_file, tmp_path):
    from bridge import modelsource
    from bridge.converters import export_tflite
    from bridge.parity import verify
    from bridge.tflite_inspect import inspect_tflite
    res = verify.export(export_tflite, modelsource.resolve(tagger_file), str(tmp_path / "t.tflite"))
    assert res.checks and all(c.passed for c in res.checks), res.checks
    assert any("static shapes (seq 1x7x6)" in line for line in res.summary), res.summary
    ops = inspect_tflite(open(res.output, "rb").read()).ops
    assert "WHILE" in ops and not inspect_tflite(open(res.output, "rb").read()).custom_codes


@pytest.mark.slow
@pytest.mark.parametrize("build", [_tagger, _simple_rnn])
def test_recurrent_row_every_runtime(build, tmp_path):
    """The issue's row: every runtime passes, TFLite included."""
    from bridge.parity import run_parity
    path = tmp_path / "rnn.keras"
    build().save(path)
    report = run_parity(str(path))
    rows = {r.name: r for r in report.runtimes}
    assert report.passed, (report.problem, [(r.name, r.status, r.reason) for r in report.runtimes])
    for name in ONNX_ROWS + ("tflite",):
        assert rows[name].status in ("ok", "reference"), (name, rows[name].reason)
