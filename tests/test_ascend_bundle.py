"""`bridge ascend check DIR/model.onnx` on a `bridge export --to ge` bundle uses
the bundle's own opp/ (no --plugins needed); the same model elsewhere, without
its opp/, has every custom node reported."""
from __future__ import annotations

import json
import shutil

import pytest

keras = pytest.importorskip("keras")

from bridge.cli import main  # noqa: E402


def test_check_uses_the_bundles_own_plugins(tmp_path, capsys):
    x = keras.Input((5, 12), name="x")
    model = keras.Model(x, keras.layers.Dense(3)(keras.layers.LayerNormalization()(x)))
    model.save(tmp_path / "ln.keras")
    bundle = tmp_path / "bundle"
    assert main(["export", str(tmp_path / "ln.keras"), "--to", "ge", "-o", str(bundle),
                 "--input-shape", "x:1,5,12"]) == 0
    capsys.readouterr()
    assert main(["ascend", "check", str(bundle / "model.onnx"), "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert found["clean"] and found["plugin_origin_types"] > 0
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(bundle / "model.onnx", alone / "model.onnx")
    assert main(["ascend", "check", str(alone / "model.onnx"), "--json"]) == 1
    found = json.loads(capsys.readouterr().out)
    assert not found["clean"] and any("FusedLayerNorm" in json.dumps(f) for f in found["findings"])
