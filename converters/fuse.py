"""The Keras fusion rewriter: `fuse(model) -> (fused_model, report)`.

It walks a functional (or Sequential) Keras model's graph, node by node, and
rebuilds it as a new functional model in which

- [ZeroPadding2D ->] Conv2D -> BatchNormalization -> LeakyReLU becomes one
  `FusedConvBnLeaky` (YoloConvBnLeaky; a ZeroPadding2D before a VALID conv is
  folded into EXPLICIT padding; conv bias and BN mean are passed separately),
- LayerNormalization over the last axis becomes `FusedLayerNormalization`,
- a `bridge.models.yolo.YoloDecodeHead` becomes `FusedYoloDecode`,

- a LayerNormalization that a layer calls from its own Python `call` (keras_hub's
  transformer blocks hold theirs as attributes or in lists) is fused in a copy of
  that layer (same config and weights, the norm swapped for the fused layer),

and everything else passes through unchanged: the very same layer objects (and
variables) as in the original, called on the rebuilt tensors. A functional model
used as a layer (a backbone) is fused on its own and its fused copy called instead. The fused layers
hold copies of the original, unfolded weights. A chain is fused only when no
intermediate tensor is used elsewhere (another consumer or a model output);
each partial match that is not fused is listed in the report with the reason.

A SavedModel is a graph, not Keras layers: it passes through unfused, and the
report says so (graph-level rewriting is not implemented). A subclassed Keras
model has no graph to walk and passes through the same way.

The fused model is for inference: the fused layers always use the BatchNorm
moving statistics, whatever `training` says.
"""
from __future__ import annotations

from collections import defaultdict

from .fuse_report import PATTERNS, FuseReport  # noqa: F401  (PATTERNS re-exported)


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
    try:
        return _Rewriter(graph, report).run(name or f"{model.name}_fused")
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
    return (f"{what} is a TensorFlow graph, not Keras layers: graph-level rewriting is not supported; "
            f"the model passes through unfused (fuse the Keras model before exporting it instead)")


def _functional(model):
    import keras
    if isinstance(model, keras.Sequential):
        if not model.built or getattr(model, "_functional", None) is None:
            return None
        return model._functional
    if hasattr(model, "_nodes_by_depth") and getattr(model, "_inputs_struct", None) is not None:
        return model
    return None


def _layer_norms_inside(layer):
    """(owner, attribute or list index, LayerNormalization) for each
    LayerNormalization held by `layer` or by its (non-model) sublayers, as an
    attribute or in a list attribute, depth first."""
    import keras
    out, seen = [], set()

    def visit(owner, key, value):
        if isinstance(value, keras.layers.LayerNormalization):
            out.append((owner, key, value))
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


def _norm_problem(ln, rank: int):
    """Why the fused op cannot stand for LayerNormalization `ln` on a rank-`rank`
    input, or None."""
    from .fuse_layers import NORM
    axes = sorted(a % rank for a in (ln.axis if isinstance(ln.axis, (list, tuple)) else [ln.axis]))
    if axes != [rank - 1]:
        return f"LayerNormalization over axes {axes} of a rank-{rank} input, not only the last axis"
    if getattr(ln, "rms_scaling", False):
        return "LayerNormalization has rms_scaling=True (RMS norm, no mean)"
    if ln.compute_dtype not in NORM.dtypes:
        return f"LayerNormalization computes in {ln.compute_dtype}; the fused op takes {list(NORM.dtypes)}"
    return None


def _kind(op) -> str:
    return f"{type(op).__name__} '{op.name}'"


