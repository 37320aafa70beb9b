"""Which Keras layers an op replaces: the fusion patterns a spec carries.

A `Pattern` is data the Keras rewriter (bridge.converters.fuse) reads from the
registered specs: a chain of Keras layers, each the only consumer of the one
before it, named by class and checked by conditions on the layer; and how the
matched layers' weights and settings become the op's inputs and attributes.
Nothing here imports Keras: a condition is a function of the layer object (read
by duck typing: `layer.get_config()`, `layer.activation`, ...), and the
rewriter does the matching.

    Pattern("bias_gelu", "Dense with the exact GELU",
            chain=(Link("Dense", "dense", checks=(has_bias,)),),
            when=lambda dense: is_gelu(dense.activation),
            keep={"dense": {"use_bias": False, "activation": "linear"}},
            inputs=("dense.bias",))

matches a Dense whose activation is a GELU and rebuilds it as the Dense without
its bias and activation, followed by the op on (its output, its bias). The op's
first input is the tensor the chain (or its kept layers) computes; `inputs` are
the others, in the op's order. A pattern whose matching a chain cannot express
(bridge's own: BatchNorm statistics, folded padding, LayerNorms inside a
layer's Python call) names its per-op Keras matcher in `hook`, and its `chain`
then describes what it matches.
"""
from __future__ import annotations

import re
from typing import Any, Callable, Dict, Mapping, Optional, Tuple, Union

Check = Callable[[Any], Optional[str]]   # layer -> why it does not fit (None: it fits)
Ref = Union[str, Callable[[Dict[str, Any]], Any]]  # "label.attribute" of a matched layer, or {label: layer} -> value


class Link:
    """One layer of a chain: its Keras class names (any of them, subclasses
    included), the label the pattern's mappings use for it, and its checks
    (each returns the reason the layer does not fit, shown as a near miss)."""

    FIELDS = ("layer", "label", "checks")

    def __init__(self, layer, label: Optional[str] = None, checks: Tuple[Check, ...] = (), **unknown):
        self.layer = (layer,) if isinstance(layer, str) else tuple(layer)
        self.label = label if label is not None else _snake(self.layer[0] if self.layer else "")
        self.checks = tuple(checks)
        self.unknown = dict(unknown)

    def __repr__(self) -> str:
        return f"Link({'|'.join(self.layer)}, {self.label!r})"


class Pattern:
    """One fusion pattern of an op (module docstring). `key` names it in the
    fusion report; `matches` says in words what it matches."""

    FIELDS = ("key", "matches", "chain", "when", "keep", "inputs", "attrs", "hook", "folded_into")

    def __init__(self, key: str, matches: str = "", chain: Tuple[Link, ...] = (), *,
                 when: Optional[Callable[[Any], bool]] = None,
                 keep: Optional[Mapping[str, Mapping[str, Any]]] = None,
                 inputs: Tuple[Ref, ...] = (), attrs: Optional[Mapping[str, Ref]] = None,
                 hook: Optional[str] = None, folded_into: Optional[str] = None, **unknown):
        self.key, self.matches = key, matches
        self.chain = tuple(chain) if isinstance(chain, (tuple, list)) else chain
        # The last layer of the chain is where a match starts; `when` says (silently)
        # whether a layer of its class is meant at all, so that unrelated layers of
        # that class are no near misses.
        self.when = when
        self.keep = dict(keep or {})        # label -> config overrides: re-made before the op
        self.inputs = tuple(inputs) if isinstance(inputs, (tuple, list)) else inputs
        self.attrs = dict(attrs or {})
        self.hook = hook                    # "module": its match(rewriter, node) does the matching
        self.folded_into = folded_into      # counted by folds into that pattern's fused layers
        self.unknown = dict(unknown)

    @property
    def labels(self) -> Tuple[str, ...]:
        return tuple(link.label for link in self.chain)

    def __repr__(self) -> str:
        return f"Pattern({self.key!r}: {' -> '.join('|'.join(l.layer) for l in self.chain)})"


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def resolve(ref: Ref, layers: Dict[str, Any]):
    """The value a mapping entry names: "label.attribute" or a function of the matched layers."""
    if callable(ref):
        return ref(layers)
    label, _, attr = ref.partition(".")
    return getattr(layers[label], attr)


