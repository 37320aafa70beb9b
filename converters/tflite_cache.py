"""TFLite files converted once per model: `bridge export --to tflite` and
`bridge parity`'s TFLite rows look a conversion up here before converting.

TF's converter is the slowest and largest step of either (YOLOv3-416: ~40 s
and several GB for the trace, the freezing and the MLIR conversion), and its
answer depends only on what goes in. The key is a hash of exactly that:

- the model's bytes: a SavedModel folder's or a frozen `.pb`'s files; a Keras
  model's config, its weights (names, shapes, dtypes, bytes) and the source
  files of every layer class not Keras' own (a custom layer's `call` is code);
- the converter: TensorFlow's and Keras' versions, and the bridge code a
  conversion goes through (CODE_PACKAGES and CODE_MODULES: the op specs, the
  fusion, the exporters, the TF ops, tracing; any change converts again); a
  team op's spec file where one is registered;
- the options: mode, quantisation, fusion on/off, the input signature (names,
  shapes, dtypes) and the output names.

bridge parity's ONNX exports (bridge.parity.export) are kept the same way
(`.onnx`, the run's input shapes and the opset among the options).

A model the key cannot be made for (a SavedModel object with no folder, a
class whose source cannot be read) is simply converted each time. Files are
written atomically (bridge.atomic) under `$BRIDGE_CACHE/tflite` (default
`~/.cache/bridge/tflite`); a hit is read back whole. The folder is kept under
`BRIDGE_TFLITE_CACHE_MB` (default 4096) by dropping the least recently used
files; `BRIDGE_TFLITE_CACHE=0` turns the cache off, `BRIDGE_TFLITE_CACHE=DIR`
puts it in DIR. A cached file is judged like a fresh one (the export's
verification, parity's comparison), so a stale file could only fail, never
pass in its place.
"""
from __future__ import annotations

import hashlib
import inspect
import json
import os
import sys
from pathlib import Path
from typing import Callable, Iterable, Optional, Sequence, Tuple

from bridge import atomic

SUFFIX = ".tflite"
ONNX = ".onnx"          # bridge parity's ONNX exports (bridge.parity.export) are kept here too
SUFFIXES = (SUFFIX, ONNX)
_CODE_DIGEST: Optional[str] = None


def _setting() -> str:
    return os.environ.get("BRIDGE_TFLITE_CACHE", "").strip()


def enabled() -> bool:
    return _setting().lower() not in ("0", "off", "no", "false")


def folder() -> Path:
    """`$BRIDGE_TFLITE_CACHE` when it names a folder, else `$BRIDGE_CACHE/tflite`."""
    setting = _setting()
    if setting and setting.lower() not in ("1", "on", "yes", "true"):
        return Path(setting).expanduser()
    from bridge.native import cache_root
    return cache_root() / "tflite"


def limit_bytes() -> int:
    try:
        mb = float(os.environ.get("BRIDGE_TFLITE_CACHE_MB", "4096"))
    except ValueError:
        mb = 4096.0
    return int(mb * 1024 * 1024)


# -- the key -------------------------------------------------------------------
def _hash_files(h, root: Path, files: Iterable[Path]) -> None:
    for f in sorted(files):
        h.update(str(f.relative_to(root)).encode() + b"\0")
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 22), b""):
                h.update(block)
        h.update(b"\0")


# What shapes a conversion besides the model: the op specs (patterns, composites),
# the fusion and the exporters, the TF ops (their wrappers, and the op
# registrations compiled into the library), the ONNX functions and schemas,
# how a model is traced (modelsource), and what parity hands the converters.
CODE_PACKAGES = ("bridge.ops", "bridge.converters", "bridge.tf_ops", "bridge.onnx_plugins")
CODE_MODULES = ("bridge.modelsource", "bridge.parity.runtimes.tflite", "bridge.parity.export")
CODE_SUFFIXES = (".py", ".cc", ".h")


def code_digest() -> str:
    """bridge's own code a conversion depends on (CODE_PACKAGES, CODE_MODULES), once per process."""
    global _CODE_DIGEST
    if _CODE_DIGEST is None:
        import importlib.util
        h = hashlib.sha256()
        for name in CODE_PACKAGES:
            spec = importlib.util.find_spec(name)
            for root in sorted(Path(p).resolve() for p in spec.submodule_search_locations or ()):
                h.update(name.encode() + b"\0")
                _hash_files(h, root, (p for p in root.rglob("*") if p.suffix in CODE_SUFFIXES and p.is_file()
                                      and "__pycache__" not in p.parts))
        for name in CODE_MODULES:
            origin = Path(importlib.util.find_spec(name).origin).resolve()
            h.update(name.encode() + b"\0")
            _hash_files(h, origin.parent, [origin])
        _CODE_DIGEST = h.hexdigest()
    return _CODE_DIGEST


def _team_specs() -> list:
    """(op, hash of its spec file) for every op registered from a file (a team's)."""
    try:
        from bridge.ops.registry import ORIGINS
    except ImportError:
        return []
    out = []
    for op, origin in sorted(ORIGINS.items()):
        if origin != "bridge" and os.path.isfile(origin):
            out.append((op, hashlib.sha256(Path(origin).read_bytes()).hexdigest()))
        elif origin != "bridge":
            out.append((op, origin))
    return out


