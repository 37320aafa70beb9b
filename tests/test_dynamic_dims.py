"""Dims a model leaves open (issue 25, part 1): no error and no --input-shape
needed. ONNX keeps them symbolic and TFLite as -1 (both then run at other
lengths, checked against the Keras model itself), the verification and parity
run at a sample shape the progress line names (batch 1, the model's own
max_sequence_length or 16), the GE bundle fixes the sample shape and says so,
and a file that fails its verification is not written."""
from __future__ import annotations

import os

import numpy as np
import pytest

keras = pytest.importorskip("keras")
ort = pytest.importorskip("onnxruntime")
import onnx  # noqa: E402

from bridge import modelsource  # noqa: E402
from conftest import rule_excess, run_cli  # noqa: E402


@pytest.fixture(scope="module")
def text_classifier(tmp_path_factory):
    """keras.Input((None,), dtype="int32"): a length nobody fixed (a LayerNorm, so a fused op is in it)."""
    keras.utils.set_random_seed(5)
    ids = keras.Input((None,), dtype="int32", name="ids")
    h = keras.layers.Embedding(41, 8)(ids)
    h = keras.layers.LayerNormalization()(h)
    h = keras.layers.GlobalAveragePooling1D()(h)
    model = keras.Model(ids, keras.layers.Dense(3, activation="softmax", name="probs")(h))
    path = tmp_path_factory.mktemp("textcls") / "textcls.keras"
    model.save(path)
    return str(path), model


def _symbolic(path):
    g = onnx.load(path).graph
    return {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim] for i in g.input}


def test_text_classifier_exports_with_no_flag_and_keeps_its_dims_open(tmp_path, capsys, text_classifier, rng):
    path, model = text_classifier
    out_path = tmp_path / "t.onnx"
    rc, out, err = run_cli(capsys, "export", path, "--to", "onnx", "-o", str(out_path))
    assert rc == 0, err[-2000:]
    assert "ids[?,?]" in err and "ids[1,16]" in err  # the progress line: open dims, the sample run
    dims = _symbolic(str(out_path))["ids"]
    assert len(dims) == 2 and all(isinstance(d, str) and d for d in dims), dims  # both symbolic
    # the file takes other lengths (and batches): onnxruntime against the Keras model itself
    from bridge import onnx_plugins
    sess = onnx_plugins.session(str(out_path), kernels="all")
    for shape in [(1, 1), (3, 23), (2, 16)]:
        ids = rng.integers(0, 41, size=shape).astype(np.int32)
        got = sess.run(None, {"ids": ids})[0]
        ref = np.asarray(model(ids, training=False), np.float64)
        assert rule_excess(got, ref, 1e-4) <= 1, shape


def test_text_classifier_tflite_and_ge_take_it_too(tmp_path, capsys, text_classifier, rng):
    path, model = text_classifier
    rc, out, err = run_cli(capsys, "export", path, "--to", "tflite", "-o", str(tmp_path / "t.tflite"))
    assert rc == 0, err[-2000:]
    from bridge.parity.runtimes.tflite import run_tflite
    data = (tmp_path / "t.tflite").read_bytes()
    for shape in [(1, 5), (2, 31)]:  # -1 in the file: the signature runner resizes
        ids = rng.integers(0, 41, size=shape).astype(np.int32)
        got = run_tflite(data, {"ids": ids})["probs"]
        assert rule_excess(got, np.asarray(model(ids, training=False), np.float64), 1e-4) <= 1, shape
    ge = tmp_path / "ge"
    rc, out, err = run_cli(capsys, "export", path, "--to", "ge", "-o", str(ge))
    assert rc == 0, err[-2000:]
    assert "fixed at the verified sample shape for ATC: ids[1, 16]" in out
    assert "`ids[1, 16]`" in (ge / "README.md").read_text() and "--dynamic_dims" in (ge / "README.md").read_text()
    assert "input_shape='ids:1,16'" in (ge / "atc.sh").read_text()


def test_parity_runs_at_the_sample_shape(capsys, text_classifier):
    path, _ = text_classifier
    rc, out, err = run_cli(capsys, "parity", path, "--runtimes", "ort,tflite,tflite-custom,ge")
    assert rc == 0, (out + err)[-3000:]
    assert "ids[1,16]" in err


