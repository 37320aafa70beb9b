"""A tf2onnx handler for a TensorFlow list written in straight-line code: a
`tf.TensorArray` of size T filled by a Python loop over t = 0..T-1, then
stacked (keras_hub's RWKV7 runs its recurrence this way:
TensorListReserve -> TensorListSetItem x T -> TensorListStack). tf2onnx 1.17
converts list ops only as a While loop's state ("Can only convert
TensorListStack that is part of a While loop"). Here the stack becomes a Concat
of the T items, each unsqueezed on a new leading axis, and the reserve and the
writes go. Anything else (a While loop's list, an index written twice or not at
all, a write whose list is read elsewhere) goes to tf2onnx's own handler, which
it replaces (`REPLACED` keeps it, for the zoo's plain tf2onnx run).
Registered by `tf2onnx_standard.register`."""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

HANDLES_TENSOR_LIST = ("TensorListStack",)
REPLACED: Dict[Tuple[str, int, str], tuple] = {}   # (domain, opset, op) -> tf2onnx's own (handler, kwargs)


def _const_int(node) -> Optional[int]:
    if node is None or not node.is_const():
        return None
    value = node.get_tensor_value(as_list=True)
    if isinstance(value, list):
        value = value[0] if len(value) == 1 else None
    return value if isinstance(value, int) else None


def straight_line_items(ctx, stack) -> Optional[Tuple[List[str], list]]:
    """The item tensors, in index order, of the straight-line list `stack`
    reads, and the list nodes that go with it; None where it is not one."""
    writes, node = {}, stack.inputs[0] if stack.inputs else None
    chain = []
    while node is not None and node.type == "TensorListSetItem":
        index = _const_int(node.inputs[1])
        if index is None or index in writes or len(ctx.find_output_consumers(node.output[0])) != 1:
            return None
        writes[index] = node.input[2]
        chain.append(node)
        node = node.inputs[0]
    if node is None or node.type != "TensorListReserve" or not writes:
        return None
    size = _const_int(node.inputs[1]) if len(node.inputs) > 1 else None
    if size != len(writes) or sorted(writes) != list(range(size)) or \
            len(ctx.find_output_consumers(node.output[0])) != 1:
        return None
    return [writes[i] for i in range(size)], chain + [node]


def register() -> None:
    """Puts bridge's TensorListStack in place of tf2onnx's (kept in REPLACED)."""
    import tf2onnx.onnx_opset  # noqa: F401  tf2onnx's own handlers, registered on import: before ours replace them
    from tf2onnx import utils
    from tf2onnx.graph_builder import GraphBuilder
    from tf2onnx.handler import tf_op

    for domain, versions in tf_op.get_opsets().items():
        for version, handlers in enumerate(versions):
            for name in HANDLES_TENSOR_LIST:
                if name in handlers and (domain, version, name) not in REPLACED:
                    REPLACED[(domain, version, name)] = handlers[name]
    originals = dict(REPLACED)

    def stack(ctx, node, **kwargs):
        found = straight_line_items(ctx, node)
        if found is None:
            own = next((v for (d, ver, n), v in sorted(originals.items(), key=lambda kv: -kv[0][1])
                        if n == node.type and ver <= ctx.opset), None)  # the highest opset up to the graph's
            if own is None:
                raise ValueError(f"TensorListStack {node.name!r}: not a straight-line list, and tf2onnx has no "
                                 f"handler of its own at opset {ctx.opset}")
            return own[0](ctx, node, **kwargs)
        items, gone = found
        builder = GraphBuilder(ctx)
        rows = [builder.make_unsqueeze({"data": item, "axes": [0]}, name=utils.make_name(f"{node.name}/item{i}"))
                for i, item in enumerate(items)]
        dtype, shape = ctx.get_dtype(node.output[0]), ctx.get_shape(node.output[0])
        out = node.output[0]
        ctx.remove_node(node.name)
        for n in gone:
            ctx.remove_node(n.name)
        ctx.make_node("Concat", rows, attr={"axis": 0}, outputs=[out], name=node.name, shapes=[shape],
                      dtypes=[dtype])

    for (domain, version, name), (_, kw) in REPLACED.items():
        tf_op.get_opsets()[domain][version][name] = (stack, kw)