def named_problems(pattern, cls):
    """What a Keras and a graph pattern share: known fields, a snake_case key, words for the report."""
    for name in pattern.unknown:
        yield name, f"unknown field; a {cls.__name__} has {list(cls.FIELDS)}"
    if not isinstance(pattern.key, str) or not re.fullmatch(r"[a-z][a-z0-9_]*", pattern.key):
        yield "key", f"{pattern.key!r} is not a snake_case name"
    if not isinstance(pattern.matches, str) or not pattern.matches.strip():
        yield "matches", "say in words what the pattern matches (the fusion report shows it)"


def problems(pattern, spec):
    """(field, message) for each thing wrong with `pattern` as a pattern of `spec`."""
    if not isinstance(pattern, Pattern):
        yield "", f"must be a bridge.ops.fusion.Pattern, got {type(pattern).__name__}"
        return
    yield from named_problems(pattern, Pattern)
    if not isinstance(pattern.chain, tuple) or not pattern.chain:
        yield "chain", "a chain of at least one Link (the Keras layers the op replaces), got " \
                       f"{pattern.chain!r}"
        return
    for i, link in enumerate(pattern.chain):
        where = f"chain[{i}]"
        if not isinstance(link, Link):
            yield where, f"must be a bridge.ops.fusion.Link, got {type(link).__name__}"
            continue
        for name in link.unknown:
            yield f"{where}.{name}", f"unknown field; a Link has {list(Link.FIELDS)}"
        if not link.layer or not all(isinstance(c, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", c)
                                     for c in link.layer):
            yield f"{where}.layer", f"{link.layer!r} must name Keras layer classes (e.g. 'Dense')"
        if not all(callable(c) for c in link.checks):
            yield f"{where}.checks", "each check is a function layer -> reason (or None)"
    labels = pattern.labels
    if len(set(labels)) != len(labels):
        yield "chain", f"labels must be unique, got {list(labels)}"
    if pattern.when is not None and not callable(pattern.when):
        yield "when", "must be a function of the chain's last layer -> bool"
    if pattern.hook is not None or pattern.folded_into is not None:
        if pattern.hook is not None and not (isinstance(pattern.hook, str) and
                                             re.fullmatch(r"[A-Za-z_][\w.]*", pattern.hook)):
            yield "hook", f"{pattern.hook!r} must name a module (its match(rewriter, node) matches)"
        return  # matched by Keras-side code: the mappings below are its own
    for label, overrides in pattern.keep.items():
        if label not in labels:
            yield f"keep.{label}", f"no layer of the chain has the label {label!r}; labels: {list(labels)}"
        elif not isinstance(overrides, Mapping):
            yield f"keep.{label}", "must be a dict of config overrides"
    want = len(spec.inputs) - 1
    if not isinstance(pattern.inputs, tuple) or len(pattern.inputs) != want:
        yield "inputs", (f"{spec.name} takes {want} inputs after its first "
                         f"({', '.join(a.name for a in spec.inputs[1:]) or 'none'}), got {pattern.inputs!r}")
    else:
        for arg, ref in zip(spec.inputs[1:], pattern.inputs):
            yield from _ref_problems(f"inputs.{arg.name}", ref, labels)
    known = {a.name for a in spec.attrs}
    for name, ref in pattern.attrs.items():
        if name not in known:
            yield f"attrs.{name}", f"{spec.name} has no attribute {name!r}; attributes: {sorted(known)}"
        else:
            yield from _ref_problems(f"attrs.{name}", ref, labels)


def _ref_problems(field: str, ref, labels):
    if callable(ref):
        return
    if not isinstance(ref, str) or "." not in ref:
        yield field, f"{ref!r} must be 'label.attribute' or a function of the matched layers"
    elif ref.partition(".")[0] not in labels:
        yield field, f"{ref!r}: no layer of the chain has the label {ref.partition('.')[0]!r}; labels: {list(labels)}"
