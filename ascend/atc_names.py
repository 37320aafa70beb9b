"""Input names as ATC's `--input_shape "name:d,d;name:d,d"` can carry them.

That syntax has no quoting: a name with `:` `;` `,`, a quote, white space or a
control character cannot be written in it (tf2onnx's `input:0` is common), nor
can a name too long for one command-line argument. Such an input is renamed in
the bundle's model.onnx to a plain name (its characters that ATC can carry, or
`input<i>`, never clashing with another tensor); the bundle records the mapping
(names.json, README). Every other name, shell metacharacters and `../` included,
is passed verbatim, single-quoted (bridge.untrusted.shell_word).
"""
from __future__ import annotations

import re
from typing import Dict, Iterable, Mapping, Set

from bridge.untrusted import is_control

ATC_SEPARATORS = ":;,'\""
MAX_NAME = 1024


def carried(name: str) -> bool:
    """Whether ATC's --input_shape can carry `name` as it is."""
    return (0 < len(name) <= MAX_NAME and not any(ch in ATC_SEPARATORS or ch.isspace() or is_control(ch)
                                                   for ch in name))


def _graph_names(graph) -> Set[str]:
    names = {v.name for v in list(graph.input) + list(graph.output) + list(graph.value_info)}
    names |= {t.name for t in graph.initializer}
    for node in graph.node:
        names |= set(node.input) | set(node.output)
        for a in node.attribute:
            for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                names |= _graph_names(sub)
    return names


def atc_names(model, inputs: Iterable[str]) -> Dict[str, str]:
    """{input name: the name model.onnx gives it for ATC}: the same name when
    `carried`, else a new plain one unused anywhere in the graph."""
    taken = _graph_names(model.graph)
    out: Dict[str, str] = {}
    for i, name in enumerate(inputs):
        if carried(name):
            out[name] = name
            continue
        base = re.sub(r"[\s" + re.escape(ATC_SEPARATORS) + r"]+", "_", "".join(
            "_" if is_control(ch) else ch for ch in name)).strip("_")[:64] or f"input{i}"
        new, n = base, 1
        while new in taken or not carried(new):
            new, n = f"{base}_{n}", n + 1
        taken.add(new)
        out[name] = new
    return out


def rename(graph, mapping: Mapping[str, str]) -> None:
    """Renames tensors in place: graph inputs, outputs, value_info and every node
    input (subgraphs included: they may read outer names)."""
    mapping = {k: v for k, v in mapping.items() if k != v}
    if not mapping:
        return
    for v in list(graph.input) + list(graph.output) + list(graph.value_info):
        v.name = mapping.get(v.name, v.name)
    for node in graph.node:
        for i, n in enumerate(node.input):
            if n in mapping:
                node.input[i] = mapping[n]
        for a in node.attribute:
            for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                rename(sub, mapping)
