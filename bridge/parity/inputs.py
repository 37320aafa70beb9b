"""Model inputs for a parity run: described, generated from a seed, saved and loaded.

The description, generation and checks are bridge.modelsource's, the ones
`bridge export` verifies with: floats in (0, 1] (images; never zero), integers
within the vocabulary of the embedding they index (the model says how large it
is) or [0, 2) when nothing says (masks, segment ids). Saved as `.npz` keyed by
input name, so the same inputs can be fed elsewhere (an Ascend board) and
reloaded here bit for bit.
"""
from __future__ import annotations

import os
from typing import Dict, Mapping, Tuple

import numpy as np

from bridge import atomic
from bridge.modelsource import ModelSourceError, TensorInfo, check, generate
from bridge.untrusted import write_npz

__all__ = ["InputError", "TensorInfo", "check", "generate", "load", "load_npz", "save", "shapes_of"]

# Bad inputs (a missing name, a wrong shape or dtype, an unreadable file) and a
# bad MODEL are one usage error: the CLI exits 2 on either.
InputError = ModelSourceError


def save(path: str, arrays: Mapping[str, np.ndarray]) -> None:
    """Writes an .npz atomically (a temp file renamed into place), keyed by the
    input names verbatim (bridge.untrusted.write_npz)."""
    with atomic.replacing(path) as f:
        write_npz(f, arrays)


def load(path: str) -> Dict[str, np.ndarray]:
    return load_npz(path, "--load-inputs")


def load_npz(path: str, what: str) -> Dict[str, np.ndarray]:
    if not os.path.isfile(path):
        raise InputError(f"{what}: no such file: {path}")
    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except Exception as e:  # a zip that is not an npz, a truncated file, pickled objects
        raise InputError(f"{what}: {path} is not a readable .npz file ({type(e).__name__}: {e})") from None


def shapes_of(arrays: Mapping[str, np.ndarray]) -> Dict[str, Tuple[int, ...]]:
    return {k: tuple(v.shape) for k, v in arrays.items()}
