"""`bridge parity` on the built-in YOLO models at full width (slow: minutes on two
cores). Every road here is also covered quickly, at thin widths, by
tests/test_parity_ge.py (every default runtime, YOLOv3 and BERT) and
tests/test_parity_models.py, which CI runs; these show that the per-element
float32 default (1e-4 * max(1, |ref|)) holds where the most error accumulates.
The verdict is recomputed here from the arrays each runtime returned, against
the unfused Keras model called eagerly."""
from __future__ import annotations

import pytest

from bridge.parity import open_source, run_parity
from conftest import parity_arrays, rule_excess, unfused_outputs

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("model, config", [("yolov3", {"input_size": 128, "decode": True}),
                                           ("yolov3-tiny", {"input_size": 416, "decode": True})],
                         ids=["yolov3-128", "yolov3-tiny-416"])
def test_full_width_yolo_every_default_runtime_within_float32_default(model, config):
    source = open_source(model, config=dict(config))
    try:
        with parity_arrays() as seen:
            report = run_parity(None, source=source, seed=0)
        ref = unfused_outputs(source, source.sample_inputs(1, 0))
    finally:
        source.close()
    ran = [r for r in report.runtimes[1:] if r.status == "ok"]
    assert len(ran) >= 5, [(r.name, r.status, r.reason) for r in report.runtimes]
    for row in ran:
        for name, r in ref.items():
            excess = rule_excess(seen[row.name][name].reshape(r.shape), r, 1e-4, 1e-4)
            assert excess <= 1 and row.outputs[name].passed, (row.name, name, excess)
    assert report.passed, report.to_json()
