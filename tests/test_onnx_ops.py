"""Each com.bridge op as a one-op ONNX model, checked by onnx and run on every
ONNX road against the numpy float64 reference: onnxruntime with the native
kernels, onnxruntime with the function inlined (no library), onnx's
ReferenceEvaluator with the reference OpRun and with the function, and the
inlined (lowered) model; at function opsets 13, 17 and 18, float32 and float16."""
from __future__ import annotations

import numpy as np
import onnx
import onnx.inliner
import onnxruntime as ort
import pytest
from onnx.reference import ReferenceEvaluator

from bridge import onnx_plugins
from bridge import ops as specs
from bridge.onnx_plugins.one_op import one_op_model

from conftest import assert_close

OPSETS = (13, 17, 18)


def _conv(rng, x, k, cout, *, strides=(1, 1), padding="SAME", dilations=(1, 1), explicit=()):
    """Inputs and ONNX attributes; pads resolved from TF padding by the spec, as the exporter does."""
    n, h, w, cin = x
    spec = specs.get("YoloConvBnLeaky")
    shapes = [x, (k[0], k[1], cin, cout)] + [(cout,)] * 5
    attrs = spec.to_onnx_attrs(shapes, strides=(1, *strides, 1), padding=padding, explicit_paddings=explicit,
                               dilations=(1, *dilations, 1), epsilon=1e-3, alpha=0.2)
    arrays = [rng.standard_normal(x), rng.standard_normal(shapes[1]) / np.sqrt(k[0] * k[1] * max(cin, 1))]
    arrays += [rng.standard_normal(cout) * 0.3 for _ in range(4)] + [rng.uniform(0.5, 2.0, cout)]
    return arrays, attrs


def _decode(rng, shape, anchors, classes, stride, scale=1.0):
    return [rng.standard_normal(shape)], dict(anchors=anchors, num_classes=classes, stride=stride,
                                                  scale_x_y=scale)


