"""bridge parity and bridge export on ill-conditioned outputs: a saturated
softmax whose arg-max flips between runtimes is its own status (neither pass
nor FAIL) where no float64 run decides it; a model whose TF float32 answer is
itself far from its float64 one is judged against the float64 run
(bridge.parity.truth, its own cases in test_parity_truth.py): a runtime or an
export as close to float64 as TF float32 passes, a NaN, a 1% error, or one
clearly worse than TF float32 FAILs."""
from __future__ import annotations

import numpy as np
import pytest

from bridge.parity.compare import compare, default_tolerance
from bridge.parity.conditioning import ILL_CONDITIONED, explain
from bridge.parity.truth import RULE


def _softmax(z):
    z = np.asarray(z, np.float64)
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)


TOL = default_tolerance(np.float32)


@pytest.mark.parametrize("classes", [2, 7, 1000])
def test_saturated_softmax_whose_argmax_flips(classes, rng):
    logits = rng.standard_normal((3, classes))
    logits[:, 0] = 1e4
    logits[:, 1] = 1e4 + 16.0          # one-hot at class 1 ...
    flipped = logits.copy()
    flipped[:, 1] = 1e4 - 16.0         # ... at class 0 after a 3e-3 relative error in one logit
    c = compare(_softmax(flipped), _softmax(logits), TOL)
    assert c.status == ILL_CONDITIONED and c.passed   # not a FAIL; counted apart, the note says what it means
    assert c.note.startswith("ill-conditioned: a softmax-like output") and "differs in 3 of 3 rows" in c.note


def test_unsaturated_flip_is_a_mismatch():
    ref = np.array([[0.3, 0.7, 0.0]], np.float32)
    got = np.array([[0.7, 0.3, 0.0]], np.float32)
    assert explain(got, ref, 1e-4) == ""


def test_flip_to_an_unsaturated_row_is_a_mismatch():
    ref = np.array([[0.0, 1.0, 0.0]], np.float32)
    got = np.array([[0.999, 0.0, 0.001]], np.float32)   # not one-hot: its logits are not within rounding
    assert explain(got, ref, 1e-4) == ""
    got[0] = [1.0, 0.0, 0.0]
    assert explain(got, ref, 1e-4).startswith("ill-conditioned")


@pytest.mark.parametrize("case", ["wrong class", "one ill row, one wrong row", "not probabilities", "passes"])
def test_real_mismatches_are_not_excused(case, rng):
    logits = rng.standard_normal((2, 5)) * 2
    ref = _softmax(logits)
    if case == "wrong class":
        got = ref[:, ::-1].copy()
    elif case == "one ill row, one wrong row":
        logits[0, :2] = [1e4, 1e4 + 16]
        ref = _softmax(logits)
        got = ref.copy()
        got[0, :2] = ref[0, 1::-1]     # ill-conditioned
        got[1] = ref[1, ::-1]          # wrong
    elif case == "not probabilities":
        ref = logits.astype(np.float32)
        got = ref + 1.0
    else:
        got = ref.copy()
    c = compare(got, ref, TOL)
    assert c.passed == (case == "passes") and c.status == ("pass" if case == "passes" else "FAIL")
    assert "ill-conditioned" not in c.note


