"""onnxruntime's transformer ops in the ONNX export (converters/ort_transformer.py,
`bridge export --to onnx --ort-contrib/--no-ort-contrib`): each rewrite matches
its pattern, the rewritten graph agrees on onnxruntime with a float64 numpy
reference (SkipLayerNormalization, BiasGelu/Gelu; odd sizes, batch 1; rows with
a large mean show why SkipLayerNormalization is opt-in) or with the unrewritten model (Attention, on tf2onnx's export of
Keras MultiHeadAttention in bridge's BERT), the off switch leaves the graph as
it was, and planted bugs (a wrong epsilon, a dropped bias, a wrong attention
scale) fail."""
from __future__ import annotations

import math

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from bridge.converters import ort_transformer as ot
from bridge.exporting import OptionError

ATOL = 1e-5   # docs/ops.md's float32 bound for FusedLayerNorm, per element times max(1, |ref|)


def _run(model, feeds):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)


def _err(got, ref) -> float:
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    assert got.shape == ref.shape
    d = np.abs(got - ref) / np.maximum(1.0, np.abs(ref))
    return float(d.max()) if np.all(np.isfinite(d)) else math.inf   # NaN never passes


def _ops(model):
    return sorted(f"{n.domain}:{n.op_type}" if n.domain else n.op_type for n in model.graph.node)


def _model(nodes, inputs, outputs, inits, opsets=(("", 18),)):
    return helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, inits),
                             opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])


