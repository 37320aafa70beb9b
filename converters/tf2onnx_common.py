"""What every tf2onnx handler of a fused op does: turn the TensorFlow node into
one com.bridge node whose attributes are exactly the spec's ONNX attributes.

tf2onnx copies a TF node's attributes as they are (SAME padding, TF's 4-value
strides, ...) and keeps the default domain; the handler rewrites both. The
attribute translation itself lives in the spec (`spec.to_onnx_attrs`), so the
handler only reads the TF attributes and the static input shapes.

Handlers register with `@tf_op(name, domain=spec.domain)`, which tf2onnx only
consults when the conversion's `extra_opset` includes that domain
(`custom_opset()` gives it).
"""
from __future__ import annotations

import contextlib
from typing import Dict

from onnx import helper

from bridge import ops as specs


def custom_opset():
    """The extra opset tf2onnx needs for the com.bridge handlers to be used."""
    domains = {(s.domain, s.domain_version) for s in specs.all_specs()}
    return [helper.make_opsetid(d, v) for d, v in sorted(domains)]


def tf_attrs(node, spec) -> dict:
    """The TF attributes the spec knows, as Python values; absent ones are left
    to the spec's defaults."""
    out = {}
    for a in spec.attrs:
        if a.name not in node.attr:
            continue
        value = node.get_attr_value(a.name)
        if isinstance(value, bytes):
            value = value.decode()
        out[a.name] = value
    return out


def input_shapes(ctx, node):
    """Static input shapes with None for unknown dims (and None for unknown rank)."""
    shapes = []
    for name in node.input:
        shape = ctx.get_shape(name)
        shapes.append(None if shape is None else tuple(None if d is None or d < 0 else int(d) for d in shape))
    return shapes


def to_custom_node(ctx, node, spec) -> None:
    """Rewrites `node` in place into the spec's com.bridge node. Raises OpError
    (naming op, argument and shapes) when the attributes cannot be translated,
    e.g. SAME padding on a dynamic spatial size."""
    onnx_attrs = spec.to_onnx_attrs(input_shapes(ctx, node), **tf_attrs(node, spec))
    node.domain = spec.domain
    for name in list(node.attr):  # T and the TF-only attributes (padding, explicit_paddings) go
        del node.attr[name]
    for a in spec.onnx_attrs:
        value = onnx_attrs[a.name]
        node.set_attr(a.name, list(value) if a.is_list else value)


def register_handler(spec):
    """Registers with tf2onnx the handler that rewrites TF nodes of `spec.name`
    into the spec's com.bridge node (`to_custom_node`); returns the handler class.
    Every spec'd op's handler is this one (`register_all`)."""
    from tf2onnx.handler import tf_op

    def version_1(cls, ctx, node, **kwargs):
        to_custom_node(ctx, node, spec)

    handler = type(f"{spec.name}Handler", (), {"version_1": classmethod(version_1)})
    return tf_op(spec.name, domain=spec.domain)(handler)


_spec_handlers: Dict[str, type] = {}  # op -> the handler made from its spec


def register_all() -> Dict[str, str]:
    """Registers with tf2onnx the handler of every spec'd op (bridge's and a
    team's alike, made from its spec) and bridge's handlers for standard ops
    tf2onnx lacks (tf2onnx_standard). Returns {op: "yes"}."""
    from . import tf2onnx_standard
    tf2onnx_standard.register()
    status = {}
    for spec in specs.all_specs():
        _spec_handler(spec)
        status[spec.name] = "yes"
    return status


def _spec_handler(spec) -> type:
    if spec.name not in _spec_handlers:
        _spec_handlers[spec.name] = register_handler(spec)
    return _spec_handlers[spec.name]


@contextlib.contextmanager
def fresh_node_protos():
    """While active, tf2onnx writes each node's attributes into a new NodeProto
    instead of clearing and refilling the old one. tf2onnx rewrites every node
    after each of its ~24 optimizer passes; with the upb protobuf runtime the
    cleared attributes (Const values: the weights) stay in the old message's
    arena until the message dies, so every pass kept one more copy of the
    weights (YOLOv3-416: ~250 MB a pass, 6 GB in all)."""
    import onnx
    from tf2onnx.graph import Node
    original = Node.update_proto

    def update_proto(self, external_tensor_storage=None):
        old = self._op
        self._op = onnx.NodeProto(name=old.name, op_type=old.op_type, domain=old.domain, doc_string=old.doc_string)
        return original(self, external_tensor_storage)

    Node.update_proto = update_proto
    try:
        yield
    finally:
        Node.update_proto = original