# -- end to end: bridge parity with the float64 run ----------------------------------------
@pytest.fixture(scope="module")
def cancelling(tmp_path_factory):
    """A Keras model whose float32 answer is itself far from its float64 one
    (0.065 on values up to 66: ~400x the tolerance): Dense(8->256) at weights of 1e4, columns in pairs 1e-4 apart,
    then Dense(256->16) that subtracts each pair. Its float64 answer comes from
    numpy, independent of TF."""
    import keras
    rng = np.random.default_rng(5)
    k1 = rng.standard_normal((8, 128)) * 1e4
    k1 = np.stack([k1, k1 * (1 + 1e-4)], axis=-1).reshape(8, 256)
    k2 = rng.standard_normal((128, 16))
    k2 = np.stack([k2, -k2], axis=1).reshape(256, 16)
    inp = keras.Input((8,), name="x")
    out = keras.layers.Dense(16, use_bias=False, name="diff")(keras.layers.Dense(256, use_bias=False, name="wide")(inp))
    model = keras.Model(inp, out)
    model.get_layer("wide").set_weights([k1.astype(np.float32)])
    model.get_layer("diff").set_weights([k2.astype(np.float32)])
    x = rng.uniform(0.1, 1.0, (3, 8)).astype(np.float32)
    path = tmp_path_factory.mktemp("cancelling") / "cancelling.keras"
    model.save(path)
    f64 = x.astype(np.float64) @ k1.astype(np.float32).astype(np.float64) @ k2.astype(np.float32).astype(np.float64)
    tf32 = np.asarray(model(x), np.float64)
    return {"path": str(path), "x": x, "f64": f64, "tf32": tf32, "folder": path.parent}


def _parity_with(cancelling, got, name="board"):
    from bridge.parity import run_parity
    npz = cancelling["folder"] / f"{name}.npz"
    np.savez(npz, diff=got.astype(np.float32))
    return run_parity(cancelling["path"], runtimes=["tf"], inputs={"x": cancelling["x"]},
                      load_outputs=[(name, str(npz))])


def test_parity_judges_an_ill_conditioned_model_by_float64(cancelling):
    from bridge.parity.report import verdict
    f64, tf32 = cancelling["f64"], cancelling["tf32"]
    assert not compare(tf32, f64, TOL).passed          # the premise: TF float32 itself is off
    report = _parity_with(cancelling, 2 * f64 - tf32)  # as far from float64 as TF float32, on the other side
    board = next(r for r in report.runtimes if r.name == "board")
    c = board.outputs["diff"]
    # judged against float64: within 3x TF float32's own error there, a PASS with the rule in its note
    assert c.status == "pass" and c.passed and report.passed, c.note
    assert c.note.startswith("as close to float64 as TF float32 itself, within 3x") and c.past_bound > 0, c.note
    assert report.to_json()["ill_conditioned"] == []
    assert verdict(report).startswith("PASS: 1 runtime agrees")
    judge = next(r for r in report.runtimes if r.name == "tf-float64")  # TF float32's own error, against numpy's
    assert judge.outputs["diff"].max_abs_error == pytest.approx(np.abs(tf32 - f64).max(), rel=1e-3)


@pytest.mark.parametrize("bug", ["1% scale", "NaN", "4x TF's error"])
def test_parity_float64_judge_fails_planted_bugs(cancelling, bug):
    f64, tf32 = cancelling["f64"], cancelling["tf32"]
    got = 2 * f64 - tf32
    if bug == "1% scale":
        got = got * 1.01
    elif bug == "NaN":
        got[1, 3] = np.nan
    else:
        got = f64 + 4 * (f64 - tf32)
    report = _parity_with(cancelling, got)
    c = next(r for r in report.runtimes if r.name == "board").outputs["diff"]
    assert not report.passed and c.status == "FAIL" and report.to_json()["ill_conditioned"] == [], c.note


