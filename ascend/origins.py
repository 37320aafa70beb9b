"""Origin types: the strings ATC's ONNX parser looks plugins up by,
`<node domain or ai.onnx>::<that domain's opset_import version>::<op_type>`."""
from __future__ import annotations

import os
import re
from typing import Dict, Iterable, List, Optional, Set

from bridge import ops

# Default-domain opsets `bridge export --to ge` writes (11-13 every CANN release takes).
EXPORT_OPSETS = tuple(range(11, 16))
DEFAULT_OPSET = 11
PARSERS = ("new", "legacy")

_ORIGIN = re.compile(r"[A-Za-z0-9_.\-]+::[0-9]+::[A-Za-z0-9_]+")


def origin_type(domain: str, version: int, op_type: str) -> str:
    return f"{domain or 'ai.onnx'}::{version}::{op_type}"


def node_origin(node, opsets: Dict[str, int]) -> Optional[str]:
    """The node's origin type, or None when its domain is not in opset_import."""
    domain = node.domain or "ai.onnx"
    version = opsets.get(domain)
    return None if version is None else origin_type(domain, version, node.op_type)


def model_opsets(model) -> Dict[str, int]:
    """opset_import as {domain: version}, the default domain spelled ai.onnx."""
    return {(imp.domain or "ai.onnx"): imp.version for imp in model.opset_import}


def expected_origins(spec: ops.OpSpec, parser: str, opsets: Iterable[int] = EXPORT_OPSETS) -> List[str]:
    """What a model exported for `parser` makes ATC look up for this op."""
    if parser == "new":
        return [origin_type(spec.domain, spec.domain_version, spec.name)]
    if parser == "legacy":
        return [origin_type("", v, spec.name) for v in opsets]
    raise ValueError(f"parser must be one of {PARSERS}, got {parser!r}")


def plugin_origins(spec: ops.OpSpec) -> List[str]:
    """Every origin type the generated plugin of `spec` registers: both parser modes."""
    return [o for parser in PARSERS for o in expected_origins(spec, parser)]


def registered_in_source(text: str) -> Set[str]:
    """Origin types registered by REGISTER_CUSTOM_OP(...).OriginOpType(...) calls in C++ text."""
    found: Set[str] = set()
    for m in re.finditer(r"\.OriginOpType\s*\(", text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        for lit in re.findall(r'"((?:[^"\\]|\\.)*)"', text[m.end():i]):
            if _ORIGIN.fullmatch(lit):
                found.add(lit)
    return found


def plugin_files(path: str):
    """(file, "source" or "library") for the C++ sources and built libraries under
    `path`; files linked from outside the folder are left out (never read)."""
    real = os.path.realpath(path)
    for root, _, files in os.walk(path):
        for f in files:
            full = os.path.join(root, f)
            if not os.path.realpath(full).startswith(real + os.sep):
                continue
            if f.endswith((".cc", ".cpp", ".cxx", ".h", ".hpp")):
                yield full, "source"
            elif f.endswith(".so") or ".so." in f:
                yield full, "library"


def registered_in_dir(path: str) -> Set[str]:
    """Origin types registered by the plugins under `path`: C++ sources are parsed;
    built libraries (.so) are searched for origin-type strings."""
    found: Set[str] = set()
    for full, kind in plugin_files(path):
        if kind == "source":
            with open(full, encoding="utf-8", errors="replace") as fh:
                found |= registered_in_source(fh.read())
        else:
            with open(full, "rb") as fh:
                for m in re.finditer(rb"[A-Za-z0-9_.\-]+::[0-9]+::[A-Za-z0-9_]+", fh.read()):
                    found.add(m.group().decode())
    return found
