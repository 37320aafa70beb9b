"""Where a plugin folder sends each origin type, for `bridge ascend check --plugins`:
the GE op type each REGISTER_CUSTOM_OP maps it to, and whether that op type is
defined in the folder, by a REG_OP proto or by an implementation class that
REG_AUTO_MAPPING_OP registers (the custom-operator route), or is
`PartitionedCall`, which the plugin's ParseOpToGraphFn expands onto GE built-ins.

Sources are parsed; a built library only tells which names it holds (a type name
found as a string in a .so under the folder counts as defined there).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Set

from bridge.ascend.origins import model_opsets, node_origin, plugin_files, registered_in_source

EXPANDED = "PartitionedCall"
_REGISTER = re.compile(r'REGISTER_CUSTOM_OP\s*\(\s*"([A-Za-z0-9_]+)"\s*\)')
_REG_OP = re.compile(r"\bREG_OP\s*\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)")
_AUTO = re.compile(r"\bREG_AUTO_MAPPING_OP\s*\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)")


@dataclass
class PluginRoutes:
    maps: Dict[str, Set[str]] = field(default_factory=dict)   # origin type -> GE op types (sources)
    protos: Set[str] = field(default_factory=set)             # GE op types a REG_OP defines
    classes: Set[str] = field(default_factory=set)            # GE op types an implementation class defines
    library_names: Set[str] = field(default_factory=set)      # strings of built libraries

    def defined(self, ge_type: str) -> List[str]:
        out = [k for k, names in (("proto", self.protos), ("class", self.classes)) if ge_type in names]
        return out or (["library"] if ge_type in self.library_names else [])

    def route_of(self, origin: str) -> str:
        types = self.maps.get(origin, set())
        if not types:
            return "unknown (no plugin source)"
        if EXPANDED in types:
            return "builtin (ParseOpToGraphFn)" + (" or custom-op" if len(types) > 1 else "")
        return "custom-op"


def routes_in_source(text: str, into: PluginRoutes) -> None:
    regs = list(_REGISTER.finditer(text))
    for i, m in enumerate(regs):
        end = regs[i + 1].start() if i + 1 < len(regs) else len(text)
        stop = text.find(";", m.end(), end)
        for origin in registered_in_source(text[m.end():stop if stop >= 0 else end]):
            into.maps.setdefault(origin, set()).add(m.group(1))
    into.protos |= set(_REG_OP.findall(text))
    into.classes |= set(_AUTO.findall(text))


def routes_in_dir(path: str) -> PluginRoutes:
    found = PluginRoutes()
    for full, kind in plugin_files(path):
        if kind == "source":
            with open(full, encoding="utf-8", errors="replace") as fh:
                routes_in_source(fh.read(), found)
        else:
            with open(full, "rb") as fh:
                found.library_names |= {m.decode() for m in re.findall(rb"[A-Z][A-Za-z0-9_]{2,63}(?=\x00)", fh.read())}
    return found


def check(model, routes: PluginRoutes) -> List:
    """A Finding per custom node whose plugin maps it onto a GE op type defined
    nowhere in the folder (GE would fail to build the node)."""
    from bridge.ascend.preflight import Finding
    opsets = model_opsets(model)
    found = []
    for i, node in enumerate(model.graph.node):
        origin = node_origin(node, opsets)
        types = routes.maps.get(origin or "", set())
        if not types or EXPANDED in types:
            continue
        for t in sorted(types):
            if not routes.defined(t):
                found.append(Finding("no-ge-op", node.name or f"{node.op_type}_{i}", node.op_type, origin,
                                     f"the plugin maps {origin} to the GE op type {t}, which no REG_OP proto and "
                                     f"no REG_AUTO_MAPPING_OP class in the plugin folder defines"))
    return found


def summary(routes: PluginRoutes, origins: Iterable[str]) -> List[dict]:
    """Per origin type: the route and where its GE op types are defined (--json)."""
    return [{"origin_type": o, "route": routes.route_of(o),
             "ge_types": {t: routes.defined(t) for t in sorted(routes.maps.get(o, ())) if t != EXPANDED}}
            for o in sorted(origins)]
