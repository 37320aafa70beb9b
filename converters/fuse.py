"""The Keras fusion rewriter: `fuse(model) -> (fused_model, report)`.

It walks a functional (or Sequential) Keras model's graph, node by node, and
rebuilds it as a new functional model in which each match of a fusion pattern
becomes a fused layer. The patterns come from the registered op specs
(`OpSpec.fusion`, bridge.ops.fusion), a team's ops (`--op-spec`) included:

- a pattern's declared chain of Keras layers is matched here (fuse_chain.py) and
  becomes a `FusedOp` calling the op (plus any layers the pattern keeps);
- a pattern with a `hook` is matched by its op's own module (bridge's ops:
  their folder's keras_fusion.py, bridge/ops/<op>/), where a chain cannot say
  what the fused op needs;

- a sublayer that a layer calls from its own Python `call` (keras_hub's
  transformer blocks hold theirs as attributes or in lists), of a kind a
  pattern can fuse alone, is fused in a copy of that layer (same config and
  weights, the sublayer swapped for the fused one),

and everything else passes through unchanged: the very same layer objects (and
variables) as in the original, called on the rebuilt tensors. A functional model
used as a layer (a backbone) is fused on its own and its fused copy called instead. The fused layers
hold copies of the original, unfolded weights. A chain is fused only when no
intermediate tensor is used elsewhere (another consumer or a model output);
each partial match that is not fused is listed in the report with the reason.

A SavedModel is a graph, not Keras layers: it passes through unfused, and the
report says so (graph_fuse.fuse_graph rewrites graphs). A subclassed Keras
model has no graph to walk and passes through the same way.

The fused model is for inference: the fused layers always use the BatchNorm
moving statistics, whatever `training` says.
"""
from __future__ import annotations

from collections import defaultdict

from .fuse_layers_common import kind
from .fuse_report import FuseReport


def fuse(model, name=None):
    """(fused_model, FuseReport). `model` is a Keras model, or a SavedModel (a path,
    a `bridge.models.SavedModel`, or a tf.saved_model.load object), which passes
    through unfused with a note."""
    import keras

    label = getattr(model, "name", None) or str(getattr(model, "path", model))
    report = FuseReport(model=label)
    if not isinstance(model, keras.Model):
        report.notes.append(_not_keras(model))
        return model, report
    graph = _functional(model)
    if graph is None:
        report.notes.append(f"{type(model).__name__} '{model.name}' is a subclassed Keras model: it has no layer "
                            f"graph to rewrite; the model passes through unfused")
        return model, report
    found = matchers()  # outside the try: a spec whose hook cannot be imported is an error, not a note
    try:
        return _Rewriter(graph, report, found).run(name or f"{model.name}_fused")
    except Exception as e:  # a graph the rewriter cannot rebuild: the model is still exported, as it is
        report = FuseReport(model=label)
        report.notes.append(f"the rewriter cannot rebuild '{model.name}' ({type(e).__name__}: "
                            f"{str(e).splitlines()[0][:200] if str(e) else ''}); the model passes through unfused")
        return model, report


def _not_keras(model) -> str:
    from pathlib import Path
    what = "a SavedModel"
    if isinstance(model, (str, Path)) and not (Path(model) / "saved_model.pb").is_file():
        what = f"{str(model)!r}, not a Keras model or SavedModel directory,"
    return (f"{what} is a TensorFlow graph, not Keras layers: this rewriter passes it through unfused; "
            f"bridge.converters.graph_fuse.fuse_graph (`bridge fuse MODEL -o DIR`) rewrites graphs")


def _functional(model):
    import keras
    if isinstance(model, keras.Sequential):
        if not model.built or getattr(model, "_functional", None) is None:
            return None
        return model._functional
    if hasattr(model, "_nodes_by_depth") and getattr(model, "_inputs_struct", None) is not None:
        return model
    return None


class _Hook:
    """A pattern matched by its op's own module (`Pattern.hook`): match(rewriter,
    node), and optionally is_sublayer(layer) / fuse_sublayer(rewriter, layer,
    label, where) for sublayers called from a layer's Python code."""

    def __init__(self, spec, pattern):
        import importlib
        from bridge.ops import SpecError
        from bridge.ops.registry import ORIGINS
        self.key = pattern.key
        try:
            module = importlib.import_module(pattern.hook)
        except ImportError as e:
            raise SpecError(ORIGINS.get(spec.name, "?"), f"fusion[{spec.fusion.index(pattern)}].hook",
                            f"cannot import {pattern.hook!r}: {e}", spec.name) from None
        self.match = module.match
        self.is_sublayer = getattr(module, "is_sublayer", lambda layer: False)
        self.fuse_sublayer = getattr(module, "fuse_sublayer", None)


