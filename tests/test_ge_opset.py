"""`bridge export --to ge` without --opset converts at the lowest opset ATC takes
that the model needs (11 unless tf2onnx refuses it there), and says so; with
--opset, a model that needs more fails naming the opset. The case: GatherV2 with
batch_dims (keras_hub's DeBERTa-v3 relative attention), which tf2onnx's handler
converts from opset 12 on."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import tensorflow as tf

from bridge import modelsource
from bridge.converters import export_ge, export_onnx
from bridge.parity import verify
from bridge.exporting import ExportError, quiet

INDICES = np.array([[4, 0, 2, 2], [1, 3, 0, 4]], np.int32)   # (batch 2, 4 picks) into 5 rows


def _batch_gather_model():
    import keras

    class BatchGather(keras.layers.Layer):
        def call(self, x):
            return tf.gather(x, tf.constant(INDICES), batch_dims=1)

    x = keras.Input((5, 3), batch_size=2, name="x")
    return keras.Model(x, BatchGather(name="batch_gather")(x) * 2.0)


def _reference(x):
    return np.take_along_axis(x.astype(np.float64), INDICES[:, :, None].astype(np.int64), axis=1) * 2.0


def test_needed_opset_reads_tf2onnx_refusals():
    assert export_onnx.needed_opset("make_sure failure: Opset 12 required for batch_dims attribute of GatherV2") == 12
    assert export_onnx.needed_opset("ExpandDims with non-const axes requires opset 13") == 13
    assert export_onnx.needed_opset("squeeze with negative axes and unknown rank requires opset >= 11") == 11
    assert export_onnx.needed_opset("Opset 11 is required for bicubic interpolation for node n") == 11
    assert export_onnx.needed_opset("Unsupported dtype for node n") is None


def test_batch_gather_converts_from_opset_12_and_matches_numpy():
    src = modelsource.from_object(_batch_gather_model(), input_shapes={"x": (2, 5, 3)})
    fn, sig = src.function(), src.signature()
    with pytest.raises(export_onnx.OpsetTooLow, match=r"export with --opset 12 or higher") as refused:
        export_onnx.convert_raw(fn, sig, opset=11)
    assert refused.value.opset == 12 and "GatherV2" in str(refused.value)
    (model, _), opset, note = export_onnx.at_lowest_opset(
        lambda o: export_onnx.convert_raw(fn, sig, opset=o), [11, 12, 13])
    assert opset == 12 and note.startswith("opset 12: at opset 11") and "GatherV2" in note
    x = np.random.default_rng(5).uniform(-2, 2, (2, 5, 3)).astype(np.float32)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = sess.run(None, {sess.get_inputs()[0].name: x})[0]
    np.testing.assert_allclose(got, _reference(x), rtol=1e-6, atol=1e-6)


def test_at_lowest_opset_stops_where_no_allowed_opset_will_do():
    tried = []

    def convert(opset):
        tried.append(opset)
        raise export_onnx.OpsetTooLow(f"needs 14 (at {opset})", 14, "X is not an ONNX op")
    with pytest.raises(export_onnx.OpsetTooLow, match=r"needs 14 \(at 11\)"):
        export_onnx.at_lowest_opset(convert, [11, 12, 13])
    assert tried == [11]  # 12 and 13 cannot do: not tried
    tried.clear()

    def convert_once(opset):
        tried.append(opset)
        if opset < 13:
            raise export_onnx.OpsetTooLow("", 13, "why")
        return "model"
    assert export_onnx.at_lowest_opset(convert_once, [11, 12, 13, 14]) == ("model", 13, "opset 13: at opset 11 why")
    assert tried == [11, 13]  # 12 is skipped: the refusal named 13


def test_export_to_ge_picks_opset_12_and_a_given_opset_names_it(tmp_path):
    src = modelsource.from_object(_batch_gather_model(), input_shapes={"x": (2, 5, 3)})
    result = verify.export(export_ge, src, str(tmp_path / "ge"), progress=quiet())
    assert result.ok, result.summary
    assert any(line.startswith("opset 12: at opset 11") for line in result.summary), result.summary
    assert result.details["opset"] == 12
    import onnx
    written = onnx.load(str(tmp_path / "ge" / "model.onnx"))
    assert {o.domain: o.version for o in written.opset_import}[""] == 12
    with pytest.raises(ExportError, match=r"at opset 11: export with --opset 12 or higher"):
        verify.export(export_ge, src, str(tmp_path / "ge11"), opset=11, progress=quiet())
    assert not (tmp_path / "ge11").exists()  # nothing half-written


@pytest.mark.slow
def test_deberta_v3_backbone_exports_to_ge(tmp_path, capsys):
    """keras_hub's DebertaV3Backbone (a tiny config, as benchmarks/zoo.py builds
    it) through the CLI: opset 12 chosen and said, the routes verified."""
    keras_hub = pytest.importorskip("keras_hub")
    from bridge.cli import main
    model = keras_hub.models.DebertaV3Backbone(vocabulary_size=97, num_layers=1, num_heads=2, hidden_dim=16,
                                               intermediate_dim=32, max_sequence_length=32, bucket_size=8)
    path = str(tmp_path / "deberta.keras")
    model.save(path)
    shapes = ["--input-shape", "token_ids:1,7", "--input-shape", "padding_mask:1,7"]
    rc = main(["export", path, "--to", "ge", "-o", str(tmp_path / "ge"), *shapes])
    out, err = capsys.readouterr()
    assert rc == 0, err[-3000:]
    assert "opset 12: at opset 11" in out + err and "GatherV2" in out + err
    rc = main(["export", path, "--to", "ge", "-o", str(tmp_path / "ge11"), "--opset", "11", *shapes])
    out, err = capsys.readouterr()
    assert rc == 1 and "--opset 12 or higher" in err and "Traceback" not in err