def _keras_digest(model) -> Optional[str]:
    import numpy as np
    h = hashlib.sha256()
    try:
        config = model.get_config()
    except Exception:  # noqa: BLE001 - a model without a config: no key
        return None
    h.update(json.dumps(config, sort_keys=True, default=repr).encode())
    h.update(type(model).__qualname__.encode())
    for w in model.weights:
        a = np.ascontiguousarray(np.asarray(w))
        h.update(f"{getattr(w, 'path', w.name)}|{a.shape}|{a.dtype}".encode())
        h.update(memoryview(a).cast("B"))
    files = set()
    for obj in [model] + list(model._flatten_layers(include_self=False, recursive=True)):
        cls = type(obj)
        if cls.__module__.split(".")[0] in ("keras", "tf_keras"):
            continue  # Keras' own layers: its version is in the key
        try:
            files.add(inspect.getsourcefile(cls))
        except (TypeError, OSError):
            return None
    for f in sorted(f for f in files if f):
        if not os.path.isfile(f):
            return None
        h.update(f.encode() + b"\0" + hashlib.sha256(Path(f).read_bytes()).digest())
    return h.hexdigest()


def model_digest(resolved) -> Optional[str]:
    """A hash of the model's bytes (see the module doc); None where there is none."""
    kind = getattr(resolved, "kind", None)
    path = getattr(resolved, "path", None)
    if kind in ("savedmodel", "graphdef"):
        if not path or not os.path.exists(path):
            return None
        p = Path(path).resolve()
        h = hashlib.sha256(kind.encode())
        if p.is_dir():
            _hash_files(h, p, (f for f in p.rglob("*") if f.is_file()))
        else:
            _hash_files(h, p.parent, [p])
        return h.hexdigest()
    if kind in ("builtin", "keras"):
        return _keras_digest(resolved.model)
    return None


def key(resolved, *, mode: str, quantize: str, fuse: bool = True, inputs: Optional[Sequence] = None,
        output_names: Optional[Sequence[str]] = None, digest: Optional[str] = None,
        extra: Optional[dict] = None) -> Optional[str]:
    """The cache key of one conversion of `resolved` (a bridge.modelsource.ResolvedModel);
    `inputs`: the input signature converted at (TensorInfos; the model's own by
    default); `digest`: model_digest(resolved) where the caller has it; `extra`:
    any other option (JSON). None when the cache is off or the model has no digest."""
    if not enabled():
        return None
    digest = digest or model_digest(resolved)
    if digest is None:
        return None
    import tensorflow as tf
    keras = sys.modules.get("keras")
    ins = [(i.name, [None if d is None or d < 0 else int(d) for d in i.shape], str(i.dtype))
           for i in (inputs if inputs is not None else resolved.inputs)]
    parts = {"model": digest, "tensorflow": [tf.__version__, tf.version.GIT_VERSION],
             "keras": getattr(keras, "__version__", None), "bridge": code_digest(), "team_ops": _team_specs(),
             "mode": mode, "quantize": quantize, "fuse": bool(fuse), "inputs": ins,
             "outputs": list(output_names if output_names is not None else resolved.output_names),
             "extra": extra or {}}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


# -- the files -------------------------------------------------------------------
def path_of(k: str, suffix: str = SUFFIX) -> Path:
    return folder() / f"{k}{suffix}"


def load(k: Optional[str], suffix: str = SUFFIX) -> Optional[bytes]:
    """The file cached under `k`, or None."""
    if not k:
        return None
    p = path_of(k, suffix)
    try:
        data = p.read_bytes()
    except OSError:
        return None
    try:
        os.utime(p)  # recently used: the last to go
    except OSError:
        pass
    return data


def store(k: Optional[str], data: bytes, suffix: str = SUFFIX) -> None:
    """Caches `data` under `k` (atomically), then trims the folder to its limit.
    A cache that cannot be written (read-only home, full disk) is no error."""
    if not k:
        return
    try:
        atomic.write_bytes(path_of(k, suffix), data)
        trim()
    except OSError:
        pass


def trim(limit: Optional[int] = None) -> None:
    """Drops the least recently used files until the folder holds at most `limit` bytes."""
    limit = limit_bytes() if limit is None else limit
    try:
        files = [(f.stat().st_mtime, f.stat().st_size, f) for f in folder().iterdir() if f.suffix in SUFFIXES]
    except OSError:
        return
    total = sum(s for _, s, _ in files)
    for _, size, f in sorted(files, key=lambda t: t[0]):
        if total <= limit:
            break
        try:
            f.unlink()
            total -= size
        except OSError:
            pass


def converted(k: Optional[str], convert: Callable[[], bytes]) -> Tuple[bytes, bool]:
    """(the TFLite file, whether it came from the cache): the cached file under
    `k`, else `convert()`'s, cached."""
    data = load(k)
    if data is not None:
        return data, True
    data = convert()
    store(k, data)
    return data, False
