"""benchmarks/zoo.py: its --quick subset end to end (every road of every model
passes, plain tf2onnx measured beside it), and the pieces that make its numbers
mean something: BatchNorm statistics calibrated on the generated inputs
(against numpy; channels leave with variance 1 below the layer's epsilon too,
and with dropout off), classifier logits spread across the classes, and the
plain tf2onnx run without bridge's handlers."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

keras = pytest.importorskip("keras")

ZOO = Path(__file__).resolve().parents[1] / "benchmarks" / "zoo.py"


def _input_name(model):
    """The name the zoo's feeds use for a one-input model (bridge.modelsource's, not Keras's made-up one)."""
    from bridge.modelsource import keras_input_names
    return keras_input_names(model)[0]


def _zoo():
    if "bridge_zoo" not in sys.modules:
        spec = importlib.util.spec_from_file_location("bridge_zoo", ZOO)
        mod = importlib.util.module_from_spec(spec)
        sys.modules["bridge_zoo"] = mod  # dataclasses look their module up there
        spec.loader.exec_module(mod)
    return sys.modules["bridge_zoo"]


@pytest.mark.parametrize("shape", [(3, 7, 5, 2), (1, 4, 4, 3)])
def test_batchnorm_statistics_are_calibrated(shape, rng):
    x = keras.Input(shape[1:])
    conv = keras.layers.Conv2D(4, 3, padding="same")
    bn1 = keras.layers.BatchNormalization()
    bn2 = keras.layers.BatchNormalization()
    h = conv(x)
    model = keras.Model(x, bn2(keras.layers.Dense(3)(bn1(h))))
    feeds = [{_input_name(model): (rng.random(shape) * 5 + 2).astype("float32")} for _ in range(2)]
    assert _zoo().calibrate_batchnorm(model, feeds) == 2
    batch = np.concatenate([f[_input_name(model)] for f in feeds]).astype(np.float64)
    pre = np.asarray(keras.Model(x, h)(batch.astype("float32")), np.float64)
    np.testing.assert_allclose(bn1.moving_mean.numpy(), pre.mean(axis=(0, 1, 2)), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(bn1.moving_variance.numpy(), pre.var(axis=(0, 1, 2)), rtol=1e-3, atol=1e-5)
    assert bn1.momentum == 0.99  # put back
    # the second BN sees the first one's normalised output: O(1) statistics in inference mode too
    out = np.asarray(model(batch.astype("float32"), training=False))
    assert np.all(np.abs(out.mean(axis=(0, 1, 2))) < 1e-3) and np.allclose(out.std(axis=(0, 1, 2)), 1, atol=1e-2)


@pytest.mark.parametrize("case", ["variance below epsilon", "dropout before the BN"])
def test_batchnorm_leaves_unit_variance_in_inference(case, rng):
    """EfficientNet's input is divided by 255 inside the model (variance ~1e-5
    against epsilon 1e-3) and its blocks end in dropout: after calibration
    each BN's output has mean 0 and variance 1 in inference mode all the same."""
    x = keras.Input((5, 5, 3))
    h = keras.layers.Conv2D(6, 3, padding="same")(keras.layers.Rescaling(1 / 255)(x) if case.startswith("var") else x)
    drop = keras.layers.Dropout(0.5)
    if case.startswith("dropout"):
        h = drop(keras.layers.Dense(6)(h))
    bn = keras.layers.BatchNormalization(epsilon=1e-3)
    model = keras.Model(x, keras.layers.Dense(4)(bn(h)))
    feeds = [{_input_name(model): rng.random((4, 5, 5, 3)).astype("float32")} for _ in range(3)]
    _zoo().calibrate_batchnorm(model, feeds)
    batch = np.concatenate([f[_input_name(model)] for f in feeds])
    out = np.asarray(keras.Model(model.inputs, bn.output)(batch, training=False), np.float64)
    assert np.all(np.abs(out.mean(axis=(0, 1, 2))) < 1e-3), out.mean(axis=(0, 1, 2))
    np.testing.assert_allclose(out.std(axis=(0, 1, 2)), 1, atol=1e-2)
    assert drop.rate == 0.5  # put back


def test_plain_tf2onnx_runs_without_bridges_handlers():
    from tf2onnx.handler import tf_op
    from bridge.converters.tf2onnx_common import register_all
    register_all()

    def erfc_registered():
        return any("Erfc" in h for versions in tf_op.get_opsets().values() for h in versions)
    assert erfc_registered()
    with _zoo()._without_bridge_handlers():
        assert not erfc_registered()
    assert erfc_registered()


def test_quick_sweep(tmp_path):
    out = tmp_path / "zoo.json"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run([sys.executable, str(ZOO), "--quick", "--repeat", "1", "--json", str(out)],
                          capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(out.read_text())
    names = {r["model"] for r in rows}
    assert {"yolov3-tiny", "MobileNetV3Small"} <= names
    from bridge.parity.runner import known_runtimes
    # every runtime a plain `bridge parity` runs, each compared with the reference (tf) on every model
    defaults = sorted(n for n, cls in known_runtimes().items() if cls.default and n != "tf")
    for r in rows:
        if r["built"]:
            assert r["family"] == "keras_hub" and "keras-hub is not installed" in r["built"], r
            continue
        assert sorted(r["roads"]) == sorted(_zoo().ROADS), r["roads"]
        # "pass (--opset N)": the export passed at the opset its own error named (ViT's GE export);
        # "not verified" (exit 0, no check) and "pass; not run: ..." (parity) are no passes here
        assert all(v.startswith("pass") and "not run" not in v for v in r["roads"].values()), (r["model"], r["roads"])
        assert r["roads"]["parity"] == "pass", (r["model"], r["roads"]["parity"])
        assert sorted(r["errors"]) == defaults, (r["model"], sorted(r["errors"]))
        assert r["plain"] and r["export_s"] > 0 and r["ort_ms"] > 0, r
        assert max(r["errors"].values()) < 1e-3, (r["model"], r["errors"])
    dynamic = next(r for r in rows if r["model"] == "text-classifier-dynamic")  # no --input-shape given
    assert dynamic["size"] == "?x?" and dynamic["sample"].startswith("1x16 ("), dynamic
    hub = next((r for r in rows if r["model"] == "bert-hub" and not r["built"]), None)
    if hub is not None:  # keras_hub's BertBackbone leaves its length open: sampled at its max_sequence_length
        assert hub["size"] == "?x?,?x?,?x?" and "max_sequence_length 32" in hub["sample"], hub
    tiny = next(r for r in rows if r["model"] == "yolov3-tiny")
    assert tiny["fused"].get("conv_bn_leaky", 0) > 0 and tiny["plain_ort_ms"] > 0
    assert "plain tf2onnx" in proc.stdout and "models built" in proc.stdout


def test_no_row_gives_input_shape():
    """Every row's commands get the model and its own flags only (a built-in's
    --config, the custom layer's --import), never --input-shape: what the model
    leaves open is bridge's to sample (issue 25)."""
    zoo = _zoo()
    rows = zoo.models()
    for zm in rows:
        args = zoo._source_args(zm, "MODEL")
        assert args[0] == "MODEL" and "--input-shape" not in args, (zm.name, args)
        assert set(args[1::2]) <= {"--config", "--import"}, (zm.name, args)
        if zm.family == "built-in":
            assert any(a.startswith("input_size=") for a in args[2::2]), (zm.name, args)
    custom = next(zm for zm in rows if zm.name == "custom-layer-cnn")
    assert zoo._source_args(custom, "m.keras")[1:] == ["--import", zoo.CUSTOM_LAYERS]
    assert os.path.isfile(zoo.CUSTOM_LAYERS)
    # every keras.applications and keras_hub row has its SavedModel twin
    names = {zm.name for zm in rows}
    assert all(f"{zm.name}{zoo.SAVED_SUFFIX}" in names for zm in rows
               if zm.family in ("keras.applications", "keras_hub") and not zm.saved)


def test_saved_model_rows_are_compared_count_by_count():
    """The summary's SavedModel line: a twin that fuses other counts than its
    .keras row is listed with both (a matcher to fix, or why it is right), one
    that fuses the same is not; rows without a twin do not count."""
    zoo = _zoo()
    S = zoo.SAVED_SUFFIX
    rows = [zoo.Row("A", "keras_hub", fused={"layer_norm": 5}), zoo.Row(f"A{S}", "keras_hub", fused={"layer_norm": 5}),
            zoo.Row("B", "keras_hub", fused={"layer_norm": 3, "conv_bn_leaky": 2}),
            zoo.Row(f"B{S}", "keras_hub", fused={"layer_norm": 2, "conv_bn_leaky": 2}),
            zoo.Row("C", "keras_hub", fused={"conv_bn_leaky": 1}), zoo.Row(f"C{S}", "keras_hub"),
            zoo.Row("D", "keras_hub", fused={"layer_norm": 1}),
            zoo.Row("E", "keras_hub", fused={"layer_norm": 1},
                    near_misses={"layer_norm": ["inside XEncoder 'e0', which cannot be copied to fuse it"]}),
            zoo.Row(f"E{S}", "keras_hub", fused={"layer_norm": 4})]
    lines = zoo.saved_model_lines(rows)
    assert lines[0].startswith("SavedModel rows fusing what their .keras rows fuse: 1/4 "), lines
    assert "SavedModel CBL 2 LN 11; .keras CBL 3 LN 9" in lines[0], lines
    # the graph fusing more where the .keras road says why it could not: that road's near miss
    assert lines[1:] == [f"  B{S}: CBL 2 LN 2 vs .keras CBL 2 LN 3 (a matcher to fix)",
                         f"  C{S}: nothing vs .keras CBL 1 (a matcher to fix)",
                         f"  E{S}: LN 4 vs .keras LN 1 (the .keras road's limit: inside XEncoder 'e0', which "
                         f"cannot be copied to fuse it)"], lines
    zoo.SAVED_DIFFERS["C"] = "the graph computes it otherwise"
    try:
        assert zoo.saved_model_lines(rows)[2].endswith("(why: the graph computes it otherwise)")
    finally:
        del zoo.SAVED_DIFFERS["C"]
    assert "SavedModel rows" in zoo.summary(rows)


@pytest.mark.parametrize("offset", [0.0, 50.0])
def test_classifier_logits_are_calibrated(offset, rng):
    """The logits spread LOGIT_STD across the classes of each input; an offset
    common to one input's logits (which the softmax ignores: EfficientNet's
    heads) does not count."""
    x = keras.Input((6,))
    h = keras.layers.Dense(8)(x)
    head = keras.layers.Dense(5, activation="softmax")
    model = keras.Model(x, head(h))
    head.kernel.assign(head.kernel.numpy() * 300 + offset)  # a softmax decided by rounding; + a per-input offset
    feeds = [{_input_name(model): rng.standard_normal((7, 6)).astype("float32")}]
    assert _zoo().calibrate_logits(model, feeds) == 1
    hidden = np.asarray(keras.Model(x, h)(feeds[0][_input_name(model)]), np.float64)
    logits = hidden @ head.kernel.numpy().astype(np.float64) + head.bias.numpy()
    across = np.sqrt(np.mean(np.var(logits, axis=-1)))
    assert abs(across - _zoo().LOGIT_STD) < 1e-3


def test_residual_branches_are_scaled():
    """The BN ending each residual branch (directly or through dropout), or its
    conv where no BN ends it, is scaled by 1/sqrt(branches); a projection
    shortcut (BN on both sides of the Add) and the stream are not."""
    x = keras.Input((6, 6, 4))
    stream = keras.layers.ReLU()(keras.layers.BatchNormalization(name="stem")(keras.layers.Conv2D(4, 1)(x)))
    ends = []
    for i, drop in enumerate([False, True, False]):
        bn = keras.layers.BatchNormalization(name=f"end{i}")
        h = bn(keras.layers.Conv2D(4, 3, padding="same")(stream))
        ends.append(bn)
        stream = keras.layers.Add()([stream, keras.layers.Dropout(0.2)(h) if drop else h])
    proj = [keras.layers.BatchNormalization(name=f"proj{i}") for i in range(2)]
    out = keras.layers.Add()([proj[0](keras.layers.Conv2D(4, 1)(stream)), proj[1](keras.layers.Conv2D(4, 1)(stream))])
    conv = keras.layers.Conv2D(4, 3, padding="same", name="preact_end")   # a ResNetV2 branch ends in its conv
    out = keras.layers.Add()([out, conv(keras.layers.ReLU()(keras.layers.BatchNormalization(name="pre")(out)))])
    model = keras.Model(x, out)
    for layer in model.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            layer.beta.assign(np.full(4, 0.5, np.float32))
    kernel, bias = conv.kernel.numpy(), np.full(4, 0.5, np.float32)
    conv.bias.assign(bias)
    assert _zoo().scale_residual_branches(model) == 4
    for bn in ends:
        np.testing.assert_allclose(bn.gamma.numpy(), 1 / 2, rtol=1e-6)
        np.testing.assert_allclose(bn.beta.numpy(), 0.5 / 2, rtol=1e-6)
    np.testing.assert_allclose(conv.kernel.numpy(), kernel / 2, rtol=1e-6)
    np.testing.assert_allclose(conv.bias.numpy(), bias / 2, rtol=1e-6)
    for bn in [model.get_layer("stem"), model.get_layer("pre")] + proj:
        assert np.all(bn.gamma.numpy() == 1) and np.all(bn.beta.numpy() == 0.5), bn.name


def test_export_verdicts_read_from_bridge_export_json():
    """The zoo's onnx/tflite/ge columns come from `bridge export --json`: an
    ill-conditioned check (rc 0, status ill-conditioned) is its own mark, not ok."""
    zoo = _zoo()

    def out(status, passed):
        return json.dumps({"checks": [{"output": "probs", "max_abs_error": 2e-4, "allowed": 1e-4,
                                       "passed": passed, "status": status, "note": "TF float32 itself is off"}]})
    assert zoo._verdict(0, out("pass", True), "") == "pass"
    ill = zoo._verdict(0, out(zoo.ILL, True), "")
    assert zoo._mark(ill) == "ill" and "probs" in ill and "TF float32 itself" in ill
    assert zoo._mark(zoo._verdict(1, out("FAIL", False), "")) == "FAIL"
    # exit 0 with nothing checked is no pass: it says why, and the summary does not count it
    for text, why in (("", "no --json report"),
                      (json.dumps({"checks": [], "not_verified": "no runtime here runs it"}), "no runtime here runs it"),
                      (json.dumps({"checks": []}), "the exporter ran no checks")):
        v = zoo._verdict(0, text, "")
        assert v.startswith("not verified: ") and why in v and zoo._mark(v) == "unverified", v
    text = zoo.summary([zoo.Row("a", "keras", roads={"onnx": zoo._verdict(0, "", "")})])
    assert "onnx: 0/1 pass" in text and "a onnx: not verified" in text, text


def test_parity_verdicts_name_the_runtimes_that_did_not_run():
    """A parity run that passed with runtimes unavailable is a pass with them
    listed (marked ok*, named under "why not"), not a plain pass."""
    zoo = _zoo()

    def report(*rows, passed=True):
        return {"passed": passed, "problem": "", "ill_conditioned": [],
                "runtimes": [{"name": n, "status": s, "reason": why, "passed": s != "error", "outputs": {}}
                             for n, s, why in rows]}
    ran = ("tf", "reference", ""), ("ort", "ok", "")
    assert zoo._parity_verdict(report(*ran)) == "pass"
    v = zoo._parity_verdict(report(*ran, ("tflite", "unavailable", "ai_edge_litert is not installed"),
                                   ("ge", "unavailable", "no kernel")))
    assert v == "pass; not run: tflite, ge (tflite: ai_edge_litert is not installed)", v
    assert zoo._mark(v) == "ok*"
    assert "m parity: pass; not run: tflite, ge" in zoo.summary([zoo.Row("m", "keras", roads={"parity": v})])
    assert zoo._parity_verdict(report(*ran, ("ge", "error", "boom"), passed=False)) == "ge: boom"


def test_summary_counts_ill_conditioned_exports_apart_on_both_sides():
    """An ill-conditioned export (bridge's or plain tf2onnx's) is neither counted as
    converting and verifying nor as differing: the summary says how many."""
    zoo = _zoo()
    rows = [zoo.Row("a", "keras", roads={"onnx": "pass"}, plain="converts"),
            zoo.Row("b", "keras", roads={"onnx": f"{zoo.ILL}: probs: TF float32 itself"}, plain=f"converts ({zoo.ILL})"),
            zoo.Row("c", "keras", roads={"onnx": "differs: probs"}, plain="converts, but differs from TensorFlow")]
    text = zoo.summary(rows)
    assert ("bridge onnx export: 1/3 convert and verify (1 more ill-conditioned); "
            "plain tf2onnx: 1/3 (1 more ill-conditioned)") in text, text
