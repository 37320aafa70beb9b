"""An op TFLite has as a builtin only at known shapes (a StridedSlice with a new
axis over an open length) is converted at the sample shapes, said in one line,
by `bridge export --to tflite` and by parity's tflite row; an op that needs flex
at any shape is still refused with the converter's own reason."""
from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from bridge.cli import main  # noqa: E402


class NewAxis(tf.Module):
    def __init__(self):
        super().__init__()
        self.g = tf.Variable(np.linspace(0.5, 1.5, 8, dtype="float32"))

    @tf.function(input_signature=[tf.TensorSpec([None, None, 8], tf.float32, name="x")])
    def __call__(self, x):
        return {"y": x[..., tf.newaxis, :] * self.g + 0.25}


class Determinant(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None, 3, 3], tf.float32, name="m")])
    def __call__(self, m):
        return {"d": tf.linalg.det(m)}


def _saved(module, path):
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.__call__})
    return str(path)


def test_a_new_axis_slice_at_an_open_length_converts_at_the_sample_shape(tmp_path, capsys):
    model = NewAxis()
    src = _saved(model, tmp_path / "newaxis")
    out = tmp_path / "newaxis.tflite"
    rc = main(["export", src, "--to", "tflite", "-o", str(out)])
    text = capsys.readouterr()
    assert rc == 0, text.err[-2000:]
    assert "converted at static shapes" in text.out and "StridedSlice" in text.out
    from ai_edge_litert.interpreter import Interpreter
    interp = Interpreter(model_path=str(out))
    runner = interp.get_signature_runner(next(iter(interp.get_signature_list())))
    shape = interp.get_input_details()[0]["shape"]
    x = np.random.default_rng(3).standard_normal(shape).astype("float32")
    want = x.astype(np.float64)[..., None, :] * np.linspace(0.5, 1.5, 8) + 0.25   # numpy float64 reference
    got = runner(x=x)["y"]
    assert got.shape == want.shape and np.max(np.abs(got - want)) < 1e-6


def test_parity_tflite_row_runs_at_the_sample_shape_where_open_dims_need_flex(tmp_path, capsys):
    src = _saved(NewAxis(), tmp_path / "newaxis")
    rc = main(["parity", src, "--runtimes", "tf,tflite", "-q", "--json", str(tmp_path / "p.json")])
    import json
    rows = {r["name"]: r for r in json.load(open(tmp_path / "p.json"))["runtimes"]}
    assert rc == 0, capsys.readouterr().err[-2000:]
    assert rows["tflite"]["status"] == "ok" and rows["tflite"]["passed"]
    assert "converted at static shapes" in rows["tflite"]["description"]


def test_an_op_with_no_builtin_at_any_shape_is_still_refused(tmp_path, capsys):
    src = _saved(Determinant(), tmp_path / "det")
    out = tmp_path / "det.tflite"
    rc = main(["export", src, "--to", "tflite", "-o", str(out)])
    err = capsys.readouterr().err
    assert rc != 0 and not out.exists()
    assert "MatrixDeterminant" in err and "converted at static shapes" not in err