def _f(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


# -- SkipLayerNormalization ------------------------------------------------------------
def _ln64(s, gamma, beta, eps):
    s = np.asarray(s, np.float64)
    mean = s.mean(-1, keepdims=True)
    var = ((s - mean) ** 2).mean(-1, keepdims=True)
    return gamma * (s - mean) / np.sqrt(var + eps) + beta


def _residual_ln(h, form, eps, sum_out=False):
    """r + (t @ W + b) -> layer norm, with the norm as `form` writes it."""
    rng = np.random.default_rng(h)
    w = rng.standard_normal((h, h)).astype(np.float32) / math.sqrt(h)
    b, gamma, beta = (rng.standard_normal(h).astype(np.float32) for _ in range(3))
    inits = [numpy_helper.from_array(a, n) for a, n in ((w, "W"), (b, "b"), (gamma, "gamma"), (beta, "beta"))]
    nodes = [helper.make_node("MatMul", ["t", "W"], ["tw"]), helper.make_node("Add", ["tw", "b"], ["u"]),
             helper.make_node("Add", ["r", "u"], ["s"])]
    opsets = [("", 18)]
    if form == "onnx":
        nodes.append(helper.make_node("LayerNormalization", ["s", "gamma", "beta"], ["y"], axis=-1, epsilon=eps))
    elif form == "centred":   # bridge's lowered FusedLayerNorm
        inits.append(numpy_helper.from_array(np.array([-1], np.int64), "axes"))
        nodes += [helper.make_node("ReduceMean", ["s", "axes"], ["m"], keepdims=1),
                  helper.make_node("Sub", ["s", "m"], ["c"]),
                  helper.make_node("LayerNormalization", ["c", "gamma", "beta"], ["y"], axis=-1, epsilon=eps)]
    else:
        nodes.append(helper.make_node("FusedLayerNorm", ["s", "gamma", "beta"], ["y"], domain="com.bridge",
                                      epsilon=eps))
        opsets.append(("com.bridge", 1))
    outputs = [_f("y", ["N", "L", h])] + ([_f("s", ["N", "L", h])] if sum_out else [])
    model = _model(nodes, [_f("r", ["N", "L", h]), _f("t", ["N", "L", h])], outputs, inits, opsets)

    def reference(r, t):
        if not np.any(t):   # r + b rounds to float32 in every road: normalise that sum
            s = np.asarray(r + b, np.float64)
        else:
            s = np.asarray(r, np.float64) + (np.asarray(t, np.float64) @ w + b)
        return _ln64(s, gamma, beta, eps), s
    return model, reference


def _residual_feeds(h, batch, length, mean=0.0, seed=0):
    """With a `mean`, rows of mean + N(0, 1) (docs/ops.md: a float32 sum of squares loses
    their variance) and t = 0, so that the float32 sum r + b is the same in every road."""
    rng = np.random.default_rng(seed)
    t = rng.standard_normal((batch, length, h)).astype(np.float32)
    return {"r": (mean + rng.standard_normal((batch, length, h))).astype(np.float32),
            "t": np.zeros_like(t) if mean else t}


@pytest.mark.parametrize("form", ["onnx", "centred"])
@pytest.mark.parametrize("h,batch,length", [(37, 1, 5), (64, 3, 1), (768, 2, 3)])
def test_skip_layer_norm_matches_and_agrees(form, h, batch, length):
    model, reference = _residual_ln(h, form, eps=1e-12)
    assert ot.rewrite(model)[1].total == 0      # opt-in: see the large-mean test below
    out, report = ot.rewrite(model, rewrites=ot.REWRITES)
    assert report.counts["skip_layer_norm"] == 1
    assert _ops(out) == ["MatMul", "com.microsoft:SkipLayerNormalization"]   # the bias Add folded in
    (skip,) = [n for n in out.graph.node if n.op_type == "SkipLayerNormalization"]
    assert len(skip.input) == 5 and skip.input[4] == "b"
    feeds = _residual_feeds(h, batch, length)
    (y,) = _run(out, feeds)
    assert _err(y, reference(feeds["r"], feeds["t"])[0]) <= ATOL


def test_skip_layer_norm_loses_large_mean_rows():
    """Why SkipLayerNormalization is not a default rewrite: on rows of 1e3 + N(0, 1)
    bridge's lowered FusedLayerNorm (centred first) holds its bound, onnxruntime's op does not."""
    model, reference = _residual_ln(768, "centred", eps=1e-12)
    out, _ = ot.rewrite(model, rewrites=["skip_layer_norm"])
    feeds = _residual_feeds(768, 2, 3, mean=1e3, seed=1)
    want = reference(feeds["r"], feeds["t"])[0]
    assert _err(_run(model, feeds)[0], want) <= ATOL
    assert _err(_run(out, feeds)[0], want) > ATOL


def test_skip_layer_norm_keeps_the_residual_sum_others_read():
    model, reference = _residual_ln(48, "onnx", eps=1e-6, sum_out=True)
    out, report = ot.rewrite(model, rewrites=ot.REWRITES)
    assert report.counts["skip_layer_norm"] == 1 and "Add" not in _ops(out)
    feeds = _residual_feeds(48, 2, 7)
    y, s = _run(out, feeds)
    want_y, want_s = reference(feeds["r"], feeds["t"])
    assert _err(y, want_y) <= ATOL and _err(s, want_s) <= ATOL


def test_fused_layer_norm_epsilon_carries_over():
    model, _ = _residual_ln(16, "bridge", eps=0.25)
    out, report = ot.rewrite(model, rewrites=ot.REWRITES)
    (skip,) = [n for n in out.graph.node if n.op_type == "SkipLayerNormalization"]
    assert report.counts["skip_layer_norm"] == 1
    assert math.isclose(helper.get_attribute_value(skip.attribute[0]), 0.25, rel_tol=1e-7)
    assert "com.bridge:FusedLayerNorm" not in _ops(out)


@pytest.mark.parametrize("bug", ["epsilon", "bias"])
def test_planted_layer_norm_bugs_fail(bug):
    model, reference = _residual_ln(37, "onnx", eps=1e-12)
    out, _ = ot.rewrite(model, rewrites=ot.REWRITES)
    (skip,) = [n for n in out.graph.node if n.op_type == "SkipLayerNormalization"]
    if bug == "epsilon":
        skip.attribute[0].f = 1e-1
    else:
        del skip.input[4]
    feeds = _residual_feeds(37, 1, 5)
    (y,) = _run(out, feeds)
    assert _err(y, reference(feeds["r"], feeds["t"])[0]) > ATOL


def test_broadcast_residual_is_left_alone():
    """r [1, L, H] + u [N, L, H]: the shapes are not one, so no SkipLayerNormalization."""
    model, _ = _residual_ln(16, "onnx", eps=1e-6)
    model.graph.input[0].type.tensor_type.shape.dim[0].ClearField("dim_param")
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 1
    out, report = ot.rewrite(model, rewrites=ot.REWRITES)
    assert report.counts["skip_layer_norm"] == 0 and report.skipped
    assert out.SerializeToString() == model.SerializeToString()


# -- GELU --------------------------------------------------------------------------------
def _gelu64(x):
    x = np.asarray(x, np.float64)
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def _gelu_model(order, bias):
    h = 13
    rng = np.random.default_rng(3)
    b = rng.standard_normal(h).astype(np.float32)
    c = {"k": np.float32(1 / math.sqrt(2)), "s2": np.float32(math.sqrt(2)), "half": np.float32(0.5),
         "one": np.float32(1.0)}
    inits = [numpy_helper.from_array(np.array(v), k) for k, v in c.items()] + [numpy_helper.from_array(b, "b")]
    nodes = [helper.make_node("Add", ["x0", "b"], ["x"])] if bias else [helper.make_node("Identity", ["x0"], ["x"])]
    first = (helper.make_node("Div", ["x", "s2"], ["p"]) if order == "div" else
             helper.make_node("Mul", ["x", "k"], ["p"]))
    nodes += [first, helper.make_node("Erf", ["p"], ["e"]), helper.make_node("Add", ["one", "e"], ["a"])]
    if order in ("half_x", "div"):        # (0.5 * x) * (1 + erf)
        nodes += [helper.make_node("Mul", ["half", "x"], ["hx"]), helper.make_node("Mul", ["hx", "a"], ["y"])]
    elif order == "half_a":                # x * ((1 + erf) * 0.5)
        nodes += [helper.make_node("Mul", ["a", "half"], ["ha"]), helper.make_node("Mul", ["x", "ha"], ["y"])]
    else:                                  # (x * (1 + erf)) * 0.5
        nodes += [helper.make_node("Mul", ["x", "a"], ["xa"]), helper.make_node("Mul", ["xa", "half"], ["y"])]
    model = _model(nodes, [_f("x0", ["N", h])], [_f("y", ["N", h])], inits)
    return model, (lambda x0: _gelu64(np.asarray(x0, np.float64) + (b if bias else 0.0)))


@pytest.mark.parametrize("order", ["half_x", "half_a", "x_a", "div"])
@pytest.mark.parametrize("bias", [True, False])
def test_gelu_matches_and_agrees(order, bias):
    model, reference = _gelu_model(order, bias)
    out, report = ot.rewrite(model)
    assert report.counts["bias_gelu"] == 1
    assert _ops(out) == (["com.microsoft:BiasGelu"] if bias else ["Identity", "com.microsoft:Gelu"])
    for batch in (1, 4):
        x0 = (3 * np.random.default_rng(batch).standard_normal((batch, 13))).astype(np.float32)
        (y,) = _run(out, {"x0": x0})
        assert _err(y, reference(x0)) <= ATOL


def test_planted_gelu_bias_bug_fails():
    model, reference = _gelu_model("half_x", True)
    out, _ = ot.rewrite(model)
    (node,) = out.graph.node
    b = next(t for t in out.graph.initializer if t.name == node.input[1])
    b.CopyFrom(numpy_helper.from_array(np.zeros(13, np.float32), b.name))   # the bias dropped
    x0 = np.random.default_rng(0).standard_normal((2, 13)).astype(np.float32)
    assert _err(_run(out, {"x0": x0})[0], reference(x0)) > ATOL


def test_not_gelu_is_left_alone():
    model, _ = _gelu_model("half_x", True)
    for t in model.graph.initializer:
        if t.name == "half":
            t.CopyFrom(numpy_helper.from_array(np.array(np.float32(0.4)), "half"))
    out, report = ot.rewrite(model)
    assert report.total == 0 and out.SerializeToString() == model.SerializeToString()


# -- Attention on bridge's BERT ---------------------------------------------------------------
BERT = dict(layers=1, hidden=48, heads=4, intermediate=96, vocab_size=97, max_position=32)
LENGTH = 11


@pytest.fixture(scope="module")
def bert_exports(tmp_path_factory):
    """bridge.export of a small BERT (one layer; Keras MultiHeadAttention through tf2onnx),
    with ort_contrib off and at its default: (results, models)."""
    import bridge
    from bridge import models
    folder = tmp_path_factory.mktemp("bert")
    model = models.build("bert", LENGTH, **BERT)
    results = {"off": bridge.export(model, "onnx", str(folder / "off.onnx"), ort_contrib=False),
               "on": bridge.export(model, "onnx", str(folder / "on.onnx"))}
    return results, {k: onnx.load(str(folder / f"{k}.onnx")) for k in results}


@pytest.fixture(scope="module")
def bert_lowered(bert_exports):
    """The unrewritten export with its com.bridge nodes inlined: plain onnxruntime runs it."""
    from bridge import onnx_plugins
    return onnx_plugins.inline_custom_ops(bert_exports[1]["off"])


def _bert_feeds(batch, seed=0):
    rng = np.random.default_rng(seed)
    mask = np.ones((batch, LENGTH), np.int32)
    for i in range(batch):
        mask[i, rng.integers(1, LENGTH):] = 0        # padded tails
    if batch > 2:
        mask[-1] = 0                                 # a fully masked sample
    return {"token_ids": rng.integers(0, BERT["vocab_size"], (batch, LENGTH)).astype(np.int32),
            "attention_mask": mask}


def test_bert_block_becomes_contrib_ops_and_agrees(bert_lowered):
    out, report = ot.rewrite(bert_lowered, rewrites=ot.REWRITES)
    assert report.counts == {"attention": 1, "skip_layer_norm": 2, "bias_gelu": 1}, report.skipped
    ops = _ops(out)
    assert ops.count("com.microsoft:Attention") == 1 and "Softmax" not in ops and "Erf" not in ops
    (att,) = [n for n in out.graph.node if n.op_type == "Attention"]
    assert att.input[3] == "attention_mask"
    onnx.checker.check_model(out, full_check=True)
    for batch in (1, 3):
        feeds = _bert_feeds(batch, seed=batch)
        (want,) = _run(bert_lowered, feeds)
        (got,) = _run(out, feeds)
        assert np.all(np.isfinite(want)) and _err(got, want) <= 1e-4


def test_planted_attention_scale_bug_is_refused(bert_lowered, monkeypatch):
    """The match's own numeric check refuses an Attention that computes something else;
    unchecked, the same bug shows in the model's outputs."""
    make_node = helper.make_node

    def wrong_scale(op_type, *args, **kwargs):
        if op_type == "Attention":
            kwargs["scale"] = 0.3
        return make_node(op_type, *args, **kwargs)
    monkeypatch.setattr(helper, "make_node", wrong_scale)
    checked, report = ot.rewrite(bert_lowered, rewrites=["attention"])
    assert report.counts["attention"] == 0 and "disagree" in report.skipped[0]
    assert "com.microsoft:Attention" not in _ops(checked)
    unchecked, _ = ot.rewrite(bert_lowered, rewrites=["attention"], check=False)
    feeds = _bert_feeds(2)
    assert _err(_run(unchecked, feeds)[0], _run(bert_lowered, feeds)[0]) > 1e-4


# -- the switch -----------------------------------------------------------------------------
def test_no_rewrites_leave_the_graph_unchanged(bert_lowered):
    out, report = ot.rewrite(bert_lowered, rewrites=())
    assert report.total == 0 and out.SerializeToString() == bert_lowered.SerializeToString()
    with pytest.raises(ValueError, match="unknown rewrites"):
        ot.rewrite(bert_lowered, rewrites=["attn"])


def test_ort_contrib_defaults_and_bad_combinations():
    from bridge.converters.export_onnx import check_ort_contrib
    assert check_ort_contrib(None, "custom", "none") is True
    assert check_ort_contrib(None, "lowered", "none") is False
    assert check_ort_contrib(None, "custom", "dynamic") is False
    assert check_ort_contrib(True, "lowered", "none") is True
    assert check_ort_contrib(False, "custom", "none") is False
    with pytest.raises(OptionError, match="--ort-contrib with --quantize dynamic"):
        check_ort_contrib(True, "custom", "dynamic")


def test_export_flag_on_and_off(bert_exports):
    """bridge.export(..., ort_contrib=False) writes bridge's graph as before (no com.microsoft
    node); the default writes the contrib ops, and both verify against TensorFlow."""
    results, exported = bert_exports
    off, on = results["off"], results["on"]
    assert off.ok and on.ok and off.checks and on.checks
    assert not ot.has_contrib_nodes(exported["off"]) and "com.bridge:FusedLayerNorm" in _ops(exported["off"])
    assert _ops(exported["on"]).count("com.microsoft:Attention") == 1
    assert "com.microsoft:BiasGelu" in _ops(exported["on"])
    assert on.details["ort_contrib"]["counts"]["attention"] == 1 and "ort_contrib" not in off.details


def test_parity_rows_run_the_rewrite_or_its_twin(bert_lowered):
    """`ort-contrib` runs what the export writes; the reference evaluator (no com.microsoft
    kernels) and the other ONNX rows keep the unrewritten twin."""
    from bridge.parity.runtimes import discover
    from bridge.parity.runtimes.onnx_reference import OnnxReference
    from bridge.parity.runtimes.ort_contrib import OrtContrib

    class Source:
        kind = "onnx"

        def onnx_custom(self):
            return bert_lowered

        def cached(self, key, build, what=""):
            return build()
    runtimes = discover()[0]
    assert runtimes["ort-contrib"] is OrtContrib and not OrtContrib.default
    assert ot.has_contrib_nodes(OrtContrib().onnx_model(Source()))
    assert not ot.has_contrib_nodes(OnnxReference().onnx_model(Source()))
    assert all(getattr(c, "model_key", "") != OrtContrib.model_key for n, c in runtimes.items() if n != "ort-contrib")
