"""Which standard ONNX op types ATC's parser takes, at which opsets, per CANN
release: the shipped CSV (see SOURCES.md), narrowed for older releases."""
from __future__ import annotations

import csv
import os
from functools import lru_cache
from typing import Dict, Set

CSV_PATH = os.path.join(os.path.dirname(__file__), "atc_onnx_ops.csv")
ANY = "any"
# What each release's documentation promises for the default domain (None: the CSV as is).
CANN_OPSETS = {5: range(9, 14), 6: range(9, 14), 7: range(9, 19), 8: None}
DEFAULT_CANN = 8


def _parse_opsets(text: str):
    if text.strip() == ANY:
        return ANY
    out: Set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.strip().partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return frozenset(out)


@lru_cache(maxsize=None)
def table() -> Dict[str, object]:
    """{op_type: frozenset of opsets, or "any"}."""
    with open(CSV_PATH, newline="", encoding="utf-8") as f:
        return {row["op_type"]: _parse_opsets(row["opsets"]) for row in csv.DictReader(f)}


def registered_opsets(op_type: str, cann: int = DEFAULT_CANN):
    """The opsets at which `ai.onnx::<opset>::<op_type>` is registered (a set,
    "any", or empty when the op is not registered at all)."""
    if cann not in CANN_OPSETS:
        raise ValueError(f"cann must be one of {sorted(CANN_OPSETS)}, got {cann!r}")
    found = table().get(op_type, frozenset())
    window = CANN_OPSETS[cann]
    if found == ANY or window is None:
        return found
    return frozenset(v for v in found if v in window)


def is_registered(op_type: str, opset: int, cann: int = DEFAULT_CANN) -> bool:
    found = registered_opsets(op_type, cann)
    return found == ANY or opset in found


def describe(op_type: str, cann: int = DEFAULT_CANN) -> str:
    found = registered_opsets(op_type, cann)
    if found == ANY:
        return "any opset"
    if not found:
        return "no opset"
    vs = sorted(found)
    spans, start = [], vs[0]
    for a, b in zip(vs, vs[1:] + [None]):
        if b != a + 1:
            spans.append(f"{start}-{a}" if a != start else str(a))
            start = b
    return "opsets " + ",".join(spans)
