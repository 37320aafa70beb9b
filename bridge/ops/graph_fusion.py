"""Which TensorFlow subgraphs an op replaces: the graph patterns a spec carries.

A `GraphPattern` is the graph-level twin of a Keras `fusion.Pattern`: data the
graph rewriter (bridge.converters.graph_fuse) reads from the registered specs
(`OpSpec.graph_fusion`), a team's specs included. The rewriter works on a frozen
GraphDef (functions inlined, variables as constants) and, for every node whose
op is one of the pattern's `ends`, takes the single-entry subgraph that ends
there: the nodes on the paths from the one tensor that dominates the node (the
subgraph's input x) to it, every other input a constant. Nodes outside the
pattern's `ops`, or an intermediate tensor used outside the subgraph, and the
subgraph is not the op's.

The pattern then says, with numpy only:

- `when(region) -> bool`: whether the subgraph is meant at all (silently: an
  Add that is no layer norm is no near miss);
- `identify(region) -> (inputs, attrs)` or a string (why it does not fit: a near
  miss in the fusion report): the op's inputs after the first (numpy arrays) and
  its attributes, read from the subgraph's nodes and constants, or found by
  evaluating it on probes (`region.evaluate`);
- for an op of several outputs (YoloDecode), the region is first grown forward
  (graph_region.GraphIndex.grown) until no more of its tensors leave it than the
  op has outputs (`region.outputs`), and `identify` returns (inputs, attrs,
  outputs): which of those tensors is which of the op's outputs, in order;
- `probe(region) -> shape` (optional): the input shape to verify on; by default
  x's static shape with unknown dims 3 (the batch 2).

`start` (optional) names the op types that must read x: where the dominator of
the end is too close (`Maximum(y, a*y)` is dominated by y), the region grows
back, one dominator at a time, until they do.

Whatever `identify` claims is then checked: the subgraph, evaluated in float64
on random inputs at several scales, must equal the op's numpy reference on the
identified inputs (relative, within `tolerance` where the pattern gives one,
else the rewriter's 1e-6), or the match is a near miss that says by how much it
is off.

A `region` (converters/graph_region.py) offers `nodes` (in graph order, the end
last; each with `name`, `op`, `attrs` as Python values and `inputs`), `x_shape`,
`dtype`, `is_x(ref)`, `node(ref)` (the region's node producing a tensor, or
None), `constant(ref)` (a constant input's value, or None) and
`evaluate(x, given=None, at=None)` (float64; `given` maps a node name to its
output, e.g. to read the part of the subgraph after a Conv2D; `at` a tensor or a
list of them, by default the end's).

`key` is the fusion report row the matches count in: the key of one of the
op's Keras patterns (the same row for both roads), or a key of its own.
"""
from __future__ import annotations

import re
from typing import Any, Callable, Optional, Tuple

from .fusion import named_problems


class GraphPattern:
    FIELDS = ("key", "matches", "ends", "ops", "start", "when", "identify", "probe", "folds", "tolerance")

    def __init__(self, key: str, matches: str = "", *, ends: Tuple[str, ...] = (), ops: Tuple[str, ...] = (),
                 start: Tuple[str, ...] = (),
                 when: Optional[Callable[[Any], bool]] = None, identify: Optional[Callable[[Any], Any]] = None,
                 probe: Optional[Callable[[Tuple], Tuple]] = None,
                 folds: Optional[Callable[[Any], Tuple[str, ...]]] = None, tolerance: Optional[float] = None,
                 **unknown):
        self.key, self.matches = key, matches
        self.ends = (ends,) if isinstance(ends, str) else tuple(ends)
        self.ops = tuple(ops)
        self.start = (start,) if isinstance(start, str) else tuple(start)
        self.when, self.identify, self.probe = when, identify, probe
        self.folds = folds   # region -> keys of patterns folded into this match (e.g. a Pad: zero_padding)
        self.tolerance = tolerance   # the check's relative tolerance, where not the rewriter's default
        self.unknown = dict(unknown)

    def __repr__(self) -> str:
        return f"GraphPattern({self.key!r}: ... -> {'|'.join(self.ends)})"


_OP = re.compile(r"[A-Z][A-Za-z0-9]*")


def problems(pattern, spec):
    """(field, message) for each thing wrong with `pattern` as a graph pattern of `spec`."""
    if not isinstance(pattern, GraphPattern):
        yield "", f"must be a bridge.ops.graph_fusion.GraphPattern, got {type(pattern).__name__}"
        return
    yield from named_problems(pattern, GraphPattern)
    for field in ("ends", "ops", "start"):
        value = getattr(pattern, field)
        if (not value and field != "start") or not all(isinstance(o, str) and _OP.fullmatch(o) for o in value):
            yield field, f"{value!r} must name TensorFlow op types (e.g. 'AddV2')"
    if pattern.ends and pattern.ops and not set(pattern.ends) <= set(pattern.ops):
        yield "ends", f"{sorted(set(pattern.ends) - set(pattern.ops))} must be in ops too"
    if not callable(pattern.identify):
        yield "identify", "a function region -> (inputs after the first, attrs) or the reason it does not fit"
    if pattern.tolerance is not None and not (isinstance(pattern.tolerance, float) and 0 < pattern.tolerance < 1e-2):
        yield "tolerance", f"{pattern.tolerance!r} must be a float in (0, 0.01): the check judges in float64"
    for field in ("when", "probe", "folds"):
        if getattr(pattern, field) is not None and not callable(getattr(pattern, field)):
            yield field, "must be a function"
