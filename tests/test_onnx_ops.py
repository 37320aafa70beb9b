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

from conftest import onednn_has_f32_brgemm, assert_close

OPSETS = (13, 17, 18)


def _rows():
    """(op, example, opset, dtype) from each spec's case table; the large rows once
    (opset 17, float32)."""
    for spec in specs.all_specs():
        for e in spec.examples():
            for opset in OPSETS:
                for dtype in e.dtypes:
                    if not e.large or (opset == 17 and dtype == "float32"):
                        yield pytest.param(spec.name, e, opset, dtype, id=f"{spec.name}-{e.id}-opset{opset}-{dtype}")


def _example(op, id):
    return next(e for e in specs.get(op).examples() if e.id == id)


def _check_outputs(op, got, ref, dtype, what, scale=1.0):
    ref = ref if isinstance(ref, (tuple, list)) else (ref,)
    assert len(got) == len(ref), what
    for g, r in zip(got, ref):
        assert g.dtype == np.dtype(dtype), f"{what}: dtype {g.dtype}"
        assert_close(op, g, r, dtype, scale=scale, what=what)


@pytest.mark.parametrize("op,example,opset,dtype", list(_rows()))
def test_every_road_matches_the_reference(op, example, opset, dtype):
    """The node carries the table's ONNX attributes (pads written out by hand); the
    judge is the reference on the TF attributes, so a wrong SAME rule in the spec's
    mapping fails here too. The reference OpRun, itself the spec's reference, is
    judged by onnxruntime's run of the function body instead."""
    spec = specs.get(op)
    inputs = list(example.cast(dtype))
    assert all(np.count_nonzero(a) == a.size for a in inputs), "inputs must be non-zero"
    model = one_op_model(op, inputs, example.onnx_attrs, opset=opset, dynamic=(0,))
    onnx.checker.check_model(model, full_check=True)
    onnx.shape_inference.infer_shapes(model, strict_mode=True)
    feeds = {i.name: a for i, a in zip(spec.inputs, inputs)}
    ref = spec.reference(*inputs, **example.attrs)
    label = f"{example.id} opset {opset}"
    failures = []

    def check(road, got, judge=ref, scale=1.0):
        try:
            _check_outputs(op, got, judge, dtype, f"{label} {road}", scale)
        except AssertionError as e:
            failures.append(str(e).splitlines()[0])

    function_out = onnx_plugins.session(model, kernels="none", threads=1).run(None, feeds)
    check("ort-function", function_out)
    before = onnx_plugins.kernel_calls(op)
    check("ort-native", onnx_plugins.session(model, kernels=[op], threads=2).run(None, feeds))
    assert onnx_plugins.kernel_calls(op) == before + 1, "the native kernel did not run"
    if not example.large:  # onnx's evaluator runs Conv in Python loops
        # two roads' roundings: twice the tolerance
        check("reference-op vs ort-function",
              ReferenceEvaluator(model, new_ops=onnx_plugins.reference_ops()).run(None, feeds),
              judge=tuple(np.asarray(o, np.float64) for o in function_out), scale=2.0)
        # onnx's ReferenceEvaluator cannot run every op with an attribute taken from
        # the calling node (LeakyRelu: OpRunUnaryNum.run has no linked_attributes):
        # every op's function runs after onnx's own inliner has written them in.
        check("reference-function", ReferenceEvaluator(onnx.inliner.inline_local_functions(model)).run(None, feeds))

    lowered = onnx_plugins.inline_custom_ops(model)
    assert not any(n.domain == spec.domain for n in lowered.graph.node)
    assert not lowered.functions and all(o.domain != spec.domain for o in lowered.opset_import)
    onnx.checker.check_model(lowered, full_check=True)
    sess = ort.InferenceSession(lowered.SerializeToString(), providers=["CPUExecutionProvider"])
    check("lowered", sess.run(None, feeds))
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("opset", [11, 12])
@pytest.mark.parametrize("op", [s.name for s in specs.all_specs()])
def test_lowered_models_reach_down_to_opset_11(op, opset):
    """What older Ascend toolchains read: the inlined body at opset 11/12."""
    example = specs.get(op).examples()[0]
    inputs = list(example.cast("float32"))
    model = one_op_model(op, inputs, example.onnx_attrs, opset=opset, with_functions=False)
    lowered = onnx_plugins.inline_custom_ops(model)
    onnx.checker.check_model(lowered, full_check=True)
    assert max(o.version for o in lowered.opset_import if o.domain == "") == opset
    feeds = {i.name: a for i, a in zip(specs.get(op).inputs, inputs)}
    sess = ort.InferenceSession(lowered.SerializeToString(), providers=["CPUExecutionProvider"])
    _check_outputs(op, sess.run(None, feeds), specs.get(op).reference(*inputs, **example.attrs), "float32",
                   f"{example.id} lowered opset {opset}")


