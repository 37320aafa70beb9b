"""`bridge parity` when NaN appears: a reference that produces NaN fails the run
(exit 1, one clear line) even when every runtime has the same NaN; a runtime's
NaN against a finite reference fails its row, naming the element and the side.
Small .onnx models built with onnx.helper; the reference is onnx's
ReferenceEvaluator, the other side onnxruntime or outputs loaded from a file."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from bridge.cli import main
from bridge.parity import inputs as inputs_mod
from bridge.parity import run_parity


def _sqrt_model(path, shift: float):
    """y = sqrt(x - shift), x of shape [2, 5]: NaN wherever x < shift."""
    nodes = [helper.make_node("Sub", ["x", "c"], ["d"], name="sub"), helper.make_node("Sqrt", ["d"], ["y"], name="sqrt")]
    graph = helper.make_graph(nodes, "sqrt", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])],
                              [helper.make_tensor("c", TensorProto.FLOAT, [], [shift])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, path)
    return str(path)


@pytest.fixture
def feeds(tmp_path):
    """Inputs in [0.1, 1] with one element below 0.3, saved for --load-inputs."""
    x = np.linspace(0.1, 1.0, 10, dtype=np.float32).reshape(2, 5)
    x = np.roll(x, 3)  # the smallest value moves to [0,3]
    path = tmp_path / "in.npz"
    inputs_mod.save(str(path), {"x": x})
    return str(path), x


def test_reference_nan_fails_the_run_even_when_every_runtime_agrees(tmp_path, feeds, capsys):
    model = _sqrt_model(tmp_path / "m.onnx", 0.3)
    path, x = feeds
    rc = main(["parity", model, "--runtimes", "onnx-reference,ort", "--load-inputs", path, "-q"])
    out = capsys.readouterr().out
    first = np.unravel_index(int(np.argmax(x < 0.3)), x.shape)
    n = int((x < 0.3).sum())
    assert rc == 1, out
    verdict = out.strip().splitlines()[-1]
    assert verdict.startswith(f"FAIL: the reference onnx-reference failed: it produced NaN in output 'y' at "
                              f"[{first[0]},{first[1]}] ({n} of 10 elements)"), verdict
    # ort has the same NaN at the same places: its row passes and says so
    row = next(line for line in out.splitlines() if line.startswith("ort "))
    assert f"pass ({n} NaN/Inf on both sides at the same places)" in row, row


def test_runtime_nan_against_a_finite_reference_names_element_and_side(tmp_path, feeds, capsys):
    model = _sqrt_model(tmp_path / "m.onnx", 0.0)
    path, x = feeds
    got = np.sqrt(x.astype(np.float64)).astype(np.float32)
    got[1, 4] = np.nan
    np.savez(tmp_path / "out.npz", y=got)
    report = run_parity(model, runtimes=["onnx-reference"], inputs={"x": x},
                        load_outputs=[("board", str(tmp_path / "out.npz"))])
    c = report.runtimes[-1].outputs["y"]
    assert not report.passed and not c.passed and c.nonfinite == 1 and c.nonfinite_side == "result"
    assert c.worst_index == (1, 4) and c.note.startswith("NaN at [1,4] in the result"), c.note
    rc = main(["parity", model, "--runtimes", "onnx-reference", "--load-inputs", path, "-q",
               "--load-outputs", f"board={tmp_path / 'out.npz'}"])
    out = capsys.readouterr().out
    assert rc == 1 and "FAIL: NaN at [1,4] in the result" in out and "FAIL: board differs on y" in out, out
