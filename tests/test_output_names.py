"""Outputs named like inputs (issue 25, part 5): a two-input SavedModel whose
serving dict has a key equal to an input name (`{"seq": fused_layer_norm(seq),
...}`) exports on every road. ONNX, where a name is one value, names that
output NAME_output and its metadata maps it back; TFLite keeps both names (a
signature's inputs and outputs are apart); the GE bundle is the ONNX one;
verification and parity compare it under the model's name. Each file is run
against the numpy float64 reference of the op."""
from __future__ import annotations

import json

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
ort = pytest.importorskip("onnxruntime")
import onnx  # noqa: E402

from bridge import ops, tf_ops  # noqa: E402
from bridge.converters.export_onnx import RENAMED_OUTPUTS, model_output_names, output_renames  # noqa: E402
from conftest import rule_excess, run_cli  # noqa: E402

H = 8


@pytest.fixture(scope="module")
def shadowing(tmp_path_factory):
    """(SavedModel folder, gamma, beta): outputs {"seq": LN(seq), "pooled": sum over the sequence of LN(seq) * mask}."""
    rng = np.random.default_rng(11)
    gamma = rng.uniform(0.5, 1.5, H).astype(np.float32)
    beta = rng.uniform(-0.5, 0.5, H).astype(np.float32)

    class M(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 5, H], tf.float32, name="seq"),
                                      tf.TensorSpec([None, 5], tf.float32, name="mask")])
        def __call__(self, seq, mask):
            y = tf_ops.fused_layer_norm(seq, gamma, beta)
            return {"seq": y, "pooled": tf.reduce_sum(y * mask[..., None], axis=1)}
    m = M()
    path = tmp_path_factory.mktemp("shadow") / "sm"
    tf.saved_model.save(m, str(path), signatures=m.__call__)
    return str(path), gamma, beta


def _reference(feeds, gamma, beta):
    y = ops.get("FusedLayerNorm").reference(feeds["seq"].astype(np.float64), gamma, beta)
    return {"seq": y, "pooled": (y * feeds["mask"][..., None].astype(np.float64)).sum(axis=1)}


def _feeds(rng, batch):
    return {"seq": rng.normal(size=(batch, 5, H)).astype(np.float32),
            "mask": rng.integers(0, 2, size=(batch, 5)).astype(np.float32)}


def test_renames_are_free_names():
    assert output_renames(["seq", "pooled"], ["seq", "mask"]) == {"seq": "seq_output"}
    assert output_renames(["a", "a_output", "b"], ["a", "b", "b_output_1"]) == {"a": "a_output_1", "b": "b_output"}
    assert output_renames(["y"], ["x"]) == {}


@pytest.mark.parametrize("mode", ["custom", "lowered"])
def test_onnx_export(tmp_path, capsys, shadowing, rng, mode):
    path, gamma, beta = shadowing
    out_path = tmp_path / "m.onnx"
    rc, out, err = run_cli(capsys, "export", path, "--to", "onnx", "--mode", mode, "-o", str(out_path))
    assert rc == 0, err[-2000:]
    assert "'seq' -> 'seq_output'" in out
    model = onnx.load(str(out_path))
    assert [i.name for i in model.graph.input] == ["mask", "seq"]
    assert sorted(o.name for o in model.graph.output) == ["pooled", "seq_output"]
    assert model_output_names(model) == {"seq_output": "seq"}
    assert json.loads(next(p.value for p in model.metadata_props if p.key == RENAMED_OUTPUTS)) == {"seq_output": "seq"}
    from bridge import onnx_plugins
    sess = onnx_plugins.session(str(out_path), kernels="all" if mode == "custom" else "none")
    for batch in (1, 3):
        feeds = _feeds(rng, batch)
        got = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
        ref = _reference(feeds, gamma, beta)
        assert rule_excess(got["seq_output"], ref["seq"], 1e-4) <= 1
        assert rule_excess(got["pooled"], ref["pooled"], 1e-4) <= 1


def test_tflite_export_keeps_both_names(tmp_path, capsys, shadowing, rng):
    path, gamma, beta = shadowing
    out_path = tmp_path / "m.tflite"
    rc, out, err = run_cli(capsys, "export", path, "--to", "tflite", "--mode", "custom", "-o", str(out_path))
    assert rc == 0, err[-2000:]
    from bridge.litert import runtime
    feeds = _feeds(rng, 1)
    got = runtime.run_tflite_custom(out_path.read_bytes(), feeds)
    assert set(got) == {"seq", "pooled"}
    ref = _reference(feeds, gamma, beta)
    assert all(rule_excess(got[k], ref[k], 1e-4) <= 1 for k in ref)


def test_ge_bundle_and_parity(tmp_path, capsys, shadowing, rng):
    path, gamma, beta = shadowing
    ge = tmp_path / "ge"
    rc, out, err = run_cli(capsys, "export", path, "--to", "ge", "-o", str(ge))
    assert rc == 0, err[-2000:]
    assert "seq [builtin]" in out and "seq [custom]" in out  # verified under the model's name on both routes
    model = onnx.load(str(ge / "model.onnx"))
    assert [o.name for o in model.graph.output] == json.loads((ge / "names.json").read_text())["outputs"]
    assert "seq_output" in json.loads((ge / "names.json").read_text())["outputs"]
    from bridge.ascend import expand_builtin
    sess = ort.InferenceSession(expand_builtin(model).SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = _feeds(rng, 1)
    got = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    assert rule_excess(got["seq_output"], _reference(feeds, gamma, beta)["seq"], 1e-4) <= 1
    rc, out, err = run_cli(capsys, "parity", path, "--runtimes", "ort,ort-lowered,ge-builtin,tflite-custom")
    assert rc == 0, (out + err)[-3000:]
