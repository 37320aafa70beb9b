"""Every op against every backend: a backend that one op has and another lacks is a hole."""
from __future__ import annotations

import json
import subprocess
import sys

from bridge import backends, ops


def test_no_op_lacks_a_backend_another_op_has():
    t = backends.table()
    assert set(t) == {s.name for s in ops.all_specs()}
    for op, row in t.items():
        assert set(row) == set(backends.COLUMNS), op
    assert backends.holes(t) == []


def test_core_backends_present_for_every_op():
    t = backends.table()
    for op, row in t.items():
        for column in ("tf_cpu", "gradient", "composite", "onnx_schema", "onnx_function", "tf2onnx", "ort_kernel"):
            assert row[column] == "yes", f"{op}: {backends.COLUMNS[column][0]} is {row[column]!r}"


def test_bridge_ops_json():
    r = subprocess.run([sys.executable, "-m", "bridge", "ops", "--json"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    data = json.loads(r.stdout)
    assert set(data["ops"]) == {s.name for s in ops.all_specs()}
    assert data["holes"] == []


def _full_table():
    return {s.name: {k: "yes" for k in backends.COLUMNS} for s in ops.all_specs() if ops.is_builtin(s)}


def test_a_backend_no_op_has_is_a_hole():
    """A column missing for every op (a layer that registers nothing) is a hole,
    not only an op that lacks what the others have; the on-request columns
    (GPU kernels, LiteRT custom kernels) are not, where their library is unbuilt."""
    assert backends.holes(_full_table()) == []
    t = _full_table()
    for row in t.values():
        row["tf2onnx"] = "no"
    assert backends.holes(t) == [f"tf2onnx handler: no op has it ({min(t)}: no)"]
    t = _full_table()
    for row in t.values():
        row["tf_gpu"] = row["tflite"] = "not built"
    assert backends.holes(t) == []
    t = _full_table()
    t[min(t)]["ort_kernel"] = "no"
    assert backends.holes(t) == [f"ORT kernel: {sorted(set(t) - {min(t)})} have it, {[min(t)]} do not"]


def test_a_layer_that_answers_no_for_every_op_shows_in_bridge_ops(monkeypatch):
    import bridge.ascend
    monkeypatch.setattr(bridge.ascend, "backend_status", lambda spec: {"ascend": "no plugin"})
    t = backends.table()
    assert any(h.startswith("Ascend plugin: no op has it") for h in backends.holes(t))
