"""bridge parity on ill-conditioned outputs: a saturated softmax whose arg-max
flips between runtimes, and a runtime as close to the float64 answer as TF
float32 itself, are their own status (neither pass nor FAIL); a real mismatch
of a probability output, a NaN, a 1% error, a runtime clearly worse than TF
float32 are not excused."""
from __future__ import annotations

import numpy as np
import pytest

from bridge.parity.compare import compare, default_tolerance
from bridge.parity.conditioning import FLOAT64_FACTOR, ILL_CONDITIONED, against_float64, explain


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


# -- the float64 judge ----------------------------------------------------------------------
def _float64_case(rng, shape, tf_noise, kind="features"):
    """(float64 answer, TF float32 = answer + noise of std `tf_noise`): O(1) features
    (logits, embeddings), or probabilities (a softmax over the last axis)."""
    f64 = rng.standard_normal(shape) * 2
    if kind == "softmax":
        f64 = _softmax(f64).astype(np.float64)
    tf = f64 + tf_noise * rng.standard_normal(shape)
    return f64, tf


def _judge(got, tf, f64, tol=TOL):
    return against_float64("ort", compare(got, f64, tol), compare(tf, f64, tol))


@pytest.mark.parametrize("shape", [(1, 1000), (3, 7), (2, 5, 5, 4)])
@pytest.mark.parametrize("kind", ["features", "softmax"])
def test_as_close_to_float64_as_tf_is_excused(shape, kind, rng):
    f64, tf = _float64_case(rng, shape, 1e-3, kind)    # TF float32 itself fails the tolerance against float64
    assert not compare(tf, f64, TOL).passed
    mirrored = 2 * f64 - tf                             # as far from float64 as TF, on the other side: 2x from TF
    assert not compare(mirrored, tf, TOL).passed
    excused, note = _judge(mirrored, tf, f64)
    assert excused and note.startswith(ILL_CONDITIONED) and "TF float32 itself is" in note


