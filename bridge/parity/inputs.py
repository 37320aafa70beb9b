"""Model inputs for a parity run: described, generated from a seed, saved and loaded.

Generated data has the input's dtype and a sensible range: floats in [0, 1]
(images), integers within the vocabulary of the embedding they index (the
source says how large it is) or [0, 2) when nothing says (masks, segment ids).
Saved as `.npz` keyed by input name, so the same inputs can be fed elsewhere
(an Ascend board) and reloaded here bit for bit.
"""
from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np


class InputError(ValueError):
    """Bad inputs: a missing name, a wrong shape or dtype, an unreadable file."""


@dataclass(frozen=True)
class InputSpec:
    name: str
    shape: Tuple[Optional[int], ...]   # None: not fixed by the model
    dtype: str                         # numpy name
    high: Optional[int] = None         # integers: exclusive upper bound (vocabulary size)

    def concrete(self, batch: int, override: Optional[Sequence[int]] = None) -> Tuple[int, ...]:
        if override is not None:
            if len(override) != len(self.shape):
                raise InputError(f"--input-shape {self.name}: {len(override)} dims given, the model's input "
                                 f"{self.name} has rank {len(self.shape)} {_dims(self.shape)}")
            for given, fixed in zip(override, self.shape):
                if fixed is not None and given != fixed:
                    raise InputError(f"--input-shape {self.name}:{','.join(map(str, override))} does not fit the "
                                     f"model's input shape {_dims(self.shape)}")
            return tuple(int(d) for d in override)
        shape = list(self.shape)
        if shape and shape[0] is None:
            shape[0] = batch
        if any(d is None for d in shape):
            raise InputError(f"input {self.name} has unknown dims {_dims(self.shape)}: give them with "
                             f"--input-shape {self.name}:" + ",".join("D" if d is None else str(d) for d in shape))
        return tuple(int(d) for d in shape)


def _dims(shape) -> str:
    return "[" + ",".join("?" if d is None else str(d) for d in shape) + "]"


def generate(specs: Sequence[InputSpec], shapes: Mapping[str, Tuple[int, ...]], seed: int) -> Dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for spec in specs:
        shape = shapes[spec.name]
        dt = np.dtype(spec.dtype)
        if dt.kind == "f":
            out[spec.name] = rng.uniform(0.0, 1.0, size=shape).astype(dt)
        elif dt.kind in "iu":
            high = spec.high if spec.high else 2
            out[spec.name] = rng.integers(0, high, size=shape).astype(dt)
        elif dt.kind == "b":
            out[spec.name] = rng.integers(0, 2, size=shape).astype(bool)
        else:
            raise InputError(f"input {spec.name}: cannot generate data of dtype {dt.name}; pass --load-inputs")
    return out


def check(specs: Sequence[InputSpec], arrays: Mapping[str, np.ndarray], origin: str) -> Dict[str, np.ndarray]:
    """Inputs given from outside must name every model input with the right
    rank and dtype (fixed dims must match)."""
    names = [s.name for s in specs]
    missing = [n for n in names if n not in arrays]
    if missing:
        raise InputError(f"{origin}: no array for input {missing[0]!r}; it has {sorted(arrays)}, the model needs {names}")
    out = {}
    for spec in specs:
        a = np.asarray(arrays[spec.name])
        if len(a.shape) != len(spec.shape) or any(f is not None and f != d for f, d in zip(spec.shape, a.shape)):
            raise InputError(f"{origin}: input {spec.name!r} has shape {list(a.shape)}, the model wants {_dims(spec.shape)}")
        if a.dtype != np.dtype(spec.dtype):
            if np.dtype(spec.dtype).kind != a.dtype.kind:
                raise InputError(f"{origin}: input {spec.name!r} has dtype {a.dtype.name}, the model wants {spec.dtype}")
            a = a.astype(spec.dtype)
        out[spec.name] = a
    return out


def save(path: str, arrays: Mapping[str, np.ndarray]) -> None:
    """Writes an .npz atomically (a temp file renamed into place)."""
    save_npz(path, arrays)


def save_npz(path: str, arrays: Mapping[str, np.ndarray]) -> None:
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(suffix=".npz", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **{k: np.asarray(v) for k, v in arrays.items()})
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


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


def parse_input_shapes(items: Optional[List[str]]) -> Dict[str, Tuple[int, ...]]:
    """`NAME:D,D,...` (repeatable; a single unnamed `D,D,...` applies to the only input)."""
    out: Dict[str, Tuple[int, ...]] = {}
    for item in items or []:
        name, sep, dims = item.rpartition(":")
        if not sep:
            name, dims = "", item
        try:
            shape = tuple(int(d) for d in dims.replace("x", ",").split(",") if d.strip() != "")
        except ValueError:
            raise InputError(f"--input-shape {item!r}: expected NAME:D,D,... with integer dims") from None
        if not shape or any(d < 0 for d in shape):
            raise InputError(f"--input-shape {item!r}: expected NAME:D,D,... with non-negative integer dims")
        out[name] = shape
    return out
