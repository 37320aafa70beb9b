"""The parity comparison rule, inputs, saved/loaded arrays and msame .bin outputs
(no TensorFlow needed)."""
from __future__ import annotations

import os

import numpy as np
import pytest

from bridge.parity import compare as cmp
from bridge.parity import inputs as inputs_mod
from bridge.parity import loaded
from bridge.parity.inputs import InputError, TensorInfo


def _allowed(ref, atol=1e-4, rtol=1e-4):
    """docs/ops.md's rule written out: the error element i may have."""
    absref = np.abs(np.asarray(ref, np.float64))
    return np.maximum(atol * np.maximum(1.0, absref), rtol * absref)


@pytest.mark.parametrize("shape", [(7,), (1, 1), (3, 5, 2), (2, 13, 13, 9), ()])
def test_numbers_against_numpy(rng, shape):
    ref = (rng.normal(size=shape) * 3 + 0.5).astype(np.float32)
    got = (ref + rng.normal(size=shape) * 1e-6).astype(np.float32)
    c = cmp.compare(got, ref)
    diff = np.abs(got.astype(np.float64) - ref.astype(np.float64))
    ratio = diff / _allowed(ref)
    assert c.passed and c.failing == 0
    assert c.max_abs_error == pytest.approx(diff.max())
    assert c.mean_abs_error == pytest.approx(diff.mean())
    assert c.max_rel_error == pytest.approx(np.max(diff / np.abs(ref.astype(np.float64))))
    assert c.cosine == pytest.approx(1.0, abs=1e-9)
    assert c.excess == pytest.approx(ratio.max())
    worst = np.unravel_index(np.argmax(ratio), np.shape(ref))
    assert c.worst_index == worst and c.allowed == pytest.approx(_allowed(ref)[worst])


def test_each_element_is_held_to_its_own_magnitude():
    """docs/ops.md: |got - ref| <= atol * max(1, |ref[i]|) per element, never scaled by
    the largest value: a 2.4 px box next to a 611 px one may be off by 2.4e-4, not 0.0611."""
    ref = np.array([611.0, 2.4, 0.5, 0.0, -3.0], np.float32)
    tol = cmp.Tolerance(1e-4, 1e-4)
    allowed = _allowed(ref)                    # [0.0611, 2.4e-4, 1e-4, 1e-4, 3e-4]
    assert cmp.compare(ref + 0.9 * allowed, ref, tol).passed
    for i in range(ref.size):  # each element alone just beyond its own bound fails, at that element
        got = ref.astype(np.float64).copy()
        got[i] += 1.1 * allowed[i]
        c = cmp.compare(got, ref, tol)
        assert not c.passed and c.failing == 1 and c.worst_index == (i,), (i, c)
        assert c.excess == pytest.approx(1.1, rel=1e-3) and c.allowed == pytest.approx(allowed[i], rel=1e-6)
    got = ref.astype(np.float64).copy()
    got[1] += 0.05                             # inside atol * max|ref| = 0.0611: the old whole-output rule passed it
    c = cmp.compare(got, ref, tol)
    assert not c.passed and c.worst_index == (1,) and c.excess > 200
    # rtol above atol widens only the large elements; an atol override widens every element
    assert cmp.compare(got, ref, cmp.Tolerance(1e-4, 0.03)).passed
    assert not cmp.compare(ref + np.float32(2e-3), ref, cmp.Tolerance(1e-4, 0.03)).passed
    assert cmp.compare(ref + np.float32(2e-3), ref, cmp.Tolerance(3e-3, 0.0)).passed


def test_worst_element_and_values(rng):
    ref = rng.uniform(1, 2, size=(4, 6))
    got = ref.copy()
    got[2, 3] += 0.5
    got[1, 1] += 0.01
    c = cmp.compare(got, ref)
    assert c.worst_index == (2, 3) and c.failing == 2
    assert c.worst_got == pytest.approx(got[2, 3]) and c.worst_ref == pytest.approx(ref[2, 3])


