"""bridge parity judges every runtime against the model run in float64
(bridge.parity.truth): an element passes within max(the bound, 3x TF
float32's own error there). Numpy cases first (the float64 answer and TF
float32's rounding made here, independent of bridge), then the built-in
models with one bug planted in one runtime's model: that runtime FAILs, at
the planted layer, and the others PASS."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from bridge.parity import open_source, run_parity  # noqa: F401
from bridge.parity.compare import Tolerance, compare
from bridge.parity.truth import FACTOR, RULE, floor_of, judge

TOL = Tolerance(1e-4, 1e-4)


def _judge(got, tf, f64, tol=TOL):
    return judge(got, f64, tol, floor_of(compare(tf, f64, tol)))


def _case(rng, shape, kind):
    """(float64 answer, TF float32) where TF float32 is itself past the bound:
    rounding that grows with the value ("relative"), or one size of error on
    values of any size ("cancelling": what a sum of large terms of opposite
    signs leaves)."""
    f64 = rng.standard_normal(shape) * 20
    if kind == "relative":
        return f64, f64 * (1 + 3e-4 * rng.standard_normal(shape))
    return f64, f64 + 3e-3 * rng.standard_normal(shape)


SHAPES = [(1, 1000), (3, 7), (2, 5, 5, 4), (1,)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("kind", ["relative", "cancelling"])
def test_as_close_to_float64_as_tf_float32_passes(shape, kind, rng):
    f64, tf = _case(rng, shape, kind)
    assert not compare(tf, f64, TOL).passed or shape == (1,)   # TF float32 itself is past the bound of float64
    honest = 2 * f64 - tf                                       # as far from float64 as TF, on the other side
    c = _judge(honest, tf, f64)
    assert c.passed and c.status == "pass", c.note
    if c.past_bound:
        assert c.note.startswith(RULE)
    again = f64 + 0.9 * FACTOR * (tf - f64)                     # 0.9 x FACTOR x TF's own error, element by element
    assert _judge(again, tf, f64).passed


@pytest.mark.parametrize("shape", SHAPES[:3])
@pytest.mark.parametrize("kind", ["relative", "cancelling"])
@pytest.mark.parametrize("bug", ["1% scale", "1% on the largest element", "4x TF's error", "NaN", "Inf",
                                 "shape", "offset on every element"])
def test_planted_bugs_fail_against_float64(shape, kind, bug, rng):
    f64, tf = _case(rng, shape, kind)
    got = 2 * f64 - tf                                          # the honest runtime (passes, above) ...
    if bug == "1% scale":                                       # ... with a bug planted in it
        got = got * 1.01
    elif bug == "1% on the largest element":
        at = np.unravel_index(np.argmax(np.abs(f64)), f64.shape)
        got[at] *= 1.01
    elif bug == "4x TF's error":
        got = f64 + 4 * (f64 - tf)
    elif bug in ("NaN", "Inf"):
        got.flat[got.size // 2] = np.nan if bug == "NaN" else np.inf
    elif bug == "shape":
        got = got.reshape(-1)[:-1]
    else:  # within the widened bound on each element, but the same sign everywhere: not rounding
        floor = floor_of(compare(tf, f64, TOL))
        got = f64 + 0.9 * np.minimum(FACTOR * floor.worst, FACTOR * floor.worst_norm * np.maximum(1, np.abs(f64)))
    c = _judge(got, tf, f64)
    assert not c.passed and c.status == "FAIL", (bug, c.note)


def test_the_factor_is_what_the_rule_says(rng):
    f64, tf = _case(rng, (1, 1000), "relative")
    for k, expect in ((0.95 * FACTOR, True), (1.05 * FACTOR, False)):
        worst = np.argmax(np.abs(tf - f64) / np.maximum(1, np.abs(f64)))
        got = f64.copy()
        got.flat[worst] = f64.flat[worst] + k * (tf - f64).flat[worst]  # k x TF's worst, at its own element
        assert _judge(got, tf, f64).passed is expect, k


def test_where_tf_is_within_the_bound_the_bound_judges(rng):
    f64 = rng.uniform(0.1, 1.0, (4, 9))
    tf = f64 + 1e-7
    assert _judge(f64 - 0.9e-4, tf, f64).passed                  # within the bound, 900x TF's error: fine
    assert not _judge(f64 - 1.5e-4, tf, f64).passed              # past the bound, where TF float32 is not


def test_tf_not_finite_sets_no_floor(rng):
    f64, tf = _case(rng, (2, 6), "cancelling")
    tf[0, 0] = np.inf                                           # inf x TF's error would excuse anything
    c = _judge(2 * f64 - np.nan_to_num(tf, posinf=0.0), tf, f64)
    assert not c.passed and "judged by the bound alone" in c.note


def test_metrics_against_numpy(rng):
    """The msit / Polygraphy numbers, recomputed here."""
    ref = rng.standard_normal((3, 40, 5)) * 4
    got = ref + rng.standard_normal(ref.shape) * 1e-3
    got[0, 0, 0] = ref[0, 0, 0] + 0.5
    c = compare(got, ref, TOL)
    d = np.abs(got - ref)
    assert c.rmse == pytest.approx(np.sqrt(np.mean(d ** 2)))
    assert c.mean_rel_error == pytest.approx(np.mean(d / np.abs(ref)))
    assert c.rel_euclidean == pytest.approx(np.linalg.norm(got - ref) / np.linalg.norm(ref))
    assert (c.p50, c.p99, c.p999) == pytest.approx(tuple(np.quantile(d, [0.5, 0.99, 0.999])))
    assert c.cosine == pytest.approx(np.dot(got.ravel(), ref.ravel()) / np.linalg.norm(got) / np.linalg.norm(ref))
    bound = np.maximum(1e-4 * np.maximum(1, np.abs(ref)), 1e-4 * np.abs(ref))
    assert c.past_bound == c.failing == int(np.sum(d > bound)) and c.size == ref.size


def test_without_a_float64_run_the_judge_line_says_why(tmp_path):
    """An .onnx MODEL has no float64 twin: judged against onnx-reference, and the
    report says so (planted: a runtime 1% off still FAILs, with the same reason)."""
    from onnx import TensorProto, helper
    from bridge.parity.report import render_report
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])
    model = helper.make_model(helper.make_graph([helper.make_node("Exp", ["x"], ["y"])], "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "exp.onnx"
    onnx.save(model, path)
    feeds = {"x": np.linspace(-1, 1, 10, dtype=np.float32).reshape(2, 5)}
    np.savez(tmp_path / "board.npz", y=np.exp(feeds["x"].astype(np.float64)).astype(np.float32) * 1.01)
    report = run_parity(str(path), runtimes=["onnx-reference"], inputs=feeds,
                        load_outputs=[("board", str(tmp_path / "board.npz"))])
    assert "an .onnx MODEL has no float64 twin" in report.no_float64
    assert "judge: onnx-reference (no float64 run: an .onnx MODEL has no float64 twin" in render_report(report)
    board = _row(report, "board").outputs["y"]
    assert not board.passed and "no float64 verdict: an .onnx MODEL" in board.note, board.note


# -- the built-in models, one bug planted in one runtime's model ----------------------------
YOLO = {"input_size": 64}
BERT = {"layers": 2, "hidden": 32, "heads": 2, "intermediate": 64, "vocab_size": 100, "input_size": 16}


def _opened(model, config, seed=1):
    """A parity source ready to export outside a run (the run's input shapes set)."""
    from bridge.parity.inputs import shapes_of
    source = open_source(model, config=dict(config))
    source.input_shapes = shapes_of(source.sample_inputs(1, seed))
    return source


def _row(report, name):
    return next(r for r in report.runtimes if r.name == name)


def _assert_clean(row):
    assert row.status == "ok" and row.passed, (row.name, row.reason, {k: c.note for k, c in row.outputs.items()})
    if row.layers is not None:
        assert row.layers.failed == 0 and row.layers.compared > 0, (row.name, row.layers.first_fail)


def _attr(node, name):
    return next(a for a in node.attribute if a.name == name)


def test_yolov3_tiny_wrong_epsilon_in_one_fold_fails_ort_at_that_layer():
    """Planted: epsilon 1e-5 (the op's default) instead of the layer's 1e-3
    (Keras' BatchNormalization default) in one YoloConvBnLeaky (conv_6's block)
    of the com.bridge export, which ort runs; tf-fused and ge (their own
    conversion) keep the right one and pass."""
    source = _opened("yolov3-tiny", YOLO)
    try:
        bad = onnx.ModelProto()
        bad.CopyFrom(source.onnx_custom())
        target = [n for n in bad.graph.node if n.op_type == "YoloConvBnLeaky"][5]
        assert _attr(target, "epsilon").f == pytest.approx(1e-3)
        _attr(target, "epsilon").f = 1e-5
        source.put("onnx-custom", bad)
        report = run_parity(None, source=source, runtimes=["tf", "tf-fused", "ort", "ge"], per_layer=True, seed=1)
    finally:
        source.close()
    ort = _row(report, "ort")
    assert not ort.passed and any(c.status == "FAIL" for c in ort.outputs.values())
    first = ort.layers.first_fail
    assert first is not None and first.node == target.name, (first and first.node, target.name)
    assert first.name == "leaky_6" and first.covers == ["conv_6", "bn_6", "leaky_6"], (first.name, first.covers)
    for name in ("tf-fused", "ge"):
        _assert_clean(_row(report, name))
    assert not report.to_json()["ill_conditioned"]


@pytest.mark.slow  # ~45 s on 2 cores; the epsilon test above is the cheap proof
def test_yolov3_tiny_swapped_anchor_pair_fails_ge_at_the_decode():
    """Planted: the first two anchors of one YoloDecode swapped in the GE-bound
    export (ge, ge-builtin run it); ort's export keeps them and passes."""
    config = dict(YOLO, decode=True)
    source = _opened("yolov3-tiny", config)
    try:
        bad = onnx.ModelProto()
        bad.CopyFrom(source.onnx_ge())
        target = next(n for n in bad.graph.node if n.op_type == "YoloDecode")
        anchors = _attr(target, "anchors").floats
        anchors[0:4] = [anchors[2], anchors[3], anchors[0], anchors[1]]
        source.put("onnx-ge", bad)
        report = run_parity(None, source=source, runtimes=["tf", "ort", "ge"], per_layer=True, seed=1)
    finally:
        source.close()
    ge = _row(report, "ge")
    failed = [k for k, c in ge.outputs.items() if c.status == "FAIL"]
    assert failed and all("box" in k for k in failed), {k: c.status for k, c in ge.outputs.items()}
    _assert_clean(_row(report, "ort"))


@pytest.mark.slow  # ~45 s on 2 cores; the epsilon test above is the cheap proof
def test_bert_one_wrong_layernorm_gamma_fails_tf_fused_at_that_layer():
    """Planted: one element of one FusedLayerNorm's gamma off by 5% in the fused
    Keras model, which tf-fused runs; ort runs an export made from a clean copy
    of the model and passes."""
    clean = _opened("bert", BERT)
    source = _opened("bert", BERT)
    try:
        source.put("onnx-custom", clean.onnx_custom())
        fused, _ = source.fused_model()
        norms = [l for l in fused.layers if type(l).__name__ == "FusedLayerNormalization"]
        target = norms[1]
        weights = target.get_weights()
        weights[0] = weights[0].copy()
        weights[0][3] *= 1.05
        target.set_weights(weights)
        report = run_parity(None, source=source, runtimes=["tf", "tf-fused", "ort"], per_layer=True, seed=1)
    finally:
        source.close()
        clean.close()
    fused_row = _row(report, "tf-fused")
    assert not fused_row.passed
    first = fused_row.layers.first_fail
    assert first is not None and first.name in target.replaces, (first and first.name, target.replaces)
    _assert_clean(_row(report, "ort"))
