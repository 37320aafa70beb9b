"""bridge parity's lowered TFLite row of a SavedModel converts what `bridge
export --to tflite` ships: the graph-fused graph with its fused ops called as
their composites, by the same conversion, which bridge's TFLite cache
(bridge.converters.tflite_cache) keeps for both. The SavedModel is the
detector of tests/graph_models.py saved with `model.export`; its TFLite
outputs are judged against numpy float64 from the model's own weights."""
from __future__ import annotations

import numpy as np
import pytest

import graph_models as gm_models
from conftest import parity_arrays
from test_graph_fuse import detector  # noqa: F401 - the fixture: (model, its model.export folder)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "tflite-cache"
    monkeypatch.setenv("BRIDGE_TFLITE_CACHE", str(folder))
    return folder


def _close(got, want, tol=2e-4):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape and np.isfinite(got).all()
    err = float(np.max(np.abs(got - want) / np.maximum(1.0, np.abs(want))))
    assert err <= tol, err


def _lowered(folder) -> bytes:
    from bridge.parity.runtimes import tflite
    from bridge.parity.source import open_source
    source = open_source(str(folder))
    source.input_shapes = {"image": (1, 8, 8, 3)}
    try:
        return tflite.exported(source, "lowered", "none")
    finally:
        source.close()


def test_the_lowered_row_converts_the_file_bridge_export_writes(detector, tmp_path, monkeypatch):
    """With the cache off, both convert: byte for byte the same file (the
    SavedModel's own unfused signature converts to another one)."""
    import bridge
    from bridge.converters import export_tflite
    from bridge.parity.source import open_source
    monkeypatch.setenv("BRIDGE_TFLITE_CACHE", "0")
    _, folder = detector
    result = bridge.export(str(folder), to="tflite", output=str(tmp_path / "d.tflite"))
    assert result.ok
    shipped = (tmp_path / "d.tflite").read_bytes()
    assert _lowered(folder) == shipped
    source = open_source(str(folder))
    unfused = export_tflite.convert(source.serving_signature(), source.inputs, source.output_names)
    assert unfused != shipped  # so the equality above says which graph was converted


def test_export_and_parity_share_one_cached_conversion(detector, cache, tmp_path):
    """The export converts and caches; parity's tflite row then reads that file
    (its row says so), runs it, and agrees with numpy float64."""
    import bridge
    model, folder = detector
    assert bridge.export(str(folder), to="tflite", output=str(tmp_path / "d.tflite")).ok
    shipped = (tmp_path / "d.tflite").read_bytes()
    files = list(cache.glob("*.tflite"))
    assert [f.read_bytes() for f in files] == [shipped]
    x = np.random.default_rng(5).random((3, 8, 8, 3)).astype("float32")
    with parity_arrays() as seen:
        report = bridge.parity(str(folder), runtimes="tflite", inputs={"image": x})
    row = {r.name: r for r in report.runtimes}["tflite"]
    assert row.status == "ok" and row.passed, row.reason
    assert ("from the graph-fused SavedModel (bridge fuse: conv_bn_leaky x2, layer_norm x1, zero_padding x1, "
            "the fused ops lowered to their composites") in row.description
    assert "read from bridge's TFLite cache" in row.description
    assert list(cache.glob("*.tflite")) == files  # nothing converted again
    (got,) = seen["tflite"].values()
    _close(got, gm_models.detector_reference(model, x))
    # and the export run again reads it back too
    again = bridge.export(str(folder), to="tflite", output=str(tmp_path / "e.tflite"))
    assert again.ok and any("read from bridge's TFLite cache" in line for line in again.summary)
    assert (tmp_path / "e.tflite").read_bytes() == shipped


def test_a_bug_in_the_fused_graph_fails_the_lowered_row(detector, cache):
    """Planted: the fused graph's LayerNorm gamma 10% off. The lowered row runs
    the fused graph, so it FAILs; the SavedModel itself (tf) is untouched. The
    cache is not consulted for a run with a planted artefact."""
    import tensorflow as tf
    from bridge.parity import run_parity
    from bridge.parity.source import open_source
    _, folder = detector
    source = open_source(str(folder))
    fused, report = source.fused_model()
    gd = tf.compat.v1.GraphDef()
    gd.CopyFrom(fused.graph_def)
    node = next(n for n in gd.node if n.op == "FusedLayerNorm")
    consts = {n.name: n for n in gd.node if n.op == "Const"}
    gamma = next(consts[i.split(":")[0].lstrip("^")] for i in node.input[1:] if i.split(":")[0] in consts)
    value = tf.make_ndarray(gamma.attr["value"].tensor)
    assert value.size > 1
    gamma.attr["value"].tensor.CopyFrom(tf.make_tensor_proto((value * 1.1).astype(value.dtype)))
    source.put("fused", (fused.replace(gd, "planted"), report))
    x = np.random.default_rng(6).random((2, 8, 8, 3)).astype("float32")
    try:
        result = run_parity(None, source=source, runtimes=["tf", "tflite"], inputs={"image": x})
    finally:
        source.close()
    row = {r.name: r for r in result.runtimes}["tflite"]
    assert row.status == "ok" and not row.passed, row.outputs
    assert "TFLite cache" not in row.description
    assert not list(cache.glob("*.tflite"))