def matchers():
    """One matcher per fusion pattern of the registered specs, in registry order
    (a pattern folded into another's layers is matched by that one)."""
    from bridge import ops
    from .fuse_chain import ChainMatcher
    return [(_Hook(spec, p) if p.hook else ChainMatcher(spec, p))
            for spec in ops.all_specs() for p in spec.fusion if p.folded_into is None]


def _sublayers_inside(layer, pick):
    """(owner, attribute or list index, sublayer, its matcher) for each sublayer
    a matcher fuses alone (`pick`), held by `layer` or by its (non-model)
    sublayers, as an attribute or in a list attribute, depth first."""
    import keras
    out, seen = [], set()

    def visit(owner, key, value):
        matcher = pick(value) if isinstance(value, keras.layers.Layer) else None
        if matcher is not None:
            out.append((owner, key, value, matcher))
        elif isinstance(value, keras.layers.Layer) and not isinstance(value, keras.Model) and id(value) not in seen:
            seen.add(id(value))
            for attr, v in list(vars(value).items()):
                visit(value, attr, v)
        elif isinstance(value, list):  # e.g. a list of transformer blocks
            for i, v in enumerate(value):
                visit(value, i, v)
    seen.add(id(layer))
    for attr, v in list(vars(layer).items()):
        visit(layer, attr, v)
    return out


def _replace(owner, key, new) -> None:
    """owner.key = new (or owner[key] for a list), past Keras' tracking, which
    refuses new sublayers once a layer is built."""
    if isinstance(owner, list):
        list.__setitem__(owner, key, new)
    else:
        object.__setattr__(owner, key, new)


