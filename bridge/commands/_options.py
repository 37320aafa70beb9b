"""Option parsing that several subcommands share (modules starting with `_` are
not subcommands: bridge.cli skips them)."""
from __future__ import annotations

import json
from typing import Dict, Optional, Sequence


def parse_config(items: Optional[Sequence[str]]) -> Dict[str, object]:
    """`--config KEY=VALUE` items (built-in model options) as a dict; each value
    is read as JSON (numbers, booleans, lists) and kept as a string otherwise.
    UsageError for an item without `=` or without a key."""
    from bridge.cli import UsageError
    out: Dict[str, object] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--config {item!r}: expected KEY=VALUE")
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


def tensor_names(text: Optional[str]) -> list:
    """`--inputs`/`--outputs NAME:0,...` (a frozen GraphDef's tensors, as tf2onnx
    --graphdef takes them) as a list; none given is []."""
    return [t.strip() for t in text.split(",") if t.strip()] if text else []