# -- the cache's key and folder ------------------------------------------------------
def _tiny(seed=0):
    import keras
    x = inp = keras.Input((4, 4, 3), name="image")
    x = keras.layers.Conv2D(5, 3, padding="same", name="c")(x)
    model = keras.Model(inp, keras.layers.LeakyReLU(0.1, name="l")(x), name="tiny")
    rng = np.random.default_rng(seed)
    for w in model.weights:
        w.assign(rng.standard_normal(w.shape).astype("float32"))
    return model


def _key(model, **options):
    from bridge import modelsource
    from bridge.converters import tflite_cache
    args = dict(mode="lowered", quantize="none")
    args.update(options)
    return tflite_cache.key(modelsource.from_object(model), **args)


def test_the_key_is_the_models_bytes_and_the_options(cache):
    same = _key(_tiny())
    assert same is not None and _key(_tiny()) == same          # rebuilt alike: the same bytes
    bumped = _tiny()
    w = bumped.weights[0]
    v = np.asarray(w).copy()
    v.flat[7] = np.nextafter(v.flat[7], np.float32(np.inf))  # one weight one ulp up
    w.assign(v)
    from bridge.parity.inputs import TensorInfo
    others = [_key(bumped), _key(_tiny(seed=1)), _key(_tiny(), mode="custom"), _key(_tiny(), quantize="float16"),
              _key(_tiny(), fuse=False), _key(_tiny(), output_names=["other"]),
              _key(_tiny(), inputs=[TensorInfo("image", (1, 4, 4, 3), "float32")])]
    assert len({same, *others}) == len(others) + 1, others


def test_the_key_covers_bridges_code_and_a_custom_layers_source(cache, monkeypatch):
    from bridge.converters import tflite_cache
    same = _key(_tiny())
    monkeypatch.setattr(tflite_cache, "_CODE_DIGEST", "another bridge")
    assert _key(_tiny()) != same
    monkeypatch.setattr(tflite_cache, "_CODE_DIGEST", None)
    assert _key(_tiny()) == same
    monkeypatch.setattr(tflite_cache, "CODE_MODULES", tflite_cache.CODE_MODULES[:-1])
    monkeypatch.setattr(tflite_cache, "_CODE_DIGEST", None)
    assert _key(_tiny()) != same
    monkeypatch.setattr(tflite_cache, "_CODE_DIGEST", None)


def test_off_and_unkeyable_models_convert_every_time(cache, monkeypatch):
    from bridge.converters import tflite_cache
    calls = []

    def convert():
        calls.append(1)
        return b"TFL3-file"
    k = _key(_tiny())
    assert tflite_cache.converted(k, convert) == (b"TFL3-file", False)
    assert tflite_cache.converted(k, convert) == (b"TFL3-file", True) and len(calls) == 1
    assert [p.name for p in cache.iterdir()] == [f"{k}.tflite"]  # no temporary left beside it
    assert tflite_cache.converted(None, convert) == (b"TFL3-file", False) and len(calls) == 2
    monkeypatch.setenv("BRIDGE_TFLITE_CACHE", "0")
    assert _key(_tiny()) is None


def test_a_failed_write_leaves_no_file_and_the_folder_keeps_its_limit(cache, monkeypatch):
    import os
    from bridge.converters import tflite_cache
    keys = [f"{i:064x}" for i in range(4)]
    for i, k in enumerate(keys):
        tflite_cache.store(k, bytes(1000))
        os.utime(tflite_cache.path_of(k), (1000 + i, 1000 + i))
    tflite_cache.load(keys[0])  # used just now: kept
    tflite_cache.trim(limit=2500)
    assert sorted(p.stem for p in cache.glob("*.tflite")) == sorted([keys[0], keys[3]])

    def broken(path, data):
        raise OSError("disk full")
    monkeypatch.setattr(tflite_cache.atomic, "write_bytes", broken)
    tflite_cache.store("f" * 64, b"x")  # no error, no file
    assert not tflite_cache.path_of("f" * 64).exists()


# -- parity's ONNX exports -------------------------------------------------------------
def _onnx_run(batch):
    from bridge.parity import open_source, run_parity
    source = open_source("yolov3-tiny", config={"input_size": 64, "width": 0.125})
    try:
        report = run_parity(None, source=source, runtimes=["tf", "ort", "ge"], seed=0, batch=batch, per_layer=True)
        return report, [s.name for s in source.stages.stages], source.ge_opset_note
    finally:
        source.close()


def test_onnx_exports_are_kept_per_model_and_input_shapes(cache):
    """A second run reads both exports (com.bridge, GE's) from the cache and
    gives the same numbers, layers included; at another batch it converts again."""
    first, stages, note = _onnx_run(1)
    assert not any("from bridge's cache" in s for s in stages), stages
    assert sorted(p.suffix for p in cache.iterdir()) == [".onnx", ".onnx"]
    again, stages, note_again = _onnx_run(1)
    assert {"onnx-custom read from bridge's cache", "onnx-ge-raw read from bridge's cache"} <= set(stages), stages
    assert note_again == note and again.passed and first.passed
    assert [r.to_json()["outputs"] for r in again.runtimes] == [r.to_json()["outputs"] for r in first.runtimes]
    assert [r.to_json()["layers"] for r in again.runtimes] == [r.to_json()["layers"] for r in first.runtimes]
    two, stages, _ = _onnx_run(2)
    assert not any("from bridge's cache" in s for s in stages), stages
    rows = {r.name: r for r in two.runtimes}
    assert two.passed and rows["ort"].status == "ok" and rows["ge"].status == "ok"
    assert len(list(cache.iterdir())) == 4
