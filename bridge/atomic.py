"""Files that appear whole or not at all. Everything bridge writes for a user
goes through here: the bytes land under a hidden temporary name in the
destination's own folder (same file system, so the final rename is atomic) and
are renamed into place only once complete; a failure leaves nothing behind.

    from bridge import atomic
    atomic.write_bytes("model.tflite", data)
    with atomic.replacing("inputs.npz") as f:          # a binary file object
        np.savez(f, **arrays)
    with atomic.staging_folder(out_dir, "model.onnx") as tmp:  # several files,
        ...                                            # moved in with os.replace
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from typing import IO, Iterator


def _destination(path) -> str:
    path = os.path.abspath(os.fspath(path))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    return path


@contextlib.contextmanager
def replacing(path, mode: str = "wb") -> Iterator[IO]:
    """An open temporary file beside `path`, renamed onto `path` when the block
    ends normally and deleted when it raises."""
    path = _destination(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, mode) as f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_bytes(path, data: bytes) -> str:
    """Writes `data` to `path` atomically; the absolute path written."""
    with replacing(path) as f:
        f.write(data)
    return os.path.abspath(os.fspath(path))


def write_text(path, text: str) -> str:
    """Writes `text` (UTF-8) to `path` atomically; the absolute path written."""
    return write_bytes(path, text.encode("utf-8"))


@contextlib.contextmanager
def staging_folder(folder, name: str) -> Iterator[str]:
    """A temporary folder inside `folder` (created if missing) for a set of
    files the caller moves into place with os.replace once all are written;
    whatever is left in it is removed when the block ends, however it ends."""
    folder = os.path.abspath(os.fspath(folder))
    os.makedirs(folder, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{name}.", dir=folder)
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def replacing_folder(path) -> Iterator[str]:
    """A temporary folder beside `path` to write a whole folder into (a
    SavedModel); renamed onto `path` when the block ends normally (a folder
    already there is replaced, not merged), removed when it raises."""
    path = _destination(path)
    if os.path.exists(path) and not os.path.isdir(path):
        raise FileExistsError(f"{path} exists and is not a folder")
    tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=os.path.dirname(path))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)  # a folder as os.makedirs makes it, not mkdtemp's private one
    try:
        yield tmp
        if os.path.isdir(path):
            old = tempfile.mkdtemp(prefix=f".{os.path.basename(path)}.", suffix=".old", dir=os.path.dirname(path))
            os.replace(path, os.path.join(old, "x"))
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