def test_function_bodies_cover_opsets_13_to_18():
    for spec in specs.all_specs():
        for opset in range(onnx_plugins.MIN_FUNCTION_OPSET, onnx_plugins.MAX_OPSET + 1):
            f = onnx_plugins.function_proto(spec, opset, dtype=spec.dtypes[0])
            assert (f.domain, f.name) == (spec.domain, spec.name)
            assert list(f.input) == [i.name for i in spec.inputs]
            assert list(f.output) == [o.name for o in spec.outputs]
            assert {o.domain: o.version for o in f.opset_import} == {"": opset}
    # float32, on the row shifted by its mean (the large-mean rows of the table need both)
    fln = [n.op_type for n in onnx_plugins.function_proto("FusedLayerNorm", 17).node]
    assert fln == ["Cast"] * 3 + ["ReduceMean", "Sub", "LayerNormalization", "CastLike"], fln
    typed = [n.op_type for n in onnx_plugins.function_proto("FusedLayerNorm", 17, dtype="float32").node]
    assert typed == ["ReduceMean", "Sub", "LayerNormalization"], typed
    low = [n.op_type for n in onnx_plugins.function_proto("FusedLayerNorm", 16).node if n.op_type != "Constant"]
    assert "Pow" in low and "LayerNormalization" not in low and low.count("ReduceMean") == 3
    with pytest.raises(ValueError, match="FusedLayerNorm: .*typed: pass dtype"):
        onnx_plugins.function_proto("FusedLayerNorm", 14)
    with pytest.raises(ValueError, match="YoloDecode: a function body needs opset 13..18, got 12"):
        onnx_plugins.function_proto("YoloDecode", 12, dtype="float32")


