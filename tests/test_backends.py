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
