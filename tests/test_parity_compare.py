"""The parity comparison rule, inputs, saved/loaded arrays and msame .bin outputs
(no TensorFlow needed)."""
from __future__ import annotations

import os

import numpy as np
import pytest

from bridge.parity import compare as cmp
from bridge.parity import inputs as inputs_mod
from bridge.parity import loaded
from bridge.parity.inputs import InputError, InputSpec


@pytest.mark.parametrize("shape", [(7,), (1, 1), (3, 5, 2), (2, 13, 13, 9)])
def test_numbers_against_numpy(rng, shape):
    ref = rng.normal(size=shape).astype(np.float32) * 3
    got = ref + rng.normal(size=shape).astype(np.float32) * 1e-6
    c = cmp.compare(got, ref)
    diff = np.abs(got.astype(np.float64) - ref.astype(np.float64))
    assert c.passed and c.failing == 0
    assert c.max_abs_error == pytest.approx(diff.max())
    assert c.mean_abs_error == pytest.approx(diff.mean())
    assert c.max_rel_error == pytest.approx(np.max(diff / np.abs(ref.astype(np.float64))))
    assert c.cosine == pytest.approx(1.0, abs=1e-9)
    assert c.atol_effective == pytest.approx(1e-4 * max(1.0, float(np.abs(ref).max())))


def test_element_fails_only_beyond_both_bounds():
    ref = np.array([1000.0, 1.0, 0.0, -2.0], np.float32)
    tol = cmp.Tolerance(1e-4, 1e-4)          # atol_eff = 0.1 (scaled by max|ref| = 1000)
    # 0.05 everywhere: inside atol_eff; 0.15 on 1000: beyond atol_eff and beyond rtol*|ref| = 0.1
    got = ref + np.array([0.05, 0.05, 0.05, 0.05], np.float32)
    assert cmp.compare(got, ref, tol).passed
    got = ref + np.array([0.15, 0, 0, 0], np.float32)
    c = cmp.compare(got, ref, tol)
    assert not c.passed and c.failing == 1 and c.worst_index == (0,)
    # a generous rtol alone lets the large element through
    assert cmp.compare(got, ref, cmp.Tolerance(1e-4, 1e-3)).passed
    # beyond rtol but inside atol passes too
    got = ref + np.array([0, 0, 0.09, 0], np.float32)
    assert cmp.compare(got, ref, tol).passed


def test_worst_element_and_values(rng):
    ref = rng.uniform(1, 2, size=(4, 6))
    got = ref.copy()
    got[2, 3] += 0.5
    got[1, 1] += 0.01
    c = cmp.compare(got, ref)
    assert c.worst_index == (2, 3) and c.failing == 2
    assert c.worst_got == pytest.approx(got[2, 3]) and c.worst_ref == pytest.approx(ref[2, 3])


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nonfinite_where_reference_is_finite_fails(bad):
    ref = np.ones((3, 3), np.float32)
    got = ref.copy()
    got[1, 2] = bad
    c = cmp.compare(got, ref, cmp.Tolerance(1e9, 1e9))
    assert not c.passed and c.nonfinite == 1 and c.worst_index == (1, 2) and "NaN/Inf" in c.note


def test_nan_never_passes_even_against_nan():
    ref = np.array([1.0, np.nan])
    assert not cmp.compare(ref.copy(), ref).passed


def test_same_inf_passes():
    ref = np.array([1.0, np.inf, -np.inf])
    assert cmp.compare(ref.copy(), ref).passed
    assert not cmp.compare(np.array([1.0, -np.inf, -np.inf]), ref).passed


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
    assert cmp.Tolerance.for_dtype("float16").atol > cmp.Tolerance.for_dtype("float32").atol
    tol = cmp.resolve_tolerance("boxes", np.float32, {"": 1e-3, "boxes": 5e-2}, {"scores": 1.0})
    assert tol == cmp.Tolerance(5e-2, 1e-4)
    assert cmp.resolve_tolerance("scores", np.float32, {"": 1e-3}, {"scores": 1.0}) == cmp.Tolerance(1e-3, 1.0)


def test_cosine_detects_sign_flip(rng):
    ref = rng.normal(size=50)
    c = cmp.compare(-ref, ref)
    assert c.cosine == pytest.approx(-1.0) and not c.passed
    json = c.to_json()
    assert json["worst_index"] is not None and json["shape"] == [50]


# -- inputs --------------------------------------------------------------------
def test_generated_inputs_have_dtype_range_and_vocabulary():
    specs = [InputSpec("image", (None, 5, 7, 3), "float32"), InputSpec("ids", (None, 9), "int32", high=30),
             InputSpec("mask", (None, 9), "int64")]
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


def test_unknown_dims_need_input_shape():
    with pytest.raises(InputError, match=r"input tokens has unknown dims \[\?,\?\]: give them with --input-shape tokens:1,D"):
        InputSpec("tokens", (None, None), "int32").concrete(1)


def test_save_load_roundtrip_is_bit_identical(tmp_path, rng):
    arrays = {"x": rng.normal(size=(2, 3)).astype(np.float32), "ids": np.arange(5, dtype=np.int32)}
    path = tmp_path / "in.npz"
    inputs_mod.save(str(path), arrays)
    back = inputs_mod.load(str(path))
    assert set(back) == set(arrays) and all(np.array_equal(back[k], arrays[k]) and back[k].dtype == arrays[k].dtype
                                            for k in arrays)
    assert [p.name for p in tmp_path.iterdir()] == ["in.npz"]  # no temp file left behind


def test_loaded_inputs_are_checked(tmp_path):
    specs = [InputSpec("x", (None, 3), "float32")]
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
    assert cmp.compare(got["scores"], ref["scores"], cmp.Tolerance.for_dtype("float16")).passed
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
