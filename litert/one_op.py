"""A .tflite of one CUSTOM node, made without TensorFlow: the self-test model
of each build and the hand-made files of the bad-attribute tests. Inputs not
given as constants become the signature's inputs (float32, the given shapes,
-1 for a dynamic dimension); `options` are the node's custom options, raw
bytes or a dict that is encoded as a FlexBuffer map."""
from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

FLOAT32 = 0  # TFLite TensorType


def flexbuffer(attrs: Mapping) -> bytes:
    from flatbuffers import flexbuffers
    return bytes(flexbuffers.Dumps(dict(attrs)))


def one_op_model(op: str, inputs: Sequence[Tuple[str, Union[Sequence[int], np.ndarray]]],
                 outputs: Sequence[str], options: Union[bytes, Mapping, None]) -> bytes:
    """inputs: (name, shape) for a runtime input or (name, array) for a constant."""
    import flatbuffers
    from bridge.tflite_inspect import schema
    s = schema()
    raw = options if isinstance(options, (bytes, bytearray)) else flexbuffer(options or {})
    buffers = [s.BufferT()]  # buffer 0: empty, by convention
    tensors: List = []
    sig_in, sig_out = [], []

    def tensor(name: str, shape, data: Optional[np.ndarray] = None) -> int:
        t = s.TensorT()
        t.name = name.encode()
        t.type = FLOAT32
        t.shape = [max(int(d), 1) if data is None else int(d) for d in shape]
        t.shapeSignature = [int(d) for d in shape]
        t.buffer = 0
        if data is not None:
            b = s.BufferT()
            b.data = np.ascontiguousarray(data, np.float32).view(np.uint8).reshape(-1)
            buffers.append(b)
            t.buffer = len(buffers) - 1
        tensors.append(t)
        return len(tensors) - 1

    node_in = []
    for name, value in inputs:
        if isinstance(value, np.ndarray):
            node_in.append(tensor(name, value.shape, value))
        else:
            node_in.append(tensor(name, value))
            sig_in.append((name, node_in[-1]))
    node_out = []
    for name in outputs:
        node_out.append(tensor(name, []))
        tensors[-1].shape, tensors[-1].shapeSignature = None, None  # set by the op's shape function
        sig_out.append((name, node_out[-1]))
    code = s.OperatorCodeT()
    code.builtinCode = code.deprecatedBuiltinCode = s.BuiltinOperator.CUSTOM
    code.customCode = op.encode()
    code.version = 1
    node = s.OperatorT()
    node.opcodeIndex = 0
    node.inputs, node.outputs = node_in, node_out
    node.customOptions = list(raw)
    node.customOptionsFormat = s.CustomOptionsFormat.FLEXBUFFERS
    sub = s.SubGraphT()
    sub.tensors, sub.operators = tensors, [node]
    sub.inputs, sub.outputs = [i for _, i in sig_in], node_out
    sub.name = b"main"

    def tmap(pairs):
        out = []
        for name, index in pairs:
            m = s.TensorMapT()
            m.name, m.tensorIndex = name.encode(), index
            out.append(m)
        return out

    sig = s.SignatureDefT()
    sig.signatureKey, sig.subgraphIndex = b"serving_default", 0
    sig.inputs, sig.outputs = tmap(sig_in), tmap(sig_out)
    model = s.ModelT()
    model.version, model.description = 3, b"bridge one-op model"
    model.operatorCodes, model.subgraphs, model.buffers, model.signatureDefs = [code], [sub], buffers, [sig]
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())
