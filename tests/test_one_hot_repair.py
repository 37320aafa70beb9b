"""converters/tf2onnx_repairs.scalar_one_hot_depth: tf2onnx writes OneHot with
a one-element 1-D depth, which onnx's reference evaluator cannot run under
numpy 2 (a mixture-of-experts router failed parity there). After the repair
every OneHot's depth is a scalar, and the reference evaluator and onnxruntime
both agree with a numpy one-hot, for a constant depth and a computed one."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from bridge.converters.tf2onnx_repairs import scalar_one_hot_depth  # noqa: E402


def _model(depth_dims):
    """Two OneHots on int64 indices: one with a constant depth of shape `depth_dims`
    (shared by both), one whose depth is computed (Shape of an input -> Gather)."""
    depth = numpy_helper.from_array(np.full(depth_dims, 5, np.int64), "depth")
    values = numpy_helper.from_array(np.array([-1.0, 2.0], np.float32), "values")
    axis0 = numpy_helper.from_array(np.array([1], np.int64), "gather_index")
    nodes = [helper.make_node("OneHot", ["idx", "depth", "values"], ["a"], axis=-1),
             helper.make_node("OneHot", ["idx", "depth", "values"], ["b"], axis=0),
             helper.make_node("Shape", ["width"], ["width_shape"]),
             helper.make_node("Gather", ["width_shape", "gather_index"], ["computed"], axis=0),
             helper.make_node("OneHot", ["idx", "computed", "values"], ["c"], axis=1)]
    graph = helper.make_graph(
        nodes, "one_hot", [helper.make_tensor_value_info("idx", TensorProto.INT64, [None, None]),
                           helper.make_tensor_value_info("width", TensorProto.FLOAT, [1, None])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [None] * 3) for n in "abc"],
        initializer=[depth, values, axis0])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _one_hot(idx, depth, axis):
    idx = np.where(idx < 0, idx + depth, idx)
    hot = np.arange(depth) == idx[..., None]   # out-of-range indices: all off
    return np.moveaxis(np.where(hot, 2.0, -1.0), -1, axis)


@pytest.mark.parametrize("shape,width", [((3, 4), 6), ((1, 1), 1), ((2, 0), 3)])
def test_one_hot_depth_becomes_a_scalar_and_runs_everywhere(shape, width, rng):
    import onnxruntime as ort
    model = _model([1])
    idx = rng.integers(-5, 7, size=shape).astype(np.int64)   # negative and out of range too
    feeds = {"idx": idx, "width": np.zeros((1, width), np.float32)}
    with pytest.raises(TypeError, match="OneHot"):
        ReferenceEvaluator(model).run(None, feeds)  # what the repair is for
    assert scalar_one_hot_depth(model) == 3
    onnx.checker.check_model(model, full_check=True)
    inits = {i.name: i for i in model.graph.initializer}
    hots = [n for n in model.graph.node if n.op_type == "OneHot"]
    assert hots[0].input[1] == hots[1].input[1] and list(inits[hots[0].input[1]].dims) == []  # one scalar, shared
    want = [_one_hot(idx, 5, -1), _one_hot(idx, 5, 0), _one_hot(idx, width, 1)]
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for runtime, got in (("reference", ReferenceEvaluator(model).run(None, feeds)), ("onnxruntime", sess.run(None, feeds))):
        for g, w, name in zip(got, want, "abc"):
            assert g.shape == w.shape and np.array_equal(g, w), (runtime, name)
    assert scalar_one_hot_depth(model) == 0  # nothing left to repair


def test_a_depth_of_several_values_is_left_for_the_checker():
    model = _model([2])
    assert scalar_one_hot_depth(model) == 1  # the computed one only
    assert [n.input[1] for n in model.graph.node if n.op_type == "OneHot"][:2] == ["depth", "depth"]
