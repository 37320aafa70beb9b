"""A TensorFlow model as a frozen graph: what graph-level fusion reads and writes.

`GraphModel` holds a GraphDef with its variables as constants and its functions
inlined (convert_variables_to_constants_v2, whose Grappler pass inlines them),
its inputs (placeholder tensor, name, static shape, dtype) and its outputs
(tensor, name). It looks like a loaded SavedModel where bridge reads one
(`signatures["serving_default"]`, taking the inputs by keyword, returning a
dict), so every exporter and parity runtime takes it as it is; `save(dir)`
writes it as a SavedModel TensorFlow (and TF Serving) runs, and `lowered()` is
the same graph with each spec'd op replaced by a call of its composite
(standard ops only, for TFLite builtins).

    gm = load("saved_model_dir")        # or a loaded SavedModel, a ConcreteFunction,
    gm = load("frozen.pb", inputs=["x:0"], outputs=["Identity:0"])   # a TF1 GraphDef
"""
from __future__ import annotations

import os
from typing import List, Optional, Sequence, Tuple

import numpy as np

from bridge.errors import BridgeError

from .graph_region import producer, ref

Input = Tuple[str, str, Tuple, str]   # placeholder tensor, name, static shape (None dims), numpy dtype
Output = Tuple[str, str]              # tensor, name


class GraphModelError(BridgeError, ValueError):
    """A graph that cannot be read as a model: the message says why."""


class _Signature:
    """A GraphModel's serving signature, called as a loaded SavedModel's is."""

    def __init__(self, model: "GraphModel"):
        self.model = model

    @property
    def structured_input_signature(self):
        import tensorflow as tf
        return (), {name: tf.TensorSpec(shape, tf.as_dtype(dtype), name=name) for _, name, shape, dtype in self.model.inputs}

    @property
    def structured_outputs(self):
        return dict(self.model.function().get_concrete_function().structured_outputs)

    def __call__(self, **kwargs):
        names = [name for _, name, _, _ in self.model.inputs]
        missing = [n for n in names if n not in kwargs]
        if missing:
            raise TypeError(f"the graph's signature takes {names}; missing {missing}")
        return self.model.function()(*[kwargs[n] for n in names])


class GraphModel:
    def __init__(self, graph_def, inputs: Sequence[Input], outputs: Sequence[Output], name: str = "graph"):
        self.graph_def = graph_def
        self.inputs: List[Input] = [tuple(i) for i in inputs]
        self.outputs: List[Output] = [tuple(o) for o in outputs]
        self.name = name
        self._fn = None
        self.signatures = {"serving_default": _Signature(self)}

    def replace(self, graph_def, name: Optional[str] = None) -> "GraphModel":
        return GraphModel(graph_def, self.inputs, self.outputs, name or self.name)

    def op_counts(self) -> dict:
        counts: dict = {}
        for n in self.graph_def.node:
            counts[n.op] = counts.get(n.op, 0) + 1
        return counts

    def function(self):
        """A tf.function over the inputs (positional, in order) returning {output name: tensor}."""
        if self._fn is None:
            import tensorflow as tf
            _ops_loaded(self.graph_def)
            specs = [tf.TensorSpec(shape, tf.as_dtype(dtype), name=name) for _, name, shape, dtype in self.inputs]
            graph_def, feeds = self.graph_def, [t for t, _, _, _ in self.inputs]
            tensors, names = [t for t, _ in self.outputs], [n for _, n in self.outputs]

            def call(*args):
                got = tf.graph_util.import_graph_def(graph_def, input_map=dict(zip(feeds, args)),
                                                     return_elements=tensors, name="graph")
                return {n: tf.identity(t, name=_op_name(n)) for n, t in zip(names, got)}
            self._fn = tf.function(call, input_signature=specs, autograph=False)
        return self._fn

    def save(self, path) -> str:
        """Writes the graph as a SavedModel at `path` (atomically: a temporary
        folder renamed into place); its serving_default signature takes and
        returns the model's inputs and outputs by name."""
        import tensorflow as tf
        from bridge import atomic
        fn = self.function()
        module = tf.Module()
        module.serve = fn
        with atomic.replacing_folder(path) as tmp:
            tf.saved_model.save(module, tmp, signatures={"serving_default": fn.get_concrete_function()})
        return os.path.abspath(os.fspath(path))

    def lowered(self, where=None) -> "GraphModel":
        """The graph with every node of a spec'd op (or each that `where(spec,
        input_shapes, attrs)` picks) replaced by a call of the op's TensorFlow
        composite (its standard-ops decomposition); raises GraphModelError for an
        op that has none."""
        return self.replace(_lowered(self.graph_def, where), f"{self.name}_lowered")


