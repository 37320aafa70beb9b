"""Outputs produced elsewhere (`--load-outputs RUNTIME=F`), e.g. on an Ascend board.

F is an `.npz` keyed by output name (or arr_0, arr_1, ... in output order), or a
directory of raw `.bin` files as Ascend's msame writes them (one file per
output, `<model>_output_<i>.bin`, no header): their shapes come from the
reference outputs, the dtype from the model unless the byte count says float16.
"Output order" is the producing runtime's when it has its own (`ge`: the
GE-bound model's outputs, which msame keeps), else the reference's.
"""
from __future__ import annotations

import os
import re
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from bridge.parity.inputs import InputError, load_npz
from bridge.untrusted import UntrustedNameError, inside


def parse_load_outputs(items: List[str]) -> List[Tuple[str, str]]:
    out = []
    for item in items or []:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise InputError(f"--load-outputs {item!r}: expected RUNTIME=FILE (an .npz or a folder of .bin files)")
        if not os.path.exists(path):
            raise InputError(f"--load-outputs {name}: no such file or folder: {path}")
        out.append((name, path))
    return out


def load_outputs(path: str, reference: Mapping[str, np.ndarray], what: str, order: Optional[Sequence[str]] = None,
                 aliases: Optional[Mapping[str, str]] = None) -> Dict[str, np.ndarray]:
    """Outputs keyed by the canonical names, shaped like the reference's.
    `order`: the canonical names in the order the producing runtime writes its
    outputs (positional arrays and .bin files follow it; default: the
    reference's order); `aliases`: {the runtime's own output name: canonical}."""
    names = list(reference)
    order = list(order) if order and sorted(order) == sorted(names) else names
    if os.path.isdir(path):
        return _from_bins(path, reference, what, order)
    data = load_npz(path, what)
    if all(n in data for n in names):
        return {n: data[n] for n in names}
    by_alias = {c: o for o, c in (aliases or {}).items() if c in reference}
    if by_alias and all(n in by_alias and by_alias[n] in data for n in names):
        return {n: data[by_alias[n]] for n in names}
    positional = [f"arr_{i}" for i in range(len(order))]
    if all(k in data for k in positional):
        return {n: data[k] for n, k in zip(order, positional)}
    if len(data) == len(names) and len(names) == 1:
        return {names[0]: next(iter(data.values()))}
    raise InputError(f"{what}: {path} has arrays {sorted(data)}, expected the outputs {names} (or arr_0..arr_{len(names)-1})")


def _index(fname: str) -> int:
    m = re.search(r"(\d+)\.bin$", fname)
    return int(m.group(1)) if m else -1


def _from_bins(folder: str, reference: Mapping[str, np.ndarray], what: str, names: Sequence[str]) -> Dict[str, np.ndarray]:
    files = sorted((f for f in os.listdir(folder) if f.endswith(".bin")), key=lambda f: (_index(f), f))
    for f in files:  # read only inside the folder: no link out of it
        try:
            inside(folder, f)
        except UntrustedNameError as e:
            raise InputError(f"{what}: refusing {e}") from None
    names = list(names)
    if len(files) != len(names):
        raise InputError(f"{what}: {folder} has {len(files)} .bin files ({', '.join(files) or 'none'}), the model has "
                         f"{len(names)} outputs ({', '.join(names)})")
    out = {}
    for name, fname in zip(names, files):
        ref = np.asarray(reference[name])
        size = os.path.getsize(os.path.join(folder, fname))
        dtype = ref.dtype
        if ref.size and size != ref.size * dtype.itemsize:
            candidates = [np.dtype(t) for t in ("float32", "float16", "int64", "int32")
                          if np.dtype(t).kind == dtype.kind or dtype.kind == "f"]
            fits = [d for d in candidates if size == ref.size * d.itemsize]
            if not fits:
                raise InputError(f"{what}: {fname} has {size} bytes; output {name!r} {list(ref.shape)} needs "
                                 f"{ref.size * dtype.itemsize} bytes as {dtype.name}")
            dtype = fits[0]
        data = np.fromfile(os.path.join(folder, fname), dtype=dtype)
        out[name] = data.reshape(ref.shape)
    return out
