"""The built-in MiniLM at any sequence length: one model built with
input_size="?" gives, at every length, what the model built for that length
gives, and sentence-transformers' stored embeddings at its max_seq_length."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

keras = pytest.importorskip("keras")

from bridge import models  # noqa: E402
from bridge.models import minilm  # noqa: E402

REFERENCE = Path(__file__).parent / "data" / "minilm_reference.json"
MISSING = [m for m in (minilm._MODULE, "safetensors", "tokenizers") if importlib.util.find_spec(m) is None]
pytestmark = pytest.mark.skipif(bool(MISSING), reason=f"MiniLM needs {MISSING} ({minilm.INSTALL})")


@pytest.fixture(scope="module")
def dynamic():
    return models.build("minilm", "?")


def test_the_dynamic_model_takes_any_length(dynamic):
    assert tuple(dynamic.inputs[0].shape) == (None, None)
    sentences = minilm.sample_sentences(3, seed=1)
    for length in (3, 7, 22):  # (the tokenizer needs room for [CLS] and [SEP])
        x = minilm.tokenize(sentences, length)
        ref = np.asarray(models.build("minilm", length)(x))
        np.testing.assert_allclose(np.asarray(dynamic(x)), ref, atol=1e-6)


def test_at_max_seq_length_it_matches_sentence_transformers(dynamic):
    reference = json.loads(REFERENCE.read_text())
    x = minilm.tokenize(reference["sentences"], reference["max_seq_length"])
    got = np.asarray(dynamic(x), np.float64)
    want = np.asarray(reference["embeddings"], np.float64)
    assert np.abs(got - want).max() < 1e-5


def test_bad_length_names_the_dynamic_choice():
    with pytest.raises(ValueError, match=r"or '\?' \(any length\)"):
        models.build("minilm", "x")