@pytest.mark.parametrize("side", ["result", "reference"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nonfinite_on_either_side_fails_and_is_named(bad, side):
    ref = np.ones((3, 4), np.float32)
    got = ref.copy()
    (got if side == "result" else ref)[1, 2] = bad
    (got if side == "result" else ref)[2, 0] = bad
    c = cmp.compare(got, ref, cmp.Tolerance(1e9, 1e9))
    assert not c.passed and c.nonfinite == 2 and c.failing == 2 and c.excess == np.inf
    assert c.worst_index == (1, 2) and c.nonfinite_side == side
    name = "NaN" if bad != bad else "Inf" if bad > 0 else "-Inf"
    assert c.note.startswith(f"{name} at [1,2] in the {side} ") and "2 non-finite mismatches" in c.note, c.note
    assert c.max_abs_error == 0 and c.to_json()["excess"] == "inf"


def test_different_nonfinite_values_fail():
    ref = np.array([1.0, np.inf, np.nan])
    for got in (np.array([1.0, -np.inf, np.nan]), np.array([1.0, np.inf, np.inf]), np.array([1.0, np.nan, np.nan])):
        c = cmp.compare(got, ref)
        assert not c.passed and c.nonfinite_side == "both" and "different values" in c.note, (got, c.note)


def test_the_same_nonfinite_at_the_same_places_passes_and_says_so():
    ref = np.array([[1.0, np.nan], [np.inf, -np.inf]])
    c = cmp.compare(ref.copy(), ref)
    assert c.passed and c.note == "3 NaN/Inf on both sides at the same places" and c.nonfinite == 0
    got = ref.copy()
    got[0, 0] = 1.5                            # the finite rest is still judged
    c = cmp.compare(got, ref)
    assert not c.passed and c.worst_index == (0, 0) and c.max_abs_error == pytest.approx(0.5)


def test_shape_mismatch_and_harmless_unit_dims():
    ref = np.ones((2, 3), np.float32)
    c = cmp.compare(np.ones((3, 2), np.float32), ref)
    assert not c.passed and "shape [3, 2] != reference [2, 3]" in c.note
    assert cmp.compare(np.ones((1, 2, 3), np.float32), ref).passed


def test_integers_exact_and_empty():
    ref = np.array([1, 2, 3], np.int64)
    assert cmp.compare(ref.copy(), ref).passed
    assert not cmp.compare(ref + np.array([0, 1, 0]), ref).passed
    empty = np.zeros((0, 4), np.float32)
    assert cmp.compare(empty, empty).passed


def test_float16_defaults_are_looser_and_overrides_apply():
    assert cmp.default_tolerance("float16").atol > cmp.default_tolerance("float32").atol
    tol = cmp.resolve_tolerance("boxes", np.float32, {"": 1e-3, "boxes": 5e-2}, {"scores": 1.0})
    assert tol == cmp.Tolerance(5e-2, 1e-4)
    assert cmp.resolve_tolerance("scores", np.float32, {"": 1e-3}, {"scores": 1.0}) == cmp.Tolerance(1e-3, 1.0)


def test_cosine_detects_sign_flip(rng):
    ref = rng.normal(size=50)
    c = cmp.compare(-ref, ref)
    assert c.cosine == pytest.approx(-1.0) and not c.passed
    json = c.to_json()
    assert json["worst_index"] is not None and json["shape"] == [50]


# -- one rule for every judge: parity, the op tolerances, the test helper ---------------
def _cases():
    """(name, got, ref, passes) under atol = rtol = 1e-5; ref spans small and large magnitudes."""
    ref = np.array([[600.0, 2.4, 0.5], [0.0, -3.0, 1e4]])
    allowed = 1e-5 * np.maximum(1.0, np.abs(ref))
    nan, inf = np.nan, np.inf
    cases = [("inside", ref + 0.9 * allowed, ref, True),
             ("small element past its own bound", ref + np.where(ref == 2.4, 1.1, 0.9) * allowed, ref, False),
             ("zero element past atol", ref + np.where(ref == 0, 1.1e-5, 0.0), ref, False)]
    for bad in (nan, inf, -inf):
        cases += [(f"{bad} in the result", np.where(ref == 0.5, bad, ref), ref, False),
                  (f"{bad} in the reference", ref, np.where(ref == 0.5, bad, ref), False),
                  (f"{bad} on both sides", np.where(ref == 0.5, bad, ref), np.where(ref == 0.5, bad, ref), True)]
    cases += [("nan against inf", np.where(ref == 0.5, nan, ref), np.where(ref == 0.5, inf, ref), False),
              ("inf against -inf", np.where(ref == 0.5, inf, ref), np.where(ref == 0.5, -inf, ref), False),
              ("nan elsewhere on each side", np.where(ref == 0.5, nan, ref), np.where(ref == 2.4, nan, ref), False)]
    return cases


@pytest.mark.parametrize("name, got, ref, passes", _cases(), ids=[c[0] for c in _cases()])
def test_every_judge_applies_the_same_rule(name, got, ref, passes):
    from bridge import ops
    from conftest import assert_close
    atol = ops.get("FusedLayerNorm").tolerance["float32"].atol
    assert atol == 1e-5
    assert cmp.compare(got, ref, cmp.Tolerance(atol, atol)).passed == passes
    assert (ops.Tolerance(atol).excess(got, ref) <= 1) == passes
    if passes:
        assert_close("FusedLayerNorm", got, ref)
    else:
        with pytest.raises(AssertionError, match=r"FusedLayerNorm .*(exceeds|NaN|Inf)"):
            assert_close("FusedLayerNorm", got, ref)


def test_test_helper_names_the_nonfinite_element_and_side():
    from conftest import assert_close
    ref = np.ones((2, 3))
    ref[1, 2] = np.nan
    with pytest.raises(AssertionError, match=r"NaN at \[1,2\] in the reference"):
        assert_close("YoloDecode", np.ones((2, 3)), ref, what="boxes")


# -- inputs --------------------------------------------------------------------
def test_generated_inputs_have_dtype_range_and_vocabulary():
    specs = [TensorInfo("image", (None, 5, 7, 3), "float32"), TensorInfo("ids", (None, 9), "int32", high=30),
             TensorInfo("mask", (None, 9), "int64")]
    shapes = {s.name: s.concrete(2) for s in specs}
    a = inputs_mod.generate(specs, shapes, seed=3)
    assert a["image"].shape == (2, 5, 7, 3) and a["image"].dtype == np.float32
    assert 0 <= a["image"].min() and a["image"].max() <= 1 and np.count_nonzero(a["image"]) == a["image"].size
    assert a["ids"].dtype == np.int32 and a["ids"].max() < 30 and a["ids"].max() > 2
    assert set(np.unique(a["mask"])) <= {0, 1}
    b = inputs_mod.generate(specs, shapes, seed=3)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    c = inputs_mod.generate(specs, shapes, seed=4)
    assert not np.array_equal(a["image"], c["image"])


def test_unknown_dims_take_the_sample():
    """A dim the model leaves open is filled for one run: batch, an image's side
    and channels (NHWC, or NCHW with a fixed channel count), any other a length."""
    from bridge.modelsource import SampleDims
    assert TensorInfo("tokens", (None, None), "int32").concrete(1) == (1, 16)
    assert TensorInfo("tokens", (None, None), "int32").concrete(3, SampleDims(length=7)) == (3, 7)
    assert TensorInfo("image", (None, None, None, 3), "float32").concrete(1) == (1, 32, 32, 3)
    assert TensorInfo("image", (None, None, None, None), "float32").concrete(2, SampleDims(side=5)) == (2, 5, 5, 3)
    assert TensorInfo("image", (None, 3, None, None), "float32").concrete(1) == (1, 3, 32, 32)
    assert TensorInfo("feats", (None, None, 8), "float32").concrete(1, SampleDims(length=9)) == (1, 9, 8)
    assert TensorInfo("fixed", (2, 0, 5), "float32").concrete(1) == (2, 0, 5)  # given dims kept, empty too


def test_save_load_roundtrip_is_bit_identical(tmp_path, rng):
    arrays = {"x": rng.normal(size=(2, 3)).astype(np.float32), "ids": np.arange(5, dtype=np.int32)}
    path = tmp_path / "in.npz"
    inputs_mod.save(str(path), arrays)
    back = inputs_mod.load(str(path))
    assert set(back) == set(arrays) and all(np.array_equal(back[k], arrays[k]) and back[k].dtype == arrays[k].dtype
                                            for k in arrays)
    assert [p.name for p in tmp_path.iterdir()] == ["in.npz"]  # no temp file left behind


def test_loaded_inputs_are_checked(tmp_path):
    specs = [TensorInfo("x", (None, 3), "float32")]
    with pytest.raises(InputError, match=r"--load-inputs: no array for input 'x'; it has \['y'\]"):
        inputs_mod.check(specs, {"y": np.ones((1, 3), np.float32)}, "--load-inputs")
    with pytest.raises(InputError, match=r"input 'x' has shape \[1, 4\], the model wants \[\?,3\]"):
        inputs_mod.check(specs, {"x": np.ones((1, 4), np.float32)}, "--load-inputs")
    with pytest.raises(InputError, match=r"input 'x' has dtype int64, the model wants float32"):
        inputs_mod.check(specs, {"x": np.ones((1, 3), np.int64)}, "--load-inputs")
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not a zip")
    with pytest.raises(InputError, match="is not a readable .npz file"):
        inputs_mod.load(str(junk))
    with pytest.raises(InputError, match="no such file"):
        inputs_mod.load(str(tmp_path / "missing.npz"))


# -- outputs produced elsewhere ---------------------------------------------------
def _reference(rng):
    return {"boxes": rng.normal(size=(1, 12, 4)).astype(np.float32),
            "scores": rng.uniform(size=(1, 12)).astype(np.float32)}


def test_load_outputs_npz_by_name_and_position(tmp_path, rng):
    ref = _reference(rng)
    inputs_mod.save(str(tmp_path / "named.npz"), ref)
    got = loaded.load_outputs(str(tmp_path / "named.npz"), ref, "--load-outputs ge")
    assert all(np.array_equal(got[k], ref[k]) for k in ref)
    np.savez(tmp_path / "pos.npz", ref["boxes"], ref["scores"])
    got = loaded.load_outputs(str(tmp_path / "pos.npz"), ref, "--load-outputs ge")
    assert np.array_equal(got["scores"], ref["scores"])
    np.savez(tmp_path / "wrong.npz", other=ref["boxes"])
    with pytest.raises(InputError, match=r"has arrays \['other'\], expected the outputs \['boxes', 'scores'\]"):
        loaded.load_outputs(str(tmp_path / "wrong.npz"), ref, "--load-outputs ge")


def test_load_outputs_msame_bins(tmp_path, rng):
    ref = _reference(rng)
    folder = tmp_path / "msame"
    folder.mkdir()
    # msame numbers the files; sorting must be numeric, and float16 is recognised by size
    ref["boxes"].tofile(folder / "model_output_0.bin")
    ref["scores"].astype(np.float16).tofile(folder / "model_output_1.bin")
    got = loaded.load_outputs(str(folder), ref, "--load-outputs ge")
    assert np.array_equal(got["boxes"], ref["boxes"])
    assert got["scores"].dtype == np.float16 and got["scores"].shape == (1, 12)
    assert cmp.compare(got["scores"], ref["scores"], cmp.default_tolerance("float16")).passed
    (folder / "model_output_1.bin").write_bytes(b"\0" * 7)
    with pytest.raises(InputError, match=r"model_output_1.bin has 7 bytes; output 'scores' \[1, 12\] needs 48 bytes"):
        loaded.load_outputs(str(folder), ref, "--load-outputs ge")
    os.unlink(folder / "model_output_1.bin")
    with pytest.raises(InputError, match=r"has 1 .bin files \(model_output_0.bin\), the model has 2 outputs"):
        loaded.load_outputs(str(folder), ref, "--load-outputs ge")


def test_parse_load_outputs(tmp_path):
    f = tmp_path / "o.npz"
    np.savez(f, a=np.ones(1))
    assert loaded.parse_load_outputs([f"ge={f}"]) == [("ge", str(f))]
    with pytest.raises(InputError, match="expected RUNTIME=FILE"):
        loaded.parse_load_outputs([str(f)])
    with pytest.raises(InputError, match="--load-outputs ge: no such file or folder"):
        loaded.parse_load_outputs([f"ge={tmp_path / 'nope'}"])


def test_an_op_tolerance_and_a_model_tolerance_are_one_rule():
    """bridge.ops.Tolerance is the tolerance parity compares with: with an rtol
    looser than its atol, `excess` and `compare` give the same verdict."""
    from bridge import ops
    assert cmp.Tolerance is ops.Tolerance
    ref = np.random.default_rng(3).uniform(-50, 50, (7, 5))
    ref[0, 0] = 0.0
    tol = ops.Tolerance(1e-4, 0.03)
    allowed = np.maximum(1e-4 * np.maximum(1.0, np.abs(ref)), 0.03 * np.abs(ref))
    for scale, passes in ((0.9, True), (1.1, False)):
        got = ref + scale * allowed
        assert cmp.compare(got, ref, tol).passed == passes, scale
        assert (tol.excess(got, ref) <= 1) == passes, scale