def _cases():
    rng = np.random.default_rng(7)
    ln = lambda shape, eps=1e-6: ([rng.standard_normal(shape) * 3 + 1, rng.standard_normal(shape[-1:]),
                                   rng.standard_normal(shape[-1:])], dict(epsilon=eps))
    yield "FusedLayerNorm", "3x5x7", *ln((3, 5, 7))
    yield "FusedLayerNorm", "rank1", *ln((33,), 1e-3)
    yield "FusedLayerNorm", "H=1", *ln((4, 1))
    yield "FusedLayerNorm", "2x3x1x70", *ln((2, 3, 1, 70))
    yield "FusedLayerNorm", "empty-batch", *ln((0, 6))
    yield "YoloConvBnLeaky", "SAME-s2-asym", *_conv(rng, (1, 8, 8, 3), (3, 3), 5, strides=(2, 2))
    yield "YoloConvBnLeaky", "s2-odd-VALID", *_conv(rng, (2, 7, 9, 2), (3, 3), 4, strides=(2, 2), padding="VALID")
    yield "YoloConvBnLeaky", "dilation2", *_conv(rng, (1, 9, 10, 4), (3, 3), 6, dilations=(2, 2))
    yield "YoloConvBnLeaky", "1x1-cout33", *_conv(rng, (2, 5, 3, 8), (1, 1), 33)
    yield "YoloConvBnLeaky", "K>256-explicit", *_conv(rng, (1, 6, 5, 40), (3, 3), 40, padding="EXPLICIT",
                                                    explicit=(0, 0, 2, 0, 1, 3, 0, 0))
    yield "YoloConvBnLeaky", "all-1", *_conv(rng, (1, 1, 1, 1), (1, 1), 1)
    yield "YoloConvBnLeaky", "empty-batch", *_conv(rng, (0, 5, 5, 3), (3, 3), 4)
    yield "YoloDecode", "2x3x4-A2C3", *_decode(rng, (2, 3, 4, 16), [10.0, 13.0, 16.0, 30.0], 3, 8, 1.1)
    yield "YoloDecode", "1x1x1-A1C1", *_decode(rng, (1, 1, 1, 6), [5.0, 7.0], 1, 1)
    yield "YoloDecode", "13x13x255", *_decode(rng, (1, 13, 13, 255), [116.0, 90.0, 156.0, 198.0, 373.0, 326.0],
                                            80, 32, 1.05)
    yield "YoloDecode", "empty-batch", *_decode(rng, (0, 2, 3, 21), [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 2, 16)


CASES = list(_cases())


def _check_outputs(op, got, inputs, attrs, dtype, what):
    ref = specs.get(op).reference_onnx(*inputs, **attrs)
    ref = ref if isinstance(ref, tuple) else (ref,)
    assert len(got) == len(ref), what
    for g, r in zip(got, ref):
        assert g.dtype == np.dtype(dtype), f"{what}: dtype {g.dtype}"
        assert_close(op, g, r, dtype, what=what)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("opset", OPSETS)
@pytest.mark.parametrize("op,label,arrays,attrs", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_every_road_matches_the_reference(op, label, arrays, attrs, opset, dtype):
    spec = specs.get(op)
    inputs = [a.astype(dtype) for a in arrays]
    assert all(np.count_nonzero(a) == a.size for a in inputs), "inputs must be non-zero"
    model = one_op_model(op, inputs, attrs, opset=opset, dynamic=(0,))
    onnx.checker.check_model(model, full_check=True)
    onnx.shape_inference.infer_shapes(model, strict_mode=True)
    feeds = {i.name: a for i, a in zip(spec.inputs, inputs)}
    check = lambda got, road: _check_outputs(op, got, inputs, attrs, dtype, f"{label} opset {opset} {road}")

    check(onnx_plugins.session(model, kernels="none", threads=1).run(None, feeds), "ort-function")
    before = onnx_plugins.kernel_calls(op)
    check(onnx_plugins.session(model, kernels=[op], threads=2).run(None, feeds), "ort-native")
    assert onnx_plugins.kernel_calls(op) == before + 1, "the native kernel did not run"
    check(ReferenceEvaluator(model, new_ops=onnx_plugins.reference_ops()).run(None, feeds), "reference-op")
    # onnx's ReferenceEvaluator cannot run LeakyRelu with an attribute taken from
    # the calling node (OpRunUnaryNum.run has no linked_attributes): run that
    # function after onnx's own inliner has written the attributes in.
    fmodel = onnx.inliner.inline_local_functions(model) if op == "YoloConvBnLeaky" else model
    check(ReferenceEvaluator(fmodel).run(None, feeds), "reference-function")

    lowered = onnx_plugins.inline_custom_ops(model)
    assert not any(n.domain == spec.domain for n in lowered.graph.node)
    assert not lowered.functions and all(o.domain != spec.domain for o in lowered.opset_import)
    onnx.checker.check_model(lowered, full_check=True)
    sess = ort.InferenceSession(lowered.SerializeToString(), providers=["CPUExecutionProvider"])
    check(sess.run(None, feeds), "lowered")


@pytest.mark.parametrize("opset", [11, 12])
@pytest.mark.parametrize("op", ["FusedLayerNorm", "YoloConvBnLeaky", "YoloDecode"])
def test_lowered_models_reach_down_to_opset_11(op, opset):
    """What older Ascend toolchains read: the inlined body at opset 11/12."""
    label, arrays, attrs = next((c[1], c[2], c[3]) for c in CASES if c[0] == op)
    inputs = [a.astype("float32") for a in arrays]
    model = one_op_model(op, inputs, attrs, opset=opset, with_functions=False)
    lowered = onnx_plugins.inline_custom_ops(model)
    onnx.checker.check_model(lowered, full_check=True)
    assert max(o.version for o in lowered.opset_import if o.domain == "") == opset
    feeds = {i.name: a for i, a in zip(specs.get(op).inputs, inputs)}
    sess = ort.InferenceSession(lowered.SerializeToString(), providers=["CPUExecutionProvider"])
    _check_outputs(op, sess.run(None, feeds), inputs, attrs, "float32", f"{label} lowered opset {opset}")


def test_function_bodies_cover_opsets_13_to_18():
    for spec in specs.all_specs():
        for opset in range(onnx_plugins.MIN_FUNCTION_OPSET, onnx_plugins.MAX_OPSET + 1):
            f = onnx_plugins.function_proto(spec, opset, dtype=spec.dtypes[0])
            assert (f.domain, f.name) == (spec.domain, spec.name)
            assert list(f.input) == [i.name for i in spec.inputs]
            assert list(f.output) == [o.name for o in spec.outputs]
            assert {o.domain: o.version for o in f.opset_import} == {"": opset}
    fln = onnx_plugins.function_proto("FusedLayerNorm", 17)
    assert [n.op_type for n in fln.node] == ["LayerNormalization"]
    low = [n.op_type for n in onnx_plugins.function_proto("FusedLayerNorm", 16).node if n.op_type != "Constant"]
    assert "Pow" in low and "LayerNormalization" not in low and low.count("ReduceMean") == 2
    with pytest.raises(ValueError, match="FusedLayerNorm: .*typed: pass dtype"):
        onnx_plugins.function_proto("FusedLayerNorm", 14)
    with pytest.raises(ValueError, match="YoloDecode: a function body needs opset 13..18, got 12"):
        onnx_plugins.function_proto("YoloDecode", 12, dtype="float32")


def test_one_function_serves_nodes_with_different_attributes(rng):
    """Attributes come from the calling node (ref_attr_name), not baked into the function."""
    from onnx import helper
    spec = specs.get("YoloConvBnLeaky")
    a1, attrs1 = _conv(rng, (1, 6, 6, 3), (3, 3), 3, strides=(2, 2))
    _, attrs2 = _conv(rng, (1, 3, 3, 3), (3, 3), 3, dilations=(1, 1))
    attrs2 = dict(attrs2, alpha=0.01)
    params = [a.astype(np.float32) for a in a1[1:]]
    names = [i.name for i in spec.inputs[1:]]
    inits = [onnx.numpy_helper.from_array(p, n) for p, n in zip(params, names)]
    n1 = helper.make_node(spec.name, ["x", *names], ["h"], domain=spec.domain, **attrs1)
    n2 = helper.make_node(spec.name, ["h", *names], ["y"], domain=spec.domain, **attrs2)
    g = helper.make_graph([n1, n2], "two", [helper.make_tensor_value_info("x", 1, [1, 6, 6, 3])],
                          [helper.make_tensor_value_info("y", 1, None)], initializer=inits)
    model = onnx_plugins.add_functions(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    assert len(model.functions) == 1
    x = a1[0].astype(np.float32)
    h = spec.reference_onnx(x, *params, **attrs1)
    ref = spec.reference_onnx(h, *params, **attrs2)
    for kernels in ("none", "all"):
        got = onnx_plugins.session(model, kernels=kernels).run(None, {"x": x})[0]
        assert_close(spec.name, got, ref, "float32", what=f"kernels={kernels}")


def test_typed_functions_below_opset_15_reject_mixed_dtypes():
    from onnx import helper
    x32, x16 = helper.make_tensor_value_info("a", 1, [2, 4]), helper.make_tensor_value_info("b", 10, [2, 4])
    nodes = [helper.make_node("FusedLayerNorm", ["a", "g", "g"], ["y"], domain="com.bridge"),
             helper.make_node("FusedLayerNorm", ["b", "h", "h"], ["z"], domain="com.bridge")]
    inits = [onnx.numpy_helper.from_array(np.ones(4, np.float32), "g"),
             onnx.numpy_helper.from_array(np.ones(4, np.float16), "h")]
    g = helper.make_graph(nodes, "g", [x32, x16], [helper.make_tensor_value_info("y", 1, None)], initializer=inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(ValueError, match="FusedLayerNorm: nodes of several element types.*opset >= 15"):
        onnx_plugins.add_functions(model)
    onnx_plugins.add_functions(model, opset=15)  # CastLike: one generic body


def test_session_kernels_argument():
    assert onnx_plugins.native_ops("all") == [s.name for s in specs.all_specs()]
    assert onnx_plugins.native_ops("none") == []
    roads = dict(onnx_plugins.FASTEST)
    if not onnx_plugins.library_has_onednn():
        roads.update(onnx_plugins.FASTEST_WITHOUT_ONEDNN)
    assert set(onnx_plugins.native_ops("fastest")) == {op for op, road in roads.items() if road == "native"}
    assert set(onnx_plugins.FASTEST) == set(specs.SPECS)
    assert set(onnx_plugins.FASTEST_WITHOUT_ONEDNN) <= set(specs.SPECS)
    assert onnx_plugins.native_ops(["yolo_decode"]) == ["YoloDecode"]
    with pytest.raises(ValueError, match="kernels: unknown op 'Nope'"):
        onnx_plugins.native_ops(["Nope"])


def _ort_optimized(model, tmp_path, name, level=ort.GraphOptimizationLevel.ORT_ENABLE_BASIC):
    """onnxruntime's graph after its optimizations up to `level` (basic: constant
    folding; extended: fusions such as LayerNormFusion)."""
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    so.optimized_model_filepath = str(tmp_path / f"{name}.onnx")
    ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return onnx.load(so.optimized_model_filepath)


@pytest.mark.parametrize("opset", [16, 18])
def test_lowered_constant_parts_fold_in_onnxruntime(opset, tmp_path):
    """A lowered body casts its constants to the known T: a CastLike on the graph
    input left the BatchNorm fold (Sqrt, Div, filter * s, HWIO -> OIHW) and the
    layer norm's Pow exponent non-constant to onnxruntime, so YOLOv3 refolded its
    weights on every run (4x slower) and the layer norm was not fused."""
    rng = np.random.default_rng(3)
    arrays, attrs = _conv(rng, (1, 6, 5, 3), (3, 3), 4)
    conv = one_op_model("YoloConvBnLeaky", [a.astype("float32") for a in arrays], attrs, opset=opset,
                        constants=[i.name for i in specs.get("YoloConvBnLeaky").inputs[1:]])
    lowered = onnx_plugins.inline_custom_ops(conv)
    assert "CastLike" not in {n.op_type for n in lowered.graph.node}
    ops = [n.op_type for n in _ort_optimized(lowered, tmp_path, "conv").graph.node]
    assert not {"Sqrt", "Div", "Mul"} & set(ops), ops   # the fold ran once, at load
    assert ops.count("Transpose") == 2, ops              # NHWC <-> NCHW around the Conv only
    feeds = {"x": arrays[0].astype("float32")}
    sess = ort.InferenceSession(lowered.SerializeToString(), providers=["CPUExecutionProvider"])
    _check_outputs("YoloConvBnLeaky", sess.run(None, feeds), [a.astype("float32") for a in arrays], attrs,
                   "float32", "lowered conv, constant parameters")

    ln_in = [rng.standard_normal((2, 3, 8)).astype("float32"), rng.standard_normal(8).astype("float32"),
             rng.standard_normal(8).astype("float32")]
    ln = onnx_plugins.inline_custom_ops(one_op_model("FusedLayerNorm", ln_in, {"epsilon": 1e-5}, opset=opset,
                                                     constants=("gamma", "beta")))
    ops = [n.op_type for n in _ort_optimized(ln, tmp_path, "ln", ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED)
           .graph.node]
    assert ops == ["LayerNormalization"], ops


@pytest.mark.parametrize("onednn", [True, False])
def test_fastest_conv_road_depends_on_onednn(monkeypatch, onednn):
    """The native convolution wins only on oneDNN; there, session() turns
    onnxruntime's thread spinning off unless the caller set it."""
    monkeypatch.setattr(onnx_plugins, "library_has_onednn", lambda path=None: onednn)
    assert ("YoloConvBnLeaky" in onnx_plugins.native_ops("fastest")) == onednn
    rng = np.random.default_rng(5)
    arrays, attrs = _conv(rng, (1, 5, 5, 3), (3, 3), 4)
    model = one_op_model("YoloConvBnLeaky", [a.astype("float32") for a in arrays], attrs, opset=17)
    key = onnx_plugins.SPINNING_KEY

    def spinning(sess):
        try:
            return sess.get_session_options().get_session_config_entry(key)
        except RuntimeError:
            return None
    assert spinning(onnx_plugins.session(model, kernels=["YoloConvBnLeaky"])) == ("0" if onednn else None)
    assert spinning(onnx_plugins.session(model, kernels=["YoloDecode"])) is None
    so = ort.SessionOptions()
    so.add_session_config_entry(key, "1")
    assert spinning(onnx_plugins.session(model, kernels=["YoloConvBnLeaky"], options=so)) == "1"
