"""Where a Keras layer's output lives in an ONNX graph, and how to read it out.

tf2onnx names each node after the TF op it came from, so a layer `conv_3` of a
model `yolo` leaves nodes named `yolo[_k]/conv_3[_k]/...` (Keras adds the `_k`
when it traces a model again). A layer's output is where its scope is left: an
output of a node in the scope that a node outside the scope (or the graph's
output) reads. Some scopes vanish (tf2onnx folds a Conv into the BatchNorm
after it, a ZeroPadding into the Conv's pads); those layers are simply not
compared. The transpose optimiser may leave a tensor in NCHW where TF has NHWC:
`align` accepts that layout and nothing looser.
"""
from __future__ import annotations

from collections import Counter
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from bridge import atomic

_SUFFIXES = ("", "_1", "_2", "_3", "_4")


class Candidates(tuple):
    """Several tensors that may hold one layer's output; the comparison picks the
    one that lines up with the reference (see `best`). `names[i]` is the ONNX
    tensor of item i, `nodes[i]` the node that produces it."""

    names: Tuple[str, ...] = ()
    nodes: Tuple[str, ...] = ()

    @classmethod
    def of(cls, arrays, names=(), nodes=()):
        c = cls(arrays)
        c.names, c.nodes = tuple(names), tuple(nodes)
        return c


def layer_tensors(model, layer_names: Iterable[str], aliases: Optional[Dict[str, str]] = None) -> Dict[str, List[str]]:
    """{canonical layer name: [candidate tensor names, last in graph order first]}.
    `aliases` maps a scope name found in the graph to the canonical layer name
    (a fused layer standing for the unfused block it replaced)."""
    nodes = list(model.graph.node)
    wanted = {n: n for n in layer_names if ":" not in n}  # multi-output layers are not mapped
    for scope, canonical in (aliases or {}).items():
        if canonical in wanted or canonical in set(layer_names):
            wanted[scope] = canonical
    split = [n.name.split("/") for n in nodes]
    tops = Counter(c[0] for c in split if len(c) >= 3)
    if not tops or not wanted:
        return {}
    top = tops.most_common(1)[0][0]
    seconds = {c[1] for c in split if len(c) >= 3 and c[0] == top}
    suffix = max(_SUFFIXES, key=lambda s: sum(1 for w in wanted if w + s in seconds))
    scope_of = {w + suffix: w for w in wanted}

    owner: List[Optional[str]] = []
    for c in split:
        owner.append(scope_of.get(c[1]) if len(c) >= 3 and c[0] == top else None)
    consumers: Dict[str, set] = {}
    for i, node in enumerate(nodes):
        for t in node.input:
            consumers.setdefault(t, set()).add(owner[i])
    graph_outputs = {o.name for o in model.graph.output}
    found: Dict[str, List[str]] = {}
    for i, node in enumerate(nodes):
        scope = owner[i]
        if scope is None:
            continue
        for t in node.output:
            if t and (t in graph_outputs or any(o != scope for o in consumers.get(t, ()))):
                found.setdefault(wanted[scope], []).append(t)
    return {k: list(reversed(v)) for k, v in found.items()}


def with_outputs(model, names: Sequence[str]):
    """A copy of `model` that also returns the tensors `names` (untyped graph
    outputs: onnxruntime and the ReferenceEvaluator infer their types)."""
    import onnx
    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    for n in names:
        if n not in have:
            m.graph.output.append(onnx.ValueInfoProto(name=n))
            have.add(n)
    return m


def save_with_outputs(model, names: Sequence[str], path: str) -> None:
    """Writes `model` with the tensors `names` as extra (untyped) outputs to
    `path`, without copying the model: the outputs are added, the file written,
    and the outputs removed again (a 250 MB copy saved per marked model)."""
    graph_outputs = model.graph.output
    before = len(graph_outputs)
    have = {o.name for o in graph_outputs}
    try:
        for n in names:
            if n not in have:
                graph_outputs.add().name = n
                have.add(n)
        data = model.SerializeToString()
    finally:
        del graph_outputs[before:]
    atomic.write_bytes(path, data)


def align(got: np.ndarray, ref: np.ndarray) -> List[np.ndarray]:
    """The readings of `got` in the reference's layout: as is, or NCHW -> NHWC."""
    got = np.asarray(got)
    ref = np.asarray(ref)
    out = []
    if got.shape == ref.shape:
        out.append(got)
    elif got.size == ref.size and got.squeeze().shape == ref.squeeze().shape:
        out.append(got.reshape(ref.shape))
    if got.ndim == 4 and ref.ndim == 4 and got.shape == (ref.shape[0], ref.shape[3], ref.shape[1], ref.shape[2]):
        out.append(np.transpose(got, (0, 2, 3, 1)))
    return out


def best(got, ref, compare):
    """(comparison, index of the candidate) for the reading of `got` (an array
    or Candidates) that fits the reference best; (None, None) when no reading
    has the reference's shape."""
    options = list(got) if isinstance(got, Candidates) else [got]
    results = []
    for i, option in enumerate(options):
        for reading in align(option, ref):
            results.append((compare(reading, ref), i))
    if not results:
        return None, None
    return min(results, key=lambda r: (not r[0].passed, r[0].failing,
                                       r[0].max_abs_error if r[0].max_abs_error == r[0].max_abs_error else np.inf))
