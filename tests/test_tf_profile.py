"""benchmarks/tf_profile.py reads TensorFlow's profiler trace right: every op of
the layers that bridge fuses is found and counted on the unfused side, the fused
op stands for them on the other, and its FLOP count agrees with the model's own
kernels (a bound built on a miscounted trace would say nothing)."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import tf_profile  # noqa: E402
from _common import keras_function  # noqa: E402

from bridge import models  # noqa: E402
from bridge.converters import fuse  # noqa: E402

CONFIG = dict(layers=2, hidden=32, heads=2, intermediate=48)
SEQ = 16


@pytest.fixture(scope="module")
def traced():
    unfused = models.build("bert", SEQ, **CONFIG)
    fused, report = fuse(unfused)
    x = models.sample_inputs(unfused, batch=1)
    inputs = [tf.constant(x[t.name]) for t in unfused.inputs]
    out = {}
    for tag, model in (("unfused", unfused), ("fused", fused)):
        fn = keras_function(model)
        fn(*inputs)
        out[tag] = tf_profile.trace_ops(fn, inputs, steps=2)
    return (unfused, report, out, tf_profile.scope_suffix(out["unfused"]["ops"], unfused.name),
            tf_profile.scope_suffix(out["fused"]["ops"], fused.name))


def test_op_events_are_the_graphs_ops(traced):
    unfused, report, traces, suffix, fused_suffix = traced
    blocks = report.block_map()
    assert len(blocks) == 1 + 2 * CONFIG["layers"]        # the embedding's and two per layer
    seen = {tf_profile.layer_of(node, suffix) for node, _, _ in traces["unfused"]["ops"]}
    replaced = {layer for originals in blocks.values() for layer in originals}
    assert replaced <= seen, replaced - seen
    fused_ops = [node for node, op, _ in traces["fused"]["ops"] if op == "FusedLayerNorm"]
    assert sorted({tf_profile.layer_of(n, fused_suffix) for n in fused_ops}) == sorted(blocks)
    assert len(fused_ops) == len(blocks)                  # one node per fused layer, per step
    assert traces["fused"]["op_count"] < traces["unfused"]["op_count"]
    for t in traces.values():
        assert all(np.isfinite(us) and us >= 0 for _, _, us in t["ops"])
        assert t["step_ms"] > 0


def test_split_adds_up_and_finds_the_layer_norms(traced):
    _, report, traces, suffix, _ = traced
    replaced = {layer for originals in report.block_map().values() for layer in originals}
    parts = tf_profile.split(traces["unfused"]["ops"], replaced, suffix)
    total = sum(us for _, _, us in traces["unfused"]["ops"]) / 1e3
    assert sum(parts.values()) == pytest.approx(total)
    assert parts["fused layers"] > 0 and parts["matmul"] > 0
    # a layer norm's ops are Mean, Sub, Rsqrt... : none of them lands in matmul
    ln_ops = {op for node, op, _ in traces["unfused"]["ops"] if tf_profile.layer_of(node, suffix) in replaced}
    assert not any(tf_profile.MATMUL.search(op) for op in ln_ops), ln_ops


def test_matmul_flops_match_the_models_kernels(traced):
    unfused = traced[0]
    # independent count: 2 x SEQ x every encoder kernel's size, plus QK^T and AV
    kernels = [int(np.prod(w.shape)) for w in unfused.weights
               if w.path.startswith("layer") and w.path.endswith("kernel")]
    expected = 2 * SEQ * sum(kernels) + CONFIG["layers"] * 2 * 2 * SEQ * SEQ * CONFIG["hidden"]
    assert tf_profile.bert_matmul_flops(CONFIG, SEQ) == expected


@pytest.mark.parametrize("name,suffix,layer", [
    ("bert_1/layer0_attention_norm_1/moments/mean", "_1", "layer0_attention_norm"),
    ("bert_fused_1/embedding_norm_1/FusedLayerNorm", "_1", "embedding_norm"),
    ("yolov3/conv_12/Conv2D", "", "conv_12"),          # no suffix in this trace: the layer's own digits stay
    ("yolov3_1/dense_1_1/MatMul", "_1", "dense_1"),
    ("yolov3_1/dense_1/MatMul", "_1", "dense"),
])
def test_layer_of(name, suffix, layer):
    assert tf_profile.layer_of(name, suffix) == layer


def test_scope_suffix(traced):
    assert traced[3] == traced[4] == "_1"
    assert tf_profile.scope_suffix([("m/a/b", "Add", 1.0), ("m/c", "Mul", 1.0)], "m") == ""


def test_profiler_events_are_not_ops():
    assert tf_profile.OP_EVENT.match("ExecutorState::Process") is None
    assert tf_profile.OP_EVENT.match("bert/x/MatMul:_MklMatMul").groups() == ("bert/x/MatMul", "_MklMatMul")
