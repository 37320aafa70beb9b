"""bridge.atomic: a file appears whole or not at all, and no temporary is left."""
from __future__ import annotations

import os

import numpy as np
import pytest

from bridge import atomic


def _entries(folder):
    return sorted(os.listdir(folder))


def test_write_bytes_and_text_replace_whole_files(tmp_path):
    path = tmp_path / "deep" / "er" / "out.bin"   # missing folders are made
    assert atomic.write_bytes(path, b"\x00\x01payload") == str(path)
    assert path.read_bytes() == b"\x00\x01payload"
    atomic.write_text(path, "second ü\n")
    assert path.read_text(encoding="utf-8") == "second ü\n"
    assert _entries(path.parent) == ["out.bin"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "inputs.npz"
    atomic.write_bytes(path, b"old")
    with pytest.raises(RuntimeError, match="half way"):
        with atomic.replacing(path) as f:
            f.write(b"partial new content")
            raise RuntimeError("half way")
    assert path.read_bytes() == b"old"
    assert _entries(tmp_path) == ["inputs.npz"]
    with pytest.raises(ValueError):  # np.savez refuses an object array without pickling: nothing appears
        with atomic.replacing(tmp_path / "never.npz") as f:
            np.save(f, np.array([object()]), allow_pickle=False)
    assert _entries(tmp_path) == ["inputs.npz"]


def test_staging_folder_is_removed_however_the_block_ends(tmp_path):
    with atomic.staging_folder(tmp_path / "pkg", "model.onnx") as tmp:
        assert os.path.dirname(tmp) == str(tmp_path / "pkg") and os.path.basename(tmp).startswith(".model.onnx.")
        with open(os.path.join(tmp, "model.onnx"), "wb") as f:
            f.write(b"m")
        os.replace(os.path.join(tmp, "model.onnx"), tmp_path / "pkg" / "model.onnx")
        with open(os.path.join(tmp, "left.data"), "wb") as f:
            f.write(b"d")
    assert _entries(tmp_path / "pkg") == ["model.onnx"]
    with pytest.raises(KeyError):
        with atomic.staging_folder(tmp_path / "pkg", "other") as tmp:
            open(os.path.join(tmp, "x"), "wb").close()
            raise KeyError("stop")
    assert _entries(tmp_path / "pkg") == ["model.onnx"]
