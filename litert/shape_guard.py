"""Which outputs of a .tflite LiteRT's CompiledModel cannot size before it runs.

The CompiledModel binds every output to a buffer allocated before the run, sized
from the layouts TFLite's Prepare left. An output downstream of a SHAPE op
(tf.shape feeding a reshape, fill, tile, ...) may only get its real shape while
the model runs: at other input shapes than the file's, Prepare leaves it at the
file's shape and the kernel (XNNPack's included) writes the real size into the
smaller buffer, an out-of-bounds write (a keras_hub BERT at length 32 came back
[1,1,16] and then `munmap_chunk(): invalid pointer`). bridge refuses those runs
(runtime.Model.run) instead."""
from __future__ import annotations

from typing import Dict, List

from bridge.tflite_inspect import schema


def _builtin(s, model, op) -> int:
    oc = model.OperatorCodes(op.OpcodeIndex())
    return max(oc.BuiltinCode(), oc.DeprecatedBuiltinCode())


def shape_computed_outputs(data: bytes) -> Dict[str, str]:
    """{signature output name: the SHAPE op's output tensor it depends on} for
    the first signature (subgraph 0 when the model has none)."""
    s = schema()
    model = s.Model.GetRootAs(data, 0)
    if model.SubgraphsLength() == 0:
        return {}
    g = 0
    outs: Dict[str, int] = {}
    if model.SignatureDefsLength():
        sd = model.SignatureDefs(0)
        g = sd.SubgraphIndex()
        for k in range(sd.OutputsLength()):
            outs[(sd.Outputs(k).Name() or b"").decode("utf-8", "replace")] = sd.Outputs(k).TensorIndex()
    sg = model.Subgraphs(g)
    if not outs:
        outs = {(sg.Tensors(t).Name() or b"").decode("utf-8", "replace"): t for t in sg.OutputsAsNumpy()}
    producer: Dict[int, object] = {}
    for i in range(sg.OperatorsLength()):
        op = sg.Operators(i)
        for t in op.OutputsAsNumpy() if op.OutputsLength() else []:
            producer[int(t)] = op
    found: Dict[str, str] = {}
    for name, t0 in outs.items():
        seen, todo = set(), [int(t0)]
        while todo:
            t = todo.pop()
            if t in seen or t not in producer:
                continue
            seen.add(t)
            op = producer[t]
            if _builtin(s, model, op) == s.BuiltinOperator.SHAPE:
                found[name] = (sg.Tensors(t).Name() or b"").decode("utf-8", "replace")
                break
            todo.extend(int(x) for x in (op.InputsAsNumpy() if op.InputsLength() else []) if x >= 0)
    return found


def file_input_shapes(data: bytes) -> Dict[str, List[int]]:
    """{signature input name: its shape as stored in the file} (the shapes Prepare sizes outputs for)."""
    s = schema()
    model = s.Model.GetRootAs(data, 0)
    if not model.SignatureDefsLength() or not model.SubgraphsLength():
        return {}
    sd = model.SignatureDefs(0)
    sg = model.Subgraphs(sd.SubgraphIndex())
    out = {}
    for k in range(sd.InputsLength()):
        t = sg.Tensors(sd.Inputs(k).TensorIndex())
        out[(sd.Inputs(k).Name() or b"").decode("utf-8", "replace")] = [int(d) for d in t.ShapeAsNumpy()] \
            if t.ShapeLength() else []
    return out