def _op_name(name: str) -> str:
    import re
    return re.sub(r"[^A-Za-z0-9_.\-/]", "_", name).lstrip("_-/.") or "output"


def _ops_loaded(graph_def) -> None:
    """bridge's op library (and so its ops) loaded before a graph that uses them is imported."""
    from bridge import ops
    if any(n.op in ops.SPECS for n in graph_def.node):
        from bridge import tf_ops
        tf_ops.load()


# -- reading models -----------------------------------------------------------------
def load(model, inputs: Optional[Sequence[str]] = None, outputs: Optional[Sequence[str]] = None,
         name: Optional[str] = None) -> GraphModel:
    """A GraphModel from a SavedModel (folder or loaded object, its serving_default
    signature), a ConcreteFunction, a GraphDef or a frozen GraphDef `.pb` file
    (with `inputs`/`outputs` tensor names, as tf2onnx's --graphdef takes them)."""
    if isinstance(model, GraphModel):
        return model
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if os.path.isdir(path):
            import tensorflow as tf
            _library_for(path)
            return load(tf.saved_model.load(path), name=name or _stem(path))
        return from_graph_def(read_graph_def(path), inputs, outputs, name or _stem(path))
    if type(model).__name__ == "GraphDef":
        return from_graph_def(model, inputs, outputs, name or "graph")
    sigs = getattr(model, "signatures", None)
    if sigs is not None and "serving_default" in sigs:
        return from_concrete(sigs["serving_default"], name or getattr(model, "name", None) or "savedmodel")
    if hasattr(model, "structured_input_signature") and hasattr(model, "graph"):
        return from_concrete(model, name or "function")
    raise GraphModelError(f"cannot read {type(model).__name__} as a TensorFlow graph: expected a SavedModel (folder "
                          f"or loaded), a ConcreteFunction or a GraphDef")


def _library_for(path) -> None:
    import bridge.tf_ops  # noqa: F401  a SavedModel with bridge's ops loads only where they are registered


def read_graph_def(path):
    from tensorflow.core.framework import graph_pb2
    gd = graph_pb2.GraphDef()
    try:
        with open(path, "rb") as f:
            gd.ParseFromString(f.read())
    except Exception as e:  # noqa: BLE001 - a file that is no GraphDef
        raise GraphModelError(f"cannot read {path} as a frozen GraphDef: {type(e).__name__}: {e}") from None
    return gd


def from_concrete(cf, name: str) -> GraphModel:
    """A ConcreteFunction (a SavedModel signature) frozen: variables to constants,
    functions inlined; inputs named by the signature's keywords, outputs by its keys."""
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2
    frozen = convert_variables_to_constants_v2(cf)
    args, kwargs = cf.structured_input_signature
    specs = list(args) + [kwargs[k] for k in sorted(kwargs)]
    names = [getattr(s, "name", None) or f"input_{i}" for i, s in enumerate(args)] + sorted(kwargs)
    placeholders = [t for t in frozen.inputs if t.dtype != tf.resource]
    if len(placeholders) != len(specs):
        raise GraphModelError(f"{name}: {len(specs)} inputs in the signature, {len(placeholders)} placeholders")
    inputs = [(t.name, n, tuple(s.shape.as_list()) if s.shape.rank is not None else (), np.dtype(s.dtype.as_numpy_dtype).name)
              for t, n, s in zip(placeholders, names, specs)]
    structure = cf.structured_outputs
    if isinstance(structure, dict):
        out_names = sorted(structure)
    else:
        flat = tf.nest.flatten(structure)
        out_names = [f"output_{i}" for i in range(len(flat))]
    outputs = [(t.name, n) for t, n in zip(frozen.outputs, out_names)]
    return GraphModel(frozen.graph.as_graph_def(), inputs, outputs, name)


