"""The declared chain of a fusion pattern (bridge.ops.fusion.Pattern), matched
in a Keras graph and rebuilt as the op's `FusedOp` layer.

A match starts at a layer of the chain's last class for which the pattern's
`when` holds, and walks back through the producers of each layer's (single)
input: each earlier layer must be of its link's class and feed only the next.
Then every link's checks, the op's dtypes and the op's own shape checks must
pass; what fails is a near miss with its reason. The fused layers: the layers
the pattern keeps (re-made from their config with the pattern's overrides,
holding their original weights by name), then the op on their output with the
weights and attributes the pattern maps."""
from __future__ import annotations

from bridge.ops import OpError, fusion

from .fuse_layers_common import built_input_shape, dtype_problem, kind


def _is(layer, link) -> bool:
    return any(c.__name__ in link.layer for c in type(layer).__mro__)


class ChainMatcher:
    def __init__(self, spec, pattern):
        self.spec, self.pattern, self.key = spec, pattern, pattern.key
        self.chain = pattern.chain
        self.fuse_sublayer = self._fuse_sublayer if len(self.chain) == 1 else None

    def _skip(self, rw, layers, reason):
        rw.report.skip(self.key, [layer.name for layer in layers], reason)

    def _candidate(self, layer) -> bool:
        return _is(layer, self.chain[-1]) and (self.pattern.when is None or bool(self.pattern.when(layer)))

    def _problem(self, layers):
        """Why the matched layers (in chain order) cannot be fused, or None."""
        for link, layer in zip(self.chain, layers):
            for check in link.checks:
                why = check(layer)
                if why:
                    return why
        return dtype_problem(self.spec, *layers)

    def _mapped(self, layers, x_shape):
        """(the op's inputs after the first, its attributes), checked by the op's
        shape function on `x_shape`; raises OpError."""
        by_label = dict(zip(self.pattern.labels, layers))
        values = [fusion.resolve(ref, by_label) for ref in self.pattern.inputs]
        attrs = self.spec.resolve({k: fusion.resolve(ref, by_label) for k, ref in self.pattern.attrs.items()})
        shapes = [tuple(int(d) for d in getattr(v, "shape", ())) for v in values]
        self.spec.infer_shapes([x_shape, *shapes], **attrs)
        return values, shapes, attrs

    def _no_kernel(self):
        """Why the op cannot be fused here (no TensorFlow kernel loaded for it), or None."""
        from .fuse_layers import no_kernel, tf_function
        return None if tf_function(self.spec) is not None else f"{no_kernel(self.spec)}; the layers stay as they are"

    def _x_shape(self, nodes):
        """The op's first input: the output of the last kept layer, else the chain's input.
        (A kept layer's overrides, dropping a bias or an activation, keep its output shape.)"""
        kept = [n for link, n in zip(self.chain, nodes) if link.label in self.pattern.keep]
        tensor = kept[-1].outputs[0] if kept else nodes[0].input_tensors[0]
        return tuple(tensor.shape)

    # -- graph nodes --------------------------------------------------------
    def match(self, rw, node) -> None:
        if not self._candidate(node.operation):
            return
        nodes = [node]
        for link in reversed(self.chain[:-1]):
            here = nodes[0]
            if len(here.input_tensors) != 1:
                return self._skip(rw, [n.operation for n in nodes],
                                  f"{kind(here.operation)} takes {len(here.input_tensors)} inputs, not one")
            prev = rw.producer_of(here)
            layer = None if prev is None or prev.is_input else prev.operation
            if layer is None or not _is(layer, link):
                what = "a model input" if layer is None else kind(layer)
                return self._skip(rw, [n.operation for n in nodes],
                                  f"{kind(here.operation)} follows {what}, not a {' or '.join(link.layer)}")
            _, why = rw.sole_consumer(prev.outputs[0])
            nodes.insert(0, prev)
            if why:
                return self._skip(rw, [n.operation for n in nodes],
                                  f"the {type(layer).__name__} output {why}; fusing would drop it")
        layers = [n.operation for n in nodes]
        if len(nodes[0].input_tensors) != 1:
            return self._skip(rw, layers, f"{kind(layers[0])} takes {len(nodes[0].input_tensors)} inputs, not one")
        busy = next((n for n in nodes if rw.taken(n)), None)
        if busy is not None:
            return self._skip(rw, layers, f"{kind(busy.operation)} is already part of another fused layer")
        problem = self._problem(layers)
        if problem:
            return self._skip(rw, layers, problem)
        try:
            values, shapes, attrs = self._mapped(layers, self._x_shape(nodes))
        except (OpError, ValueError) as e:
            return self._skip(rw, layers, f"the fused op rejects it: {e}")
        missing = self._no_kernel()
        if missing:
            return self._skip(rw, layers, missing)
        last = layers[-1]
        name = f"{last.name}_{self.key}" if self.chain[-1].label in self.pattern.keep else last.name
        rw.plan_build(node, self.key, name, self._builder(layers, values, shapes, attrs), nodes[0], nodes[:-1],
                      [layer.name for layer in layers])

    def _builder(self, layers, values, shapes, attrs):
        def build(x, name):
            for link, layer in zip(self.chain, layers):
                if link.label in self.pattern.keep:
                    clone = _kept(layer, self.pattern.keep[link.label])
                    x = clone(x)  # builds it
                    _copy_weights(layer, clone)
            fused = self._fused_layer(layers, shapes, attrs, name)
            out = fused(x)
            for dst, src in zip(fused.weights, values):
                dst.assign(src)
            return out, fused.name
        return build

    def _fused_layer(self, layers, shapes, attrs, name):
        from .fuse_layers import FusedOp
        weights = [(arg.name, shape) for arg, shape in zip(self.spec.inputs[1:], shapes)]
        return FusedOp(self.spec.name, attrs=attrs, weights=weights, replaces=[layer.name for layer in layers],
                       name=name, dtype=layers[-1].dtype_policy)

    # -- a sublayer called from a layer's Python code (one-link chains) -------
    def is_sublayer(self, layer) -> bool:
        return len(self.chain) == 1 and self._candidate(layer)

    def _fuse_sublayer(self, rw, layer, label, where):
        """One layer standing for `layer`: the kept layer (if any) and the op in a
        Sequential, built and holding its weights; or None (reported)."""
        import keras
        shape = built_input_shape(layer)
        skip = lambda why: rw.report.skip(self.key, [label], f"{where}: {why}")  # noqa: E731
        if shape is None:
            return skip(f"{kind(layer)} was never called (no input shape)")
        problem = self._problem([layer])
        if problem:
            return skip(problem)
        kept = self.chain[0].label in self.pattern.keep
        x_shape = tuple(layer.compute_output_shape(tuple(shape))) if kept else tuple(shape)
        try:
            values, shapes, attrs = self._mapped([layer], x_shape)
        except (OpError, ValueError) as e:
            return skip(f"the fused op rejects it: {e}")
        missing = self._no_kernel()
        if missing:
            return skip(missing)
        parts = ([_kept(layer, self.pattern.keep[self.chain[0].label])] if kept else [])
        fused = self._fused_layer([layer], shapes, attrs, f"{layer.name}_{self.key}")
        fused.replaces = [label]
        seq = keras.Sequential(parts + [fused], name=f"{layer.name}_fused")
        seq.build(tuple(shape))
        if kept:
            _copy_weights(layer, parts[0])
        for dst, src in zip(fused.weights, values):
            dst.assign(src)
        rw.report.add_block(self.key, label, [label])
        return seq


def _kept(layer, overrides):
    """`layer` re-made from its config with `overrides` (built, it takes the
    original's weights by name: _copy_weights)."""
    return type(layer).from_config({**layer.get_config(), **overrides})


def _copy_weights(src, dst) -> None:
    have = {w.name: w for w in src.weights}
    for w in dst.weights:
        if w.name not in have:
            raise ValueError(f"{kind(dst)}: no weight {w.name!r} in the original {kind(src)} to copy")
        w.assign(have[w.name])