class _Rewriter:
    def __init__(self, graph, report):
        self.g = graph
        self.report = report
        self.nodes = [n for d in sorted(graph._nodes_by_depth, reverse=True) for n in graph._nodes_by_depth[d]]
        self.producer = {id(t): n for n in self.nodes for t in n.outputs}
        self.consumers = defaultdict(list)
        for n in self.nodes:
            for t in n.input_tensors:
                self.consumers[id(t)].append(n)
        self.outputs = {id(t) for t in graph.outputs}
        self.absorbed = set()   # id(node) of nodes replaced by a fused layer
        self.anchors = {}       # id(node) -> (pattern, fused layer factory, input tensor, originals)
        self.submodels = {}     # id(nested functional model) -> its fused version
        self.copies = {}        # id(layer with LayerNormalizations inside) -> its fused copy (or None)

    # -- graph helpers ------------------------------------------------------
    def _sole_consumer(self, tensor):
        """(the one consumer node, None) or (None, why the tensor cannot be fused away)."""
        users = self.consumers.get(id(tensor), [])
        if id(tensor) in self.outputs:
            return None, "is a model output"
        if len(users) != 1:
            return None, f"feeds {len(users)} consumers"
        return users[0], None

    def _from(self, node):
        """The node producing the first input of `node`."""
        return self.producer.get(id(node.input_tensors[0])) if node.input_tensors else None

    # -- matching -----------------------------------------------------------
    def match(self):
        import keras
        from bridge.models.yolo import YoloDecodeHead
        self.training_from = None
        for node in self.nodes:  # in execution order
            op = node.operation
            if node.is_input or op is None:
                continue
            if isinstance(op, keras.layers.BatchNormalization):
                self._match_conv_bn_leaky(node)
            elif isinstance(op, keras.layers.LeakyReLU):
                src = self._from(node)
                if src is None or not isinstance(src.operation, keras.layers.BatchNormalization):
                    what = "a model input" if src is None or src.is_input else _kind(src.operation)
                    self.report.skip("conv_bn_leaky", [op.name], f"LeakyReLU follows {what}, not a BatchNormalization")
            elif isinstance(op, keras.layers.LayerNormalization):
                self._match_layer_norm(node)
            elif type(op).__name__ == "RMSNormalization":
                self.report.skip("layer_norm", [op.name], "RMSNormalization (no mean); the fused op is a "
                                                          "LayerNormalization: it stays as it is")
            elif isinstance(op, YoloDecodeHead):
                self._match_decode(node)
            if node.arguments.kwargs.get("training") is True and self.training_from is None:
                # Keras 3 passes an explicit training=True on to every layer called
                # after it in the same model call: later BatchNorms use batch statistics
                self.training_from = op.name

    def _dtype_problem(self, *layers):
        from .fuse_layers import CONV
        for layer in layers:
            if layer.compute_dtype not in CONV.dtypes:
                return f"{_kind(layer)} computes in {layer.compute_dtype}; the fused ops take {list(CONV.dtypes)}"
        return None

    def _match_conv_bn_leaky(self, bn_node):
        import keras
        from .fuse_layers import CONV, FusedConvBnLeaky
        bn = bn_node.operation
        conv_node = self._from(bn_node)
        conv = None if conv_node is None or conv_node.is_input else conv_node.operation
        names = [bn.name] if conv is None else [conv.name, bn.name]
        skip = lambda reason: self.report.skip("conv_bn_leaky", names, reason)  # noqa: E731
        if not isinstance(conv, keras.layers.Conv2D):
            return skip(f"BatchNormalization follows {'a model input' if conv is None else _kind(conv)}, not a Conv2D")
        if conv.data_format != "channels_last":
            return skip(f"Conv2D is {conv.data_format}; the fused op is NHWC")
        if conv.groups != 1:
            return skip(f"Conv2D has groups={conv.groups}; the fused op is a plain convolution")
        act = getattr(conv.activation, "__name__", str(conv.activation))
        if act != "linear":
            return skip(f"Conv2D has activation '{act}' before the BatchNormalization")
        _, why = self._sole_consumer(conv_node.outputs[0])
        if why:
            return skip(f"the Conv2D output {why}; fusing would drop it")
        rank = len(bn_node.input_tensors[0].shape)
        if bn.axis % rank != rank - 1:
            return skip(f"BatchNormalization axis={bn.axis} is not the channel (last) axis")
        if getattr(bn, "renorm", False):
            return skip("BatchNormalization has renorm=True")
        if bn_node.arguments.kwargs.get("training") is True:
            return skip("BatchNormalization is called with training=True (batch statistics)")
        if self.training_from is not None:
            return skip(f"runs after '{self.training_from}', which is called with training=True: Keras runs "
                        f"the later layers of the call in training mode too (batch statistics)")
        leaky_node, why = self._sole_consumer(bn_node.outputs[0])
        if why:
            return skip(f"the BatchNormalization output {why}; fusing would drop it")
        leaky = leaky_node.operation
        if not isinstance(leaky, keras.layers.LeakyReLU):
            return skip(f"BatchNormalization is followed by {_kind(leaky)}, not a LeakyReLU")
        names.append(leaky.name)
        problem = self._dtype_problem(conv, bn, leaky)
        if problem:
            return skip(problem)

        first, pad = conv_node, None
        attrs = dict(strides=(1, *conv.strides, 1), dilations=(1, *conv.dilation_rate, 1),
                     padding=conv.padding.upper(), explicit_paddings=())
        zp_node = self._from(conv_node)
        if zp_node is not None and not zp_node.is_input and isinstance(zp_node.operation, keras.layers.ZeroPadding2D):
            pad = self._fold_padding(zp_node, conv, attrs)
            if pad is not None:
                first = zp_node
        try:
            CONV.infer_shapes([tuple(first.input_tensors[0].shape), tuple(conv.kernel.shape)]
                              + [(conv.filters,)] * 5, **attrs, epsilon=bn.epsilon, alpha=leaky.negative_slope)
        except ValueError as e:
            return skip(f"the fused op rejects it: {e}")
        originals = ([pad.name] if pad is not None else []) + names

        def make(layer_name):
            return FusedConvBnLeaky(conv.filters, conv.kernel_size, use_bias=conv.use_bias, center=bn.center,
                                    scale=bn.scale, epsilon=bn.epsilon, alpha=leaky.negative_slope,
                                    replaces=originals, name=layer_name, dtype=conv.dtype_policy, **attrs)

        def weights():
            w = [conv.kernel] + ([conv.bias] if conv.use_bias else []) + ([bn.gamma] if bn.scale else [])
            return w + ([bn.beta] if bn.center else []) + [bn.moving_mean, bn.moving_variance]

        self._plan(leaky_node, "conv_bn_leaky", f"{conv.name}_bn_leaky", make, weights, first,
                   [n for n in (first, conv_node, bn_node) if n is not leaky_node], originals)

    def _fold_padding(self, zp_node, conv, attrs):
        """Folds the ZeroPadding2D into `attrs` (EXPLICIT) and returns the layer, or
        reports why it stays and returns None."""
        zp = zp_node.operation
        skip = lambda reason: self.report.skip("zero_padding", [zp.name, conv.name], reason)  # noqa: E731
        if zp.data_format != "channels_last":
            return skip(f"ZeroPadding2D is {zp.data_format}")
        _, why = self._sole_consumer(zp_node.outputs[0])
        if why:
            return skip(f"the ZeroPadding2D output {why}; it stays, the conv is fused alone")
        if conv.padding != "valid":
            return skip(f"the Conv2D pads itself ('{conv.padding}'): the ZeroPadding2D stays, the conv is fused alone")
        (top, bottom), (left, right) = zp.padding
        attrs.update(padding="EXPLICIT", explicit_paddings=(0, 0, top, bottom, left, right, 0, 0))
        return zp

    def _match_layer_norm(self, node):
        from .fuse_layers import FusedLayerNormalization
        ln = node.operation
        problem = _norm_problem(ln, len(node.input_tensors[0].shape))
        if problem:
            return self.report.skip("layer_norm", [ln.name], problem)

        def make(layer_name):
            return FusedLayerNormalization(epsilon=ln.epsilon, center=ln.center, scale=ln.scale,
                                           replaces=[ln.name], name=layer_name, dtype=ln.dtype_policy)

        def weights():
            return ([ln.gamma] if ln.scale else []) + ([ln.beta] if ln.center else [])

        self._plan(node, "layer_norm", ln.name, make, weights, node, [], [ln.name])

    def _match_decode(self, node):
        from .fuse_layers import DECODE, FusedYoloDecode
        head = node.operation
        attrs = dict(anchors=head.anchors, num_classes=head.num_classes, stride=head.stride,
                     scale_x_y=head.scale_x_y)
        try:
            DECODE.infer_shapes([tuple(node.input_tensors[0].shape)], **attrs)
        except ValueError as e:
            return self.report.skip("yolo_decode", [head.name], f"the fused op rejects it: {e}")
        if head.compute_dtype not in DECODE.dtypes:
            return self.report.skip("yolo_decode", [head.name],
                                    f"computes in {head.compute_dtype}; the fused op takes {list(DECODE.dtypes)}")

        def make(layer_name):
            return FusedYoloDecode(replaces=[head.name], name=layer_name, dtype=head.dtype_policy, **attrs)

        self._plan(node, "yolo_decode", head.name, make, lambda: [], node, [], [head.name])

    def _plan(self, anchor, pattern, layer_name, make, weights, first, absorbed, originals):
        for n in absorbed:
            self.absorbed.add(id(n))
        self.anchors[id(anchor)] = (pattern, layer_name, make, weights, first.input_tensors[0], originals)

    # -- rebuilding ---------------------------------------------------------
    def _nested(self, op):
        """A functional model used as a layer is fused on its own (once, however
        often it is called); its report entries are prefixed with its name."""
        import keras
        if not isinstance(op, keras.Model) or _functional(op) is None:
            return op
        if id(op) not in self.submodels:
            sub, rep = _Rewriter(_functional(op), FuseReport(model=op.name)).run(op.name)
            for b in rep.blocks:
                self.report.add_block(b.pattern, f"{op.name}/{b.layer}", [f"{op.name}/{n}" for n in b.replaces])
            for pattern, skips in rep.skips.items():
                for s in skips:
                    self.report.skip(pattern, [f"{op.name}/{n}" for n in s.layers], s.reason)
            self.report.notes += [f"{op.name}: {n}" for n in rep.notes]
            self.submodels[id(op)] = sub if rep.blocks else op
        return self.submodels[id(op)]

    def _inner(self, op, args, kwargs):
        """A layer whose own Python `call` uses LayerNormalization sublayers
        (keras_hub's TransformerEncoder/Decoder, ViT's blocks): a copy of it
        (same config, same weights) with each LayerNormalization the fused op
        takes swapped for a FusedLayerNormalization; None when there is none to
        fuse (or the layer cannot be copied: then it stays, and the report says
        why). The original layer is left as it was: the unfused model still uses it."""
        import keras
        if isinstance(op, (keras.Model, keras.layers.LayerNormalization)):
            return None
        if id(op) in self.copies:  # a layer called more than once (ALBERT's shared blocks): one copy
            return self.copies[id(op)]
        self.copies[id(op)] = copy = self._copy_fused(op, args, kwargs)
        return copy

    def _copy_fused(self, op, args, kwargs):
        found = list({id(ln): (o, k, ln) for o, k, ln in _layer_norms_inside(op)}.values())
        if not found:
            return None
        where = f"inside {_kind(op)}"
        try:
            clone = type(op).from_config(op.get_config())
            clone(*args, **kwargs)  # builds the copy's sublayers
            clone.set_weights(op.get_weights())
        except Exception as e:
            for _, _, ln in found:
                self.report.skip("layer_norm", [f"{op.name}/{ln.name}"],
                                 f"{where}, which cannot be copied to fuse it ({type(e).__name__}: "
                                 f"{str(e).splitlines()[0][:120] if str(e) else ''})")
            return None
        made = {}  # id(LayerNormalization) -> its fused copy (or None): one per layer, however often held
        for owner, attr, ln in _layer_norms_inside(clone):
            if id(ln) not in made:
                made[id(ln)] = self._fused_norm(ln, f"{op.name}/{ln.name}", where)
            if made[id(ln)] is not None:
                _replace(owner, attr, made[id(ln)])
        return clone if any(f is not None for f in made.values()) else None

    def _fused_norm(self, ln, label, where):
        """A built FusedLayerNormalization holding `ln`'s weights, or None (reported)."""
        from .fuse_layers import FusedLayerNormalization
        shape = (getattr(ln, "_build_shapes_dict", None) or {}).get("input_shape")
        problem = ("LayerNormalization was never called (no input shape)" if shape is None
                   else _norm_problem(ln, len(shape)))
        if problem:
            return self.report.skip("layer_norm", [label], f"{where}: {problem}")
        fused = FusedLayerNormalization(epsilon=ln.epsilon, center=ln.center, scale=ln.scale, replaces=[label],
                                        name=f"{ln.name}_fused", dtype=ln.dtype_policy)
        fused.build(tuple(shape))
        for dst, src in zip(fused.weights, ([ln.gamma] if ln.scale else []) + ([ln.beta] if ln.center else [])):
            dst.assign(src)
        self.report.add_block("layer_norm", label, [label])
        return fused

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
                pattern, layer_name, make, weights, source, originals = plan
                if layer_name in taken and layer_name not in originals:
                    layer_name += "_fused"
                taken.add(layer_name)
                layer = make(layer_name)
                out = layer(tensors[id(source)])
                for dst, src in zip(layer.weights, weights()):
                    dst.assign(src)
                self.report.add_block(pattern, layer.name, originals)
            for old, new in zip(node.outputs, tree.flatten(out)):
                tensors[id(old)] = new
        outputs = tree.map_structure(lambda t: tensors[id(t)], self.g._outputs_struct)
        fused = keras.Model(self.g._inputs_struct, outputs, name=name)
        self.report.fused_model = fused.name
        return fused, self.report