class _Rewriter:
    """One functional graph being rewritten. What a pattern's hook
    (`match(rw, node)`) may use: `producer_of(node)`, `sole_consumer(tensor)`,
    `plan(...)` (a fused layer in place of matched nodes), `report.skip(key,
    layers, reason)` (a near miss), `taken(node)` and `training_from`."""

    def __init__(self, graph, report, found):
        self.g = graph
        self.report = report
        self.matchers = found
        self.nodes = [n for d in sorted(graph._nodes_by_depth, reverse=True) for n in graph._nodes_by_depth[d]]
        self.producer = {id(t): n for n in self.nodes for t in n.outputs}
        self.consumers = defaultdict(list)
        for n in self.nodes:
            for t in n.input_tensors:
                self.consumers[id(t)].append(n)
        self.outputs = {id(t) for t in graph.outputs}
        self.absorbed = set()   # id(node) of nodes replaced by a fused layer
        self.anchors = {}       # id(node) -> (pattern, name, build, input tensor, originals, folds)
        self.submodels = {}     # id(nested functional model) -> its fused version
        self.copies = {}        # id(layer with fusable sublayers inside) -> its fused copy (or None)

    # -- graph helpers ------------------------------------------------------
    def sole_consumer(self, tensor):
        """(the one consumer node, None) or (None, why the tensor cannot be fused away)."""
        users = self.consumers.get(id(tensor), [])
        if id(tensor) in self.outputs:
            return None, "is a model output"
        if len(users) != 1:
            return None, f"feeds {len(users)} consumers"
        return users[0], None

    def producer_of(self, node):
        """The node producing the first input of `node`."""
        return self.producer.get(id(node.input_tensors[0])) if node.input_tensors else None

    # -- matching -----------------------------------------------------------
    def match(self):
        self.training_from = None
        for node in self.nodes:  # in execution order
            op = node.operation
            if node.is_input or op is None:
                continue
            for matcher in self.matchers:
                if not self.taken(node):
                    matcher.match(self, node)
            if node.arguments.kwargs.get("training") is True and self.training_from is None:
                # Keras 3 passes an explicit training=True on to every layer called
                # after it in the same model call: later BatchNorms use batch statistics
                self.training_from = op.name

    def taken(self, node) -> bool:
        """Whether `node` is already part of a planned fused layer."""
        return id(node) in self.anchors or id(node) in self.absorbed

    def plan(self, anchor, pattern, layer_name, make, weights, first, absorbed, originals, folds=()):
        """Fuses at `anchor`: the layer `make(name)` on `first`'s input, its
        weights assigned from `weights()`; the `absorbed` nodes go."""
        def build(x, name):
            layer = make(name)
            out = layer(x)
            for dst, src in zip(layer.weights, weights()):
                dst.assign(src)
            return out, layer.name
        self.plan_build(anchor, pattern, layer_name, build, first, absorbed, originals, folds)

    def plan_build(self, anchor, pattern, layer_name, build, first, absorbed, originals, folds=()):
        """Fuses at `anchor`: `build(input tensor, name) -> (output, fused layer
        name)` on `first`'s input; the `absorbed` nodes go; `folds` are the
        patterns folded into it (counted in the report)."""
        for n in absorbed:
            self.absorbed.add(id(n))
        self.anchors[id(anchor)] = (pattern, layer_name, build, first.input_tensors[0], originals, tuple(folds))

    # -- rebuilding ---------------------------------------------------------
    def _nested(self, op):
        """A functional model used as a layer is fused on its own (once, however
        often it is called); its report entries are prefixed with its name."""
        import keras
        if not isinstance(op, keras.Model) or _functional(op) is None:
            return op
        if id(op) not in self.submodels:
            sub, rep = _Rewriter(_functional(op), FuseReport(model=op.name), self.matchers).run(op.name)
            for b in rep.blocks:
                self.report.add_block(b.pattern, f"{op.name}/{b.layer}", [f"{op.name}/{n}" for n in b.replaces])
            for pattern, count in rep.folds.items():
                self.report.fold(pattern, count)
            for pattern, skips in rep.skips.items():
                for s in skips:
                    self.report.skip(pattern, [f"{op.name}/{n}" for n in s.layers], s.reason)
            self.report.notes += [f"{op.name}: {n}" for n in rep.notes]
            self.submodels[id(op)] = sub if rep.blocks else op
        return self.submodels[id(op)]

    def _pick(self, layer):
        """The matcher that fuses `layer` alone as a sublayer, or None."""
        return next((m for m in self.matchers if m.fuse_sublayer is not None and m.is_sublayer(layer)), None)

    def _inner(self, op, args, kwargs):
        """A layer whose own Python `call` uses sublayers a pattern fuses alone
        (LayerNormalization in keras_hub's TransformerEncoder/Decoder and ViT's
        blocks): a copy of it (same config, same weights) with each such sublayer
        swapped for its fused layer; None when there is none to fuse (or the
        layer cannot be copied: then it stays, and the report says why). The
        original layer is left as it was: the unfused model still uses it."""
        import keras
        if isinstance(op, keras.Model) or self._pick(op) is not None:
            return None
        if id(op) in self.copies:  # a layer called more than once (ALBERT's shared blocks): one copy
            return self.copies[id(op)]
        self.copies[id(op)] = copy = self._copy_fused(op, args, kwargs)
        return copy

    def _copy_fused(self, op, args, kwargs):
        found = list({id(sub): (o, k, sub, m) for o, k, sub, m in _sublayers_inside(op, self._pick)}.values())
        if not found:
            return None
        where = f"inside {kind(op)}"
        try:
            clone = type(op).from_config(op.get_config())
            clone(*args, **kwargs)  # builds the copy's sublayers
            clone.set_weights(op.get_weights())
        except Exception as e:
            for _, _, sub, matcher in found:
                self.report.skip(matcher.key, [f"{op.name}/{sub.name}"],
                                 f"{where}, which cannot be copied to fuse it ({type(e).__name__}: "
                                 f"{str(e).splitlines()[0][:120] if str(e) else ''})")
            return None
        made = {}  # id(sublayer) -> its fused copy (or None): one per layer, however often held
        for owner, attr, sub, matcher in _sublayers_inside(clone, self._pick):
            if id(sub) not in made:
                made[id(sub)] = matcher.fuse_sublayer(self, sub, f"{op.name}/{sub.name}", where)
            if made[id(sub)] is not None:
                _replace(owner, attr, made[id(sub)])
        return clone if any(f is not None for f in made.values()) else None

    def run(self, name):
        import keras
        from keras import tree
        self.match()
        taken = {op.name for n in self.nodes if n.operation is not None for op in [n.operation]}
        tensors = {id(t): t for t in self.g.inputs}  # the original Input tensors are reused
        for node in self.nodes:
            if node.is_input or node.operation is None or id(node) in self.absorbed:
                continue
            plan = self.anchors.get(id(node))
            if plan is None:
                args, kwargs = node.arguments.fill_in(tensors)
                op = self._nested(node.operation)
                out = (self._inner(op, args, kwargs) or op)(*args, **kwargs)
            else:
                pattern, layer_name, build, source, originals, folds = plan
                if layer_name in taken and layer_name not in originals:
                    layer_name += "_fused"
                taken.add(layer_name)
                out, made = build(tensors[id(source)], layer_name)
                self.report.add_block(pattern, made, originals)
                for folded in folds:
                    self.report.fold(folded)
            for old, new in zip(node.outputs, tree.flatten(out)):
                tensors[id(old)] = new
        outputs = tree.map_structure(lambda t: tensors[id(t)], self.g._outputs_struct)
        fused = keras.Model(self.g._inputs_struct, outputs, name=name)
        self.report.fused_model = fused.name
        return fused, self.report
