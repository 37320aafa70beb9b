"""The float64 twin of a TensorFlow graph (a SavedModel's frozen signature or a
frozen GraphDef): every float32 tensor, constant and attribute widened to
float64, so a deep graph is judged against float64 as a Keras model is
(bridge.parity.truth), not against a float32 bound its depth outgrows.

FusedBatchNorm in inference mode has no float64 kernel in TensorFlow; it is
written as its arithmetic, (x - mean) * rsqrt(var + epsilon) * scale + offset,
over the last axis (NHWC). The rewrite is trusted only after the same rewrite
kept at float32 gives the graph's own answer (`checked_twin`): a rewrite that
computed something else would make every runtime look wrong, or right.
An op with no float64 kernel, or a BatchNorm this cannot rewrite, is a
NoFloat64 with the op named."""
from __future__ import annotations

from typing import Dict, Mapping, Sequence

import numpy as np

from bridge.parity.float64 import NoFloat64, checked_outputs, no_verdict, wide

BATCH_NORMS = ("FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3")
AGREE = 1e-5   # the float32 rewrite against the graph itself (relative to max(1, |y|))


def twin(graph_model, widen: bool = True):
    """`graph_model` (a bridge.converters.graph_model.GraphModel) with its
    BatchNorms written out and, when `widen`, every float32 widened to float64."""
    import tensorflow as tf
    from tensorflow.core.framework import graph_pb2, types_pb2

    gd = graph_pb2.GraphDef()
    gd.CopyFrom(graph_model.graph_def)
    gd = _batch_norms_written_out(gd)
    if widen:
        if gd.library.function:
            raise NoFloat64("the graph calls functions (not inlined): their float32 bodies cannot be widened here")
        for node in gd.node:
            for key, attr in node.attr.items():
                if attr.HasField("type") and attr.type == types_pb2.DT_FLOAT:
                    attr.type = types_pb2.DT_DOUBLE
                elif attr.HasField("list") and types_pb2.DT_FLOAT in attr.list.type:
                    kinds = [types_pb2.DT_DOUBLE if t == types_pb2.DT_FLOAT else t for t in attr.list.type]
                    del attr.list.type[:]
                    attr.list.type.extend(kinds)
                elif attr.HasField("tensor") and attr.tensor.dtype == types_pb2.DT_FLOAT:
                    value = tf.make_ndarray(attr.tensor).astype(np.float64)
                    attr.tensor.CopyFrom(tf.make_tensor_proto(value, dtype=tf.float64))
    inputs = [(t, n, s, "float64" if widen and d == "float32" else d) for t, n, s, d in graph_model.inputs]
    from bridge.converters.graph_model import GraphModel
    return GraphModel(gd, inputs, graph_model.outputs, f"{graph_model.name}_float64" if widen else graph_model.name)


def _batch_norms_written_out(gd):
    """Each inference-mode FusedBatchNorm as Sub/AddV2/Rsqrt/Mul/AddV2 nodes, the
    last one keeping the node's name (its consumers read `name:0`)."""
    import tensorflow as tf
    from tensorflow.core.framework import graph_pb2
    consumers_of_extra = {i.split("^")[-1].split(":")[0] for n in gd.node for i in n.input
                          if ":" in i and not i.endswith(":0")}
    new = graph_pb2.GraphDef()
    new.versions.CopyFrom(gd.versions)
    new.library.CopyFrom(gd.library)
    for node in gd.node:
        if node.op not in BATCH_NORMS:
            new.node.add().CopyFrom(node)
            continue
        where = f"{node.op} {node.name!r}"
        if node.attr["is_training"].b:
            raise NoFloat64(f"{where} is in training mode: it has no inference arithmetic to run in float64")
        layout = node.attr["data_format"].s.decode() if "data_format" in node.attr else "NHWC"
        if layout not in ("NHWC", "NDHWC"):
            raise NoFloat64(f"{where} normalises channels first ({layout}): no float64 twin is written for it")
        if node.name in consumers_of_extra:
            raise NoFloat64(f"{where}: a node reads its batch statistics (outputs 1-5)")
        x, scale, offset, mean, var = list(node.input[:5])
        controls = [i for i in node.input if i.startswith("^")]
        dtype = node.attr["T"].type
        eps = new.node.add(name=f"{node.name}/f64_epsilon", op="Const")
        eps.attr["dtype"].type = dtype
        eps.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(node.attr["epsilon"].f, tf.as_dtype(dtype)))

        def emit(op, name, *ins):
            n = new.node.add(op=op, name=name, input=list(ins))
            n.attr["T"].type = dtype
            return name
        centred = emit("Sub", f"{node.name}/f64_centred", x, mean)
        inv = emit("Rsqrt", f"{node.name}/f64_rsqrt", emit("AddV2", f"{node.name}/f64_var_eps", var, eps.name))
        scaled = emit("Mul", f"{node.name}/f64_scaled", centred, emit("Mul", f"{node.name}/f64_gain", inv, scale))
        emit("AddV2", node.name, scaled, offset, *controls)
    return new


def graph_of(model):
    """The frozen GraphModel of a SavedModel (loaded or a folder), or `model` if it is one."""
    from bridge.converters.graph_model import load
    return load(model)


def run(graph_model, arrays: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
    fn = graph_model.function()
    got = fn(*[arrays[name] for _, name, _, _ in graph_model.inputs])
    return {k: np.asarray(v) for k, v in got.items()}


def outputs(graph_model, output_names: Sequence[str], arrays: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """{output: float64 answer} of the graph on `arrays`, once its BatchNorms
    written out reproduce, at float32, the graph's own outputs; NoFloat64
    naming why otherwise. Not TF's own float32 run: its kernels round differently."""
    from bridge.parity import compare as cmp
    if any(n.op in BATCH_NORMS for n in graph_model.graph_def.node):
        # the rewrite against the same frozen graph run the same way (TF's own run rounds
        # differently: at YOLOv3's depth by more than AGREE)
        try:
            same = run(twin(graph_model, widen=False), arrays)
            own = run(graph_model, arrays)
        except NoFloat64:
            raise
        except Exception as e:  # noqa: BLE001 - the graph runs only as it was saved
            raise NoFloat64(f"the graph's float32 rewrite does not run: {no_verdict(e)}") from None
        for k in output_names:
            a, b = np.asarray(same.get(k)), np.asarray(own.get(k))
            if a.shape != b.shape or (a.dtype.kind == "f" and not cmp.compare(b, a, cmp.Tolerance(AGREE)).passed):
                raise NoFloat64(f"its BatchNorms written out do not compute what the graph does (output {k!r})")
    try:
        got = run(twin(graph_model), wide(arrays))
    except NoFloat64:
        raise
    except Exception as e:  # noqa: BLE001 - e.g. an op with no float64 kernel
        raise NoFloat64(f"the graph does not run in float64: {no_verdict(e)}") from None
    return checked_outputs(got, output_names)