@pytest.mark.parametrize("shape", [(1, 1000), (3, 7), (2, 5, 5, 4)])
@pytest.mark.parametrize("bug", ["1% scale", "1% on one element", "NaN", "Inf", "5x TF's rounding", "shape"])
def test_planted_bugs_are_not_excused(shape, bug, rng):
    f64, tf = _float64_case(rng, shape, 3e-4)          # TF ~1e-3 from float64 (1e-4 allowed): ill-conditioned
    assert not compare(tf, f64, TOL).passed
    got = 2 * f64 - tf                                  # the honest runtime (excused, see above) ...
    assert _judge(got, tf, f64)[0]
    if bug == "1% scale":                               # ... with a bug planted in it
        got = got * 1.01
    elif bug == "1% on one element":
        at = np.unravel_index(np.argmax(f64), f64.shape)
        got[at] *= 1.01
    elif bug in ("NaN", "Inf"):
        got.flat[got.size // 2] = np.nan if bug == "NaN" else np.inf
    elif bug == "5x TF's rounding":
        got = f64 + 5 * (f64 - tf)
    else:
        got = got.reshape(-1)[:-1]
    excused, note = _judge(got, tf, f64)
    assert not excused, (bug, note)
    assert not note.startswith(ILL_CONDITIONED)
    assert ("is not finite where float64 is" in note) == (bug in ("NaN", "Inf")), note


def test_where_tf_is_within_the_tolerance_so_must_the_runtime_be(rng):
    f64 = rng.uniform(0.1, 1.0, (4, 9))
    tf = f64 + 0.8e-4                                   # within the tolerance of float64
    honest = f64 - 0.8e-4                               # within it too, but 1.6e-4 from TF float32
    assert not compare(honest, tf, TOL).passed
    assert _judge(honest, tf, f64)[0]
    excused, note = _judge(f64 - 1.5e-4, tf, f64)       # 1.5x the tolerance from float64: TF is within it
    assert not excused and "real mismatch" in note


def test_tf_nonfinite_gives_no_float64_verdict(rng):
    f64, tf = _float64_case(rng, (2, 6), 3e-3)
    tf[0, 0] = np.nan                                   # inf x TF's error would excuse anything
    excused, note = _judge(2 * f64 - np.nan_to_num(tf), tf, f64)
    assert not excused and "TF float32 is not finite" in note


def test_the_factor_is_what_the_note_says(rng):
    f64, tf = _float64_case(rng, (1, 1000), 3e-3)
    for k, expect in ((0.9 * FLOAT64_FACTOR, True), (1.1 * FLOAT64_FACTOR, False)):
        got = f64 + k * (f64 - tf)                      # k times TF's error, element by element
        assert _judge(got, tf, f64)[0] is expect, k


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
    from bridge.converters.shared_steps import compare_outputs
    return compare_outputs({"diff": got.astype(np.float32)}, {"diff": cancelling["tf32"].astype(np.float32)},
                           float64=float64)


@pytest.mark.parametrize("bug", [None, "1% scale", "NaN", "4x TF's error"])
def test_export_check_decides_by_float64_and_fails_planted_bugs(cancelling, bug):
    f64, tf32 = cancelling["f64"], cancelling["tf32"]
    got = 2 * f64 - tf32                                 # as far from float64 as TF float32, on the other side
    if bug == "1% scale":
        got = got * 1.01
    elif bug == "NaN":
        got[1, 3] = np.nan
    elif bug == "4x TF's error":
        got = f64 + 4 * (f64 - tf32)
    calls = []
    (c,) = _export_checks(cancelling, got, lambda: calls.append(1) or {"diff": f64})
    without = _export_checks(cancelling, got, None)[0]   # no twin: the plain verdict
    assert not without.passed and without.status == "FAIL"
    if bug is None:
        assert c.passed and c.status == ILL_CONDITIONED and "TF float32 itself" in c.note, c.note
    else:
        assert not c.passed and c.status == "FAIL", c.note
    assert len(calls) == (0 if bug == "NaN" else 1)      # a NaN fails without asking float64


def test_export_check_asks_float64_only_for_failures_and_says_when_there_is_none(cancelling):
    from bridge.parity.float64 import NoFloat64
    tf32 = cancelling["tf32"]
    calls = []
    (ok,) = _export_checks(cancelling, tf32.copy(), lambda: calls.append(1))
    assert ok.passed and ok.status == "pass" and calls == []

    def none():
        raise NoFloat64("a made-up reason")
    (c,) = _export_checks(cancelling, 2 * cancelling["f64"] - tf32, none)
    assert not c.passed and c.status == "FAIL" and "no float64 verdict: a made-up reason" in c.note


def test_bridge_export_marks_an_ill_conditioned_output(cancelling, tmp_path, monkeypatch, capsys):
    """End to end through `bridge export --to onnx`: onnxruntime (planted) lands as
    far from the float64 answer as TF float32 does: the check is ill-conditioned,
    the command exits 0 and says why; off by 4x TF's error, it exits 1."""
    import json
    from bridge.cli import main
    from bridge.converters import export_onnx
    import keras
    model = keras.models.load_model(cancelling["path"])
    w1, w2 = [np.asarray(w, np.float64) for w in model.get_weights()]
    for planted, rc_want, status in [(lambda f64, tf: 2 * f64 - tf, 0, ILL_CONDITIONED),
                                     (lambda f64, tf: f64 + 4 * (f64 - tf), 1, "FAIL")]:
        def run_onnx(path, feeds, mode, planted=planted):
            x = feeds["x"]
            return {"diff": planted(x.astype(np.float64) @ w1 @ w2, np.asarray(model(x), np.float64))
                    .astype(np.float32)}
        monkeypatch.setattr(export_onnx, "run_onnx", run_onnx)
        rc = main(["export", cancelling["path"], "--to", "onnx", "-o", str(tmp_path / "c.onnx"), "--json"])
        out = json.loads(capsys.readouterr().out)
        (check,) = out["checks"]
        assert rc == rc_want and check["status"] == status and out["ok"] == (rc == 0), check


def test_no_verdict_says_why_in_one_line_even_for_an_empty_message():
    from bridge.parity.float64 import NoFloat64, no_verdict
    assert no_verdict(NoFloat64("a made-up reason")) == "a made-up reason"
    assert no_verdict(RuntimeError("first line\nsecond")) == "RuntimeError: first line"
    assert no_verdict(RuntimeError()) == "RuntimeError: "