def test_one_function_serves_nodes_with_different_attributes(rng):
    """Attributes come from the calling node (ref_attr_name), not baked into the function."""
    from onnx import helper
    spec = specs.get("YoloConvBnLeaky")
    e1 = _example("YoloConvBnLeaky", "same-s2-mixed")  # Cin 4 -> Cout 3
    attrs1 = e1.onnx_attrs
    attrs2 = dict(_example("YoloConvBnLeaky", "same-s1").onnx_attrs, alpha=0.01)
    params = list(e1.cast(np.float32)[1:])
    params[0] = np.resize(params[0], (3, 3, 3, 3))  # 3 -> 3 channels, so the second node takes the first's output
    names = [i.name for i in spec.inputs[1:]]
    inits = [onnx.numpy_helper.from_array(p, n) for p, n in zip(params, names)]
    n1 = helper.make_node(spec.name, ["x", *names], ["h"], domain=spec.domain, **attrs1)
    n2 = helper.make_node(spec.name, ["h", *names], ["y"], domain=spec.domain, **attrs2)
    g = helper.make_graph([n1, n2], "two", [helper.make_tensor_value_info("x", 1, [2, 6, 7, 3])],
                          [helper.make_tensor_value_info("y", 1, None)], initializer=inits)
    model = onnx_plugins.add_functions(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    assert len(model.functions) == 1
    x = rng.standard_normal((2, 6, 7, 3)).astype(np.float32)
    tf_attrs = [e1.attrs, _example("YoloConvBnLeaky", "same-s1").attrs]
    h = spec.reference(x, *params, **tf_attrs[0])
    ref = spec.reference(h, *params, **dict(tf_attrs[1], alpha=0.01))
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
    if not onednn_has_f32_brgemm():
        roads.update(onnx_plugins.FASTEST_WITHOUT_AVX512)
    assert set(onnx_plugins.native_ops("fastest")) == {op for op, road in roads.items() if road == "native"}
    assert set(onnx_plugins.FASTEST) == set(specs.SPECS)
    assert set(onnx_plugins.FASTEST_WITHOUT_ONEDNN) <= set(specs.SPECS)
    assert set(onnx_plugins.FASTEST_WITHOUT_AVX512) <= set(specs.SPECS)
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
    example = _example("YoloConvBnLeaky", "same-s1")
    arrays = example.cast("float32")
    conv = one_op_model("YoloConvBnLeaky", arrays, example.onnx_attrs, opset=opset,
                        constants=[i.name for i in specs.get("YoloConvBnLeaky").inputs[1:]])
    lowered = onnx_plugins.inline_custom_ops(conv)
    assert "CastLike" not in {n.op_type for n in lowered.graph.node}
    ops = [n.op_type for n in _ort_optimized(lowered, tmp_path, "conv").graph.node]
    assert not {"Sqrt", "Div", "Mul"} & set(ops), ops   # the fold ran once, at load
    assert ops.count("Transpose") == 2, ops              # NHWC <-> NCHW around the Conv only
    feeds = {"x": arrays[0]}
    sess = ort.InferenceSession(lowered.SerializeToString(), providers=["CPUExecutionProvider"])
    _check_outputs("YoloConvBnLeaky", sess.run(None, feeds), specs.get("YoloConvBnLeaky").reference(
        *arrays, **example.attrs), "float32", "lowered conv, constant parameters")

    ln_in = [rng.standard_normal((2, 3, 8)).astype("float32"), rng.standard_normal(8).astype("float32"),
             rng.standard_normal(8).astype("float32")]
    ln = onnx_plugins.inline_custom_ops(one_op_model("FusedLayerNorm", ln_in, {"epsilon": 1e-5}, opset=opset,
                                                     constants=("gamma", "beta")))
    ops = [n.op_type for n in _ort_optimized(ln, tmp_path, "ln", ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED)
           .graph.node]
    assert ops == ["ReduceMean", "Sub", "LayerNormalization"], ops  # the shift, then onnxruntime's fused kernel


@pytest.mark.parametrize("threads", ["host", "openmp"])
@pytest.mark.parametrize("onednn", [True, False])
@pytest.mark.parametrize("avx512", [True, False])
def test_fastest_conv_road_depends_on_onednn_and_avx512(monkeypatch, onednn, threads, avx512):
    """The native convolution wins only on oneDNN, on a CPU with AVX-512 (its
    Winograd road). It runs on the session's own threads; only with oneDNN on its
    own OpenMP team (BRIDGE_DNNL_THREADS=openmp) does session() turn
    onnxruntime's thread spinning off, unless the caller set it."""
    from bridge import cpu_flags
    monkeypatch.setattr(onnx_plugins, "library_has_onednn", lambda path=None: onednn)
    monkeypatch.setattr(cpu_flags, "cpu_features",
                        lambda: frozenset({"avx2", *cpu_flags.AVX512_CORE}) if avx512 else frozenset({"avx2"}))
    monkeypatch.setenv("BRIDGE_DNNL_THREADS", threads)
    team = onednn and threads == "openmp"
    assert ("YoloConvBnLeaky" in onnx_plugins.native_ops("fastest")) == (onednn and avx512)
    assert ("YoloDecode" in onnx_plugins.native_ops("fastest"))  # decided by neither
    example = _example("YoloConvBnLeaky", "same-s1")
    model = one_op_model("YoloConvBnLeaky", example.cast("float32"), example.onnx_attrs, opset=17)
    key = onnx_plugins.SPINNING_KEY

    def spinning(sess):
        try:
            return sess.get_session_options().get_session_config_entry(key)
        except RuntimeError:
            return None
    assert spinning(onnx_plugins.session(model, kernels=["YoloConvBnLeaky"])) == ("0" if team else None)
    assert spinning(onnx_plugins.session(model, kernels=["YoloDecode"])) is None
    so = ort.SessionOptions()
    so.add_session_config_entry(key, "1")
    assert spinning(onnx_plugins.session(model, kernels=["YoloConvBnLeaky"], options=so)) == "1"