def from_graph_def(graph_def, inputs: Optional[Sequence[str]], outputs: Optional[Sequence[str]],
                   name: str) -> GraphModel:
    """A TF1 frozen GraphDef with its input and output tensor names (`x:0`, or
    `x` for output 0). Inputs default to its Placeholders; outputs must be given."""
    nodes = {n.name: n for n in graph_def.node}
    if not inputs:
        inputs = [n.name for n in graph_def.node if n.op == "Placeholder"]
    if not outputs:
        raise GraphModelError(f"{name}: a frozen GraphDef needs its output tensor names (--outputs NAME:0,...)")
    found = []
    for t in inputs:
        node = nodes.get(producer(t))
        if node is None or node.op not in ("Placeholder", "PlaceholderWithDefault"):
            known = [n.name for n in graph_def.node if n.op == "Placeholder"]
            raise GraphModelError(f"{name}: no placeholder {t!r} (--inputs); its placeholders: {known}")
        from tensorflow.python.framework import dtypes
        shape_attr = node.attr["shape"].shape
        shape = () if shape_attr.unknown_rank else tuple(d.size if d.size >= 0 else None for d in shape_attr.dim)
        found.append((ref(t), node.name, shape, dtypes.as_dtype(node.attr["dtype"].type).as_numpy_dtype.__name__))
    outs = []
    for t in outputs:
        if producer(t) not in nodes:
            raise GraphModelError(f"{name}: no node {producer(t)!r} for the output {t!r} (--outputs)")
        outs.append((ref(t), t[:-2] if t.endswith(":0") else t))
    return GraphModel(graph_def, [(t, n, s, np.dtype(d).name) for t, n, s, d in found], outs, name)


def _stem(path) -> str:
    base = os.path.basename(os.path.normpath(os.fspath(path)))
    return base.rsplit(".", 1)[0] if "." in base else base


# -- lowering ------------------------------------------------------------------------
def _calling(composite, attrs):
    def call(*xs):
        return composite(*xs, **attrs)
    return call


def _lowered(graph_def, where=None):
    """graph_def with each spec'd op node (that `where` picks) a PartitionedCall of the op's composite."""
    import tensorflow as tf
    from tensorflow.core.framework import attr_value_pb2, graph_pb2
    from bridge import ops, tf_ops
    from .graph_region import GraphIndex
    todo = [n for n in graph_def.node if n.op in ops.SPECS]
    if not todo:
        return graph_def
    _ops_loaded(graph_def)
    index = GraphIndex(graph_def, [])
    out = graph_pb2.GraphDef()
    out.CopyFrom(graph_def)
    made = {}
    have = {f.signature.name for f in out.library.function}
    by_name = {n.name: n for n in out.node}
    for node in todo:
        spec = ops.SPECS[node.op]
        g = index.nodes[node.name]
        attrs = {a.name: g.attrs[a.name] for a in spec.attrs if a.name in g.attrs}
        dtype = g.attrs.get("T", "float32")
        shapes = [index.static_shape(i) for i in g.inputs]
        if where is not None and not where(spec, shapes, attrs):
            continue
        composite = getattr(tf_ops.composite, spec.module, None)
        if composite is None:
            raise GraphModelError(f"{spec.name}: no TensorFlow composite (its spec has no decomposition TensorFlow "
                                  f"can build): node '{node.name}' cannot be lowered; --mode custom keeps it")
        key = (spec.name, repr(sorted(attrs.items())), dtype, repr(shapes))
        if key not in made:
            specs = [tf.TensorSpec(s, tf.as_dtype(dtype)) for s in shapes]
            cf = tf.function(_calling(composite, attrs), autograph=False).get_concrete_function(*specs)
            for f in list(cf.graph.as_graph_def().library.function) + [cf.function_def]:
                if f.signature.name not in have:
                    out.library.function.add().CopyFrom(f)
                    have.add(f.signature.name)
            made[key] = (cf.function_def.signature.name, len(cf.outputs))
        fname, n_out = made[key]
        call = by_name[node.name]
        call.op = "PartitionedCall"
        call.ClearField("attr")
        call.attr["Tin"].CopyFrom(attr_value_pb2.AttrValue(list=attr_value_pb2.AttrValue.ListValue(
            type=[tf.as_dtype(dtype).as_datatype_enum] * len(g.inputs))))
        call.attr["Tout"].CopyFrom(attr_value_pb2.AttrValue(list=attr_value_pb2.AttrValue.ListValue(
            type=[tf.as_dtype(dtype).as_datatype_enum] * n_out)))
        call.attr["f"].CopyFrom(attr_value_pb2.AttrValue(func=attr_value_pb2.NameAttrList(name=fname)))
    return out