def test_float64_twin_of_nested_models_and_what_it_refuses(rng):
    """The twin computes every layer in float64 (a nested Sequential too), with
    the same weights: numpy float64 on those weights agrees to rounding; a
    mixed_float16 layer too (its policy made float64); a layer that keeps a lower
    precision whatever its config says gets no twin."""
    import keras
    from bridge.parity.float64 import NoFloat64, keras_float64
    inp = keras.Input((5,))
    inner = keras.Sequential([keras.Input((7,)), keras.layers.Dense(3, activation="tanh")])
    model = keras.Model(inp, inner(keras.layers.Dense(7, activation="relu")(inp)))
    twin = keras_float64(model)
    x = rng.uniform(-1, 1, (4, 5))
    w1, b1, w2, b2 = [np.asarray(w, np.float64) for w in model.get_weights()]
    want = np.tanh(np.maximum(x @ w1 + b1, 0) @ w2 + b2)
    got = np.asarray(twin(x))
    assert got.dtype == np.float64 and np.abs(got - want).max() < 1e-12
    mixed = keras.Model(inp, keras.layers.Dense(2, dtype="mixed_float16")(inp))
    w, b = [np.asarray(v, np.float64) for v in mixed.get_weights()]
    got = np.asarray(keras_float64(mixed)(x))
    assert got.dtype == np.float64 and np.abs(got - (x @ w + b)).max() < 1e-12

    @keras.saving.register_keras_serializable(package="test_float64_half")
    class Half(keras.layers.Dense):
        def __init__(self, units, **kw):
            kw["dtype"] = "float16"  # whatever the config says
            super().__init__(units, **kw)

    with pytest.raises(NoFloat64, match="does not compute in float64"):
        keras_float64(keras.Model(inp, Half(2)(inp)))


def test_a_copy_that_is_not_the_model_gives_no_float64_verdict(tmp_path):
    """The float64 twin is rebuilt from the config; a layer whose config loses a
    setting (here a scale set after construction) rebuilds as another model.
    Its distance from TF float32 would excuse a runtime that far off: the judge
    checks the copy at float32 first, refuses it, and the runtime stays FAIL."""
    import keras
    from bridge.parity import run_parity

    @keras.saving.register_keras_serializable(package="test_float64_copy")
    class Scale(keras.layers.Layer):
        def __init__(self, **kw):
            super().__init__(**kw)
            self.k = 1.0

        def call(self, x):
            return x * self.k

    inp = keras.Input((6,), name="x")
    layer = Scale(name="scale")
    model = keras.Model(inp, keras.layers.Dense(4, name="d")(layer(inp)))
    layer.k = 3.0                                       # not in the config: the copy computes x * 1
    x = np.random.default_rng(2).uniform(0.5, 1.0, (2, 6)).astype(np.float32)
    tf32 = np.asarray(model(x), np.float64)
    from bridge.parity.float64 import NoFloat64, float64_outputs
    from bridge.parity import open_source
    with pytest.raises(NoFloat64, match="does not compute what the model does"):
        float64_outputs(open_source(model), {"x": x})
    wrong = tf32 * (2 / 3)                              # a runtime off by a third of the bad copy's distance
    npz = tmp_path / "board.npz"
    np.savez(npz, d=wrong.astype(np.float32))
    report = run_parity(model, runtimes=["tf"], inputs={"x": x}, load_outputs=[("board", str(npz))])
    c = next(r for r in report.runtimes if r.name == "board").outputs["d"]
    assert not report.passed and c.status == "FAIL" and "no float64 verdict" in c.note, c.note


# -- the export's own check (bridge export) uses the same float64 rule -------------
def _export_checks(cancelling, got, float64):
    from bridge.parity.verify import compare_outputs
    return compare_outputs({"diff": got.astype(np.float32)}, {"diff": cancelling["tf32"].astype(np.float32)},
                           float64=float64)


@pytest.mark.parametrize("bug", [None, "1% scale", "NaN", "4x TF's error", "1% on one element"])
def test_export_check_decides_by_float64_and_fails_planted_bugs(cancelling, bug):
    f64, tf32 = cancelling["f64"], cancelling["tf32"]
    got = 2 * f64 - tf32                                 # as far from float64 as TF float32, on the other side
    if bug == "1% scale":
        got = got * 1.01
    elif bug == "NaN":
        got[1, 3] = np.nan
    elif bug == "4x TF's error":
        got = f64 + 4 * (f64 - tf32)
    elif bug == "1% on one element":
        at = np.unravel_index(np.argmax(np.abs(f64)), f64.shape)
        got[at] *= 1.01
    calls = []
    (c,) = _export_checks(cancelling, got, lambda: calls.append(1) or {"diff": f64})
    without = _export_checks(cancelling, got, None)[0]   # no twin: the plain verdict
    assert not without.passed and without.status == "FAIL"
    if bug is None:  # parity's verdict, its rule in the note, and the numbers against float64
        assert c.passed and c.status == "pass" and RULE in c.note, c.note
        assert f"TF float32 {np.abs(tf32 - f64).max():.2g}" in c.note, c.note
    else:
        assert not c.passed and c.status == "FAIL", c.note
        assert (RULE in c.note) == (bug != "NaN"), c.note
    assert len(calls) == (0 if bug == "NaN" else 1)      # a NaN fails without asking float64


