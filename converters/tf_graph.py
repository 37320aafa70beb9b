"""What bridge does around tf2onnx to a traced Keras 3 function so that it
converts, without patching tf2onnx or Keras:

- `xla_calls_inlined`: Keras 3 runs a grouped Conv2D (groups > 1, e.g.
  ConvNeXt's depthwise 7x7) as a nested tf.function compiled with XLA
  (`_XlaMustCompile`), which grappler never inlines, so tf2onnx leaves a bare
  StatefulPartitionedCall (an invalid ONNX model). For the conversion only, the
  call nodes lose the XLA mark: grappler inlines them and tf2onnx writes a Conv
  with `group`. The mark is put back afterwards (TensorFlow on CPU still needs
  XLA to run a grouped convolution).
- `captured_constants` / `constants_to_initializers`: tensors a layer keeps as
  plain tensors, not variables (Keras 3's `Normalization` mean and variance,
  e.g. in EfficientNet), are captured by the trace as placeholders that
  freezing leaves alone, so tf2onnx made them graph inputs. Their values are
  known: they become initializers.
"""
from __future__ import annotations

import contextlib
from typing import Dict, Sequence

import numpy as np

XLA_ATTR = "_XlaMustCompile"
CALL_OPS = ("StatefulPartitionedCall", "PartitionedCall")


@contextlib.contextmanager
def xla_calls_inlined(concrete):
    """While active, the call nodes of `concrete`'s graph have no XLA mark."""
    from tensorflow.core.framework import attr_value_pb2
    changed = []
    for op in concrete.graph.get_operations():
        if op.type in CALL_OPS and XLA_ATTR in op.node_def.attr and op.get_attr(XLA_ATTR):
            op._set_attr(XLA_ATTR, attr_value_pb2.AttrValue(b=False))
            changed.append(op)
    try:
        yield len(changed)
    finally:
        for op in changed:
            op._set_attr(XLA_ATTR, attr_value_pb2.AttrValue(b=True))


def captured_constants(concrete) -> Dict[str, np.ndarray]:
    """{placeholder tensor name: value} of the non-resource tensors `concrete`
    captured (variables are resources: freezing turns those into constants)."""
    out = {}
    for value, placeholder in zip(concrete.captured_inputs, concrete.graph.internal_captures):
        dtype = getattr(value, "dtype", None)
        if dtype is None or dtype.name == "resource" or not hasattr(value, "numpy"):
            continue
        out[placeholder.name] = np.asarray(value.numpy())
    return out


def constants_to_initializers(model, constants: Dict[str, np.ndarray], keep: Sequence[str]) -> int:
    """Graph inputs of `model` that are captured constants (not in `keep`, the
    model's real inputs) become initializers; returns how many."""
    from onnx import numpy_helper
    keep = set(keep)
    used = {i for n in model.graph.node for i in n.input}
    moved = []
    for v in model.graph.input:
        if v.name in keep or v.name not in constants:
            continue
        if v.name in used:  # else only dropped (tf2onnx folded its consumer away)
            model.graph.initializer.append(numpy_helper.from_array(constants[v.name], v.name))
        moved.append(v)
    for v in moved:
        model.graph.input.remove(v)
    return len(moved)


def without_identity_n(graph_def, names: Sequence[str] = ()):
    """(graph_def without IdentityN nodes, `names` rewritten the same way).
    tf.custom_gradient (Keras 3's swish/silu, as in EfficientNet and
    MobileNetV3) leaves an IdentityN in the trace; the TFLite converter then
    writes no SignatureDef at all. Each consumer of an IdentityN output reads
    the matching input instead."""
    nodes = {n.name: n for n in graph_def.node if n.op == "IdentityN"}
    if not nodes:
        return graph_def, list(names)

    def source(ref: str) -> str:
        control = ref.startswith("^")
        name, _, index = ref.lstrip("^").partition(":")
        while name in nodes:
            data = [i for i in nodes[name].input if not i.startswith("^")]
            ref = data[int(index or 0)] if not control else "^" + data[0].partition(":")[0]
            name, _, index = ref.lstrip("^").partition(":")
        return ref

    from tensorflow.core.framework import graph_pb2
    out = graph_pb2.GraphDef()
    out.versions.CopyFrom(graph_def.versions)
    out.library.CopyFrom(graph_def.library)
    for n in graph_def.node:
        if n.name in nodes:
            continue
        m = out.node.add()
        m.CopyFrom(n)
        del m.input[:]
        m.input.extend(source(i) for i in n.input)
    return out, [source(t) for t in names]
