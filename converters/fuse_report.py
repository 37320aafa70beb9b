"""What `bridge.converters.fuse` did: per pattern, how many it fused and each near
miss it skipped with the reason; printable (aligned tables) and JSON-able."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Dict, List, Tuple

from bridge import ops as _specs
from bridge.table import render


def patterns(road: str = "keras") -> Dict[str, Tuple[str, str]]:
    """key -> (what is matched, the op it becomes), for every fusion pattern of the
    registered specs (bridge.ops.fusion), a team's included, in registry order;
    then the keys only graph patterns have (bridge.ops.graph_fusion). On the
    graph road a row says what its graph pattern matches."""
    out = {p.key: (p.matches, spec.name) for spec in _specs.all_specs() for p in spec.fusion}
    for spec in _specs.all_specs():
        for p in spec.graph_fusion:
            if road == "graph" or p.key not in out:
                out[p.key] = (p.matches, spec.name)
    return out


@dataclass
class Skip:
    layers: List[str]
    reason: str


@dataclass
class Block:
    pattern: str
    layer: str            # the fused layer's name in the fused model
    replaces: List[str]   # the original layers it stands for, in graph order


@dataclass
class FuseReport:
    model: str
    fused_model: str = ""
    blocks: List[Block] = field(default_factory=list)
    skips: Dict[str, List[Skip]] = field(default_factory=dict)  # pattern -> its near misses (only those with any)
    notes: List[str] = field(default_factory=list)
    folds: Dict[str, int] = field(default_factory=dict)  # pattern -> matches folded into another's fused layer
    road: str = "keras"   # "graph": a TensorFlow graph's rewrite (graph_fuse.py); layers are then nodes

    def add_block(self, pattern, layer, replaces):
        self.blocks.append(Block(pattern, layer, list(replaces)))

    def skip(self, pattern, layers, reason):
        self.skips.setdefault(pattern, []).append(Skip([str(n) for n in layers], reason))

    def fold(self, pattern, count=1):
        self.folds[pattern] = self.folds.get(pattern, 0) + count

    def fused(self, pattern) -> int:
        """How many matches of `pattern` were fused (a pattern folded into another's
        layers, such as zero_padding: how many were folded)."""
        return sum(1 for b in self.blocks if b.pattern == pattern) + self.folds.get(pattern, 0)

    def skipped(self, pattern) -> List[Skip]:
        return list(self.skips.get(pattern, ()))

    @property
    def total_fused(self) -> int:
        return len(self.blocks)

    def block_map(self) -> Dict[str, List[str]]:
        """{fused layer name: [original layer names]}."""
        return {b.layer: list(b.replaces) for b in self.blocks}

    def to_dict(self) -> dict:
        return {
            "model": self.model,
            "fused_model": self.fused_model,
            "patterns": {k: {"matches": desc, "op": op, "fused": self.fused(k),
                             "skipped": [{"layers": s.layers, "reason": s.reason} for s in self.skipped(k)]}
                         for k, (desc, op) in patterns(self.road).items()},
            "blocks": [{"pattern": b.pattern, "layer": b.layer, "replaces": b.replaces} for b in self.blocks],
            "notes": list(self.notes),
            "road": self.road,
        }

    def to_json(self, **kwargs) -> str:
        return json.dumps(self.to_dict(), **kwargs)

    def render(self, colour=False) -> str:
        known = patterns(self.road)
        rows = [(k, desc, op, self.fused(k), len(self.skipped(k))) for k, (desc, op) in known.items()]
        text = [f"fusion report for {self.model}" + (f" -> {self.fused_model}" if self.fused_model else ""),
                render(("pattern", "matches", "op", "fused", "skipped"), rows, colour=colour)]
        misses = [(k, " + ".join(s.layers), s.reason) for k in known for s in self.skipped(k)]
        if misses:
            text += ["", "skipped (near misses):", render(("pattern", "nodes" if self.road == "graph" else "layers",
                                                           "reason"), misses, colour=colour)]
        text += [f"note: {n}" for n in self.notes]
        return "\n".join(text)

    def __str__(self):
        return self.render()