def test_export_check_asks_float64_only_for_failures_and_says_when_there_is_none(cancelling):
    from types import SimpleNamespace
    from bridge.parity.verify import float64_reference
    from bridge.parity.float64 import NoFloat64
    tf32 = cancelling["tf32"]
    calls = []
    (ok,) = _export_checks(cancelling, tf32.copy(), lambda: calls.append(1))
    assert ok.passed and ok.status == "pass" and calls == []

    def none():
        raise NoFloat64("a made-up reason")
    (c,) = _export_checks(cancelling, 2 * cancelling["f64"] - tf32, none)
    assert not c.passed and c.status == "FAIL" and "no float64 verdict: a made-up reason" in c.note
    # a model with no float64 run (an .onnx MODEL; SavedModels have their graph's): its check says so
    onnx_model = float64_reference(SimpleNamespace(is_keras=False, is_graph=False, kind="onnx"),
                                   {"x": cancelling["x"]})
    (c,) = _export_checks(cancelling, 2 * cancelling["f64"] - tf32, onnx_model)
    assert not c.passed and c.status == "FAIL" and "no float64 verdict: an .onnx MODEL" in c.note, c.note


def test_bridge_export_judges_an_ill_conditioned_output_by_float64(cancelling, tmp_path, monkeypatch, capsys):
    """End to end through `bridge export --to onnx`: onnxruntime (planted) lands as
    far from the float64 answer as TF float32 does: the check passes by parity's
    float64 rule, the command exits 0 and its table's note states the rule; off
    by 4x TF's error, it FAILs and exits 1."""
    import json
    from bridge.cli import main
    from bridge.parity.runtimes.ort import Ort
    import keras
    model = keras.models.load_model(cancelling["path"])
    w1, w2 = [np.asarray(w, np.float64) for w in model.get_weights()]
    for planted, rc_want, status in [(lambda f64, tf: 2 * f64 - tf, 0, "pass"),
                                     (lambda f64, tf: f64 + 4 * (f64 - tf), 1, "FAIL")]:
        def run_onnx(self, feeds, planted=planted):  # the verifier's `ort` row
            x = feeds["x"]
            return {"diff": planted(x.astype(np.float64) @ w1 @ w2, np.asarray(model(x), np.float64))
                    .astype(np.float32)}
        monkeypatch.setattr(Ort, "run", run_onnx)
        rc = main(["export", cancelling["path"], "--to", "onnx", "-o", str(tmp_path / "c.onnx"), "--json"])
        out = json.loads(capsys.readouterr().out)
        (check,) = out["checks"]
        assert rc == rc_want and check["status"] == status and out["ok"] == (rc == 0), check
        assert RULE in check["note"], check
        rc = main(["export", cancelling["path"], "--to", "onnx", "-o", str(tmp_path / "c.onnx")])
        text = capsys.readouterr().out
        assert rc == rc_want and "diff: " in text and RULE in text and ILL_CONDITIONED not in text, text


def test_no_verdict_says_why_in_one_line_even_for_an_empty_message():
    from bridge.parity.float64 import NoFloat64, no_verdict
    assert no_verdict(NoFloat64("a made-up reason")) == "a made-up reason"
    assert no_verdict(RuntimeError("first line\nsecond")) == "RuntimeError: first line"
    assert no_verdict(RuntimeError()) == "RuntimeError: "
