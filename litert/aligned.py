"""A .tflite whose constant buffers start on 64-byte boundaries.

LiteRT hands a custom op its inputs as tensor buffers, and refuses host memory
that is not 64-byte aligned ("Unaligned host memory pointer",
LITERT_HOST_MEMORY_BUFFER_ALIGNMENT); the TF converter aligns a flatbuffer's
constant data to 16 bytes only, so a custom op with a constant input (gamma,
a filter) fails to run. This rewrites the file with every buffer's bytes
stored after the flatbuffer at 64-byte aligned offsets (the schema's
Buffer.offset/size, which TFLite and LiteRT read like inline data); the graph
and the values are unchanged.
"""
from __future__ import annotations

import numpy as np

ALIGN = 64


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


MARK_KEY = "_bridge_node"


def mark_nodes(s, model, ops) -> int:
    """Gives every CUSTOM node of `ops` an identity its kernel can see in every
    callback: LiteRT passes a custom op's Init, GetOutputLayouts and Run one
    shared user_data, not the node (litert/native/common.h). Node k gets
    `_bridge_node: k` in its options and one more constant input of shape
    [k + 1]; the kernels read k from either and drop both. Returns the count."""
    from flatbuffers import flexbuffers
    codes = [c.customCode.decode() if c.customCode and c.builtinCode == s.BuiltinOperator.CUSTOM else None
             for c in model.operatorCodes or []]
    k = 0
    for sub in model.subgraphs or []:
        for node in sub.operators or []:
            if codes[node.opcodeIndex] not in ops:
                continue
            raw = bytes(np.asarray(node.customOptions if node.customOptions is not None else [], np.uint8))
            try:
                attrs = dict(flexbuffers.Loads(raw)) if raw else {}
            except Exception:  # not a FlexBuffer map: left as is, the kernel's Init says what is wrong
                continue
            attrs[MARK_KEY] = k
            node.customOptions = np.frombuffer(bytes(flexbuffers.Dumps(attrs)), np.uint8)
            b = s.BufferT()
            b.data = np.zeros((k + 1) * 4, np.uint8)
            model.buffers.append(b)
            tensor = s.TensorT()
            tensor.name, tensor.type, tensor.shape = f"{MARK_KEY}_{k}".encode(), 0, [k + 1]
            tensor.buffer = len(model.buffers) - 1
            sub.tensors.append(tensor)
            node.inputs = list(node.inputs) + [len(sub.tensors) - 1]
            k += 1
    return k


def align_buffers(data: bytes, mark: bool = True) -> bytes:
    """The re-laid file; mark: also mark_nodes() bridge's custom nodes."""
    import flatbuffers
    from bridge import ops as specs
    from bridge.tflite_inspect import schema
    s = schema()
    model = s.ModelT.InitFromPackedBuf(bytearray(data), 0)
    if mark:
        mark_nodes(s, model, {spec.name for spec in specs.all_specs()})
    payloads = []
    for b in model.buffers or []:
        raw = b.data
        if raw is not None and len(raw):
            payloads.append((b, np.asarray(raw, dtype=np.uint8).tobytes()))
            b.data = None
            b.offset, b.size = 2, 1  # non-zero placeholders (a zero field is not written), set below
        else:
            payloads.append((b, b""))

    def pack() -> bytes:
        builder = flatbuffers.Builder(1024)
        builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
        return bytes(builder.Output())

    head = pack()
    at = _align(len(head) + ALIGN)  # room: offsets never change the head's length (fixed-size fields)
    for b, raw in payloads:
        if raw:
            b.offset, b.size = at, len(raw)
            at = _align(at + len(raw))
    first = _align(len(head) + ALIGN)
    head = pack()
    if len(head) > first:  # the offsets' fields did not keep their size: never overwrite the graph
        raise ValueError(f"re-laying the buffers grew the flatbuffer ({len(head)} > {first} bytes)")
    out = bytearray(at)
    out[:len(head)] = head
    for b, raw in payloads:
        if raw:
            out[b.offset:b.offset + len(raw)] = raw
    return bytes(out)