def test_the_sample_follows_the_models_own_bound():
    """A length the model's config bounds (keras_hub's max_sequence_length; any
    Keras layer's) is sampled within it, at most MAX_SAMPLE_LENGTH; else 16."""
    class Bounded(keras.layers.Layer):
        def __init__(self, n, **kw):
            super().__init__(**kw)
            self.max_sequence_length = n

        def call(self, x):
            return x

    for n, want in [(8, 8), (16, 16), (512, modelsource.MAX_SAMPLE_LENGTH)]:
        x = keras.Input((None,), dtype="int32", name="ids")
        src = modelsource.from_object(keras.Model(x, Bounded(n)(x)))
        assert src.concrete_shapes() == {"ids": (1, want)}, n
        assert f"max_sequence_length {n}" in src.sample_note()
    x = keras.Input((None, None, 3), name="image")
    src = modelsource.from_object(keras.Model(x, keras.layers.Conv2D(2, 3)(x)))
    assert src.concrete_shapes(2) == {"image": (2, 32, 32, 3)}
    fixed = modelsource.from_object(keras.Model(x, keras.layers.Conv2D(2, 3)(x)), input_shapes=["image:1,9,7,3"])
    assert fixed.concrete_shapes() == {"image": (1, 9, 7, 3)} and fixed.sample_note() == ""


@pytest.fixture(scope="module")
def bert_file(tmp_path_factory):
    """A keras_hub BertBackbone from a small config, as keras_hub saves it; its
    max_sequence_length (8) is below bridge's default 16, which its position
    embedding would refuse."""
    keras_hub = pytest.importorskip("keras_hub")
    keras.utils.set_random_seed(2)
    model = keras_hub.models.BertBackbone(vocabulary_size=53, num_layers=1, num_heads=2, hidden_dim=8,
                                          intermediate_dim=16, max_sequence_length=8)
    path = tmp_path_factory.mktemp("bert") / "bert.keras"
    model.save(path)
    return str(path)


def test_keras_hub_backbone_exports_and_passes_parity_with_no_flag(tmp_path, capsys, bert_file):
    out_path = tmp_path / "bert.onnx"
    rc, out, err = run_cli(capsys, "export", bert_file, "--to", "onnx", "-o", str(out_path))
    assert rc == 0, err[-2000:]
    assert "token_ids[1,8]" in err and "max_sequence_length 8" in err, (out[-500:], err[-1500:])
    dims = _symbolic(str(out_path))
    assert set(dims) == {"token_ids", "padding_mask", "segment_ids"}
    assert all(isinstance(d, str) for v in dims.values() for d in v), dims
    # the LiteRT harness cannot resize the file's open length: parity's tflite-custom runs a file at the run's shapes
    rc, out, err = run_cli(capsys, "parity", bert_file, "--runtimes", "ort,tflite,tflite-custom")
    assert rc == 0, (out + err)[-3000:]


@pytest.mark.slow
def test_gpt2_backbone_every_road_with_no_flag(tmp_path, capsys):
    keras_hub = pytest.importorskip("keras_hub")
    model = keras_hub.models.GPT2Backbone(vocabulary_size=53, num_layers=1, num_heads=2, hidden_dim=8,
                                          intermediate_dim=16, max_sequence_length=12)
    path = str(tmp_path / "gpt2.keras")
    model.save(path)
    for to, extra in [("onnx", []), ("onnx", ["--mode", "lowered"]), ("tflite", []), ("tflite", ["--mode", "custom"]),
                      ("ge", [])]:
        rc, out, err = run_cli(capsys, "export", path, "--to", to, *extra, "-o", str(tmp_path / f"g-{to}{len(extra)}"))
        assert rc == 0, (to, extra, err[-2000:])
    rc, out, err = run_cli(capsys, "parity", path)
    assert rc == 0, (out + err)[-3000:]


# -- a failed verification leaves nothing behind -----------------------------------
def _planted_wrong(outputs):
    """A runtime that computes the wrong thing: every float output shifted."""
    return {k: (v + np.float32(0.5)) if np.asarray(v).dtype.kind == "f" else v for k, v in outputs.items()}


@pytest.mark.parametrize("to", ["onnx", "tflite", "ge"])
def test_a_file_that_fails_its_verification_is_not_written(tmp_path, capsys, monkeypatch, text_classifier, to):
    from bridge.parity.onnx_base import OnnxRuntime
    from bridge.parity.runtimes.tflite import TFLite
    path, _ = text_classifier
    # the verifier's parity rows (ort for onnx, both GE routes for ge, tflite) compute the wrong thing
    row = TFLite if to == "tflite" else OnnxRuntime
    real = row.run
    monkeypatch.setattr(row, "run", lambda self, *a, **k: _planted_wrong(real(self, *a, **k)))
    dst = tmp_path / f"out-{to}"
    if to != "ge":
        dst.write_bytes(b"an earlier good export")
    rc, out, err = run_cli(capsys, "export", path, "--to", to, "-o", str(dst))
    assert rc == 1
    assert "FAILED" in out and out.strip().splitlines()[-1].endswith(
        "not written: the verification failed (a file that fails its check is not written; --no-verify writes "
        "it unchecked)"), out
    if to == "ge":
        assert not dst.exists() or os.listdir(dst) == []
    else:
        assert dst.read_bytes() == b"an earlier good export"  # not replaced either
    assert [n for n in os.listdir(tmp_path) if n != dst.name] == []  # no staging leftovers
