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


def align_buffers(data: bytes) -> bytes:
    import flatbuffers
    from bridge.tflite_inspect import schema
    s = schema()
    model = s.ModelT.InitFromPackedBuf(bytearray(data), 0)
    payloads = []
    for b in model.buffers or []:
        raw = b.data
        if raw is not None and len(raw):
            payloads.append((b, np.asarray(raw, dtype=np.uint8).tobytes()))
            b.data = None
            b.offset, b.size = 2, 0  # placeholders of the final encoded size, set below
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
    head = pack()
    out = bytearray(at)
    out[:len(head)] = head
    for b, raw in payloads:
        if raw:
            out[b.offset:b.offset + len(raw)] = raw
    return bytes(out)
