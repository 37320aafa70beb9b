"""benchmarks/onnx_layers.py reads onnxruntime's profiles right: a conv node's
shape, FLOPs and Winograd road from either layout (bridge's NHWC/HWIO node,
onnxruntime's NCHW/OIHW Conv), the first run left out, rows matched across the
two graphs, and the bound's arithmetic (checked against hand-computed values)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import onnx_layers  # noqa: E402


def _node(op, x, w, y, dur, ts):
    return {"cat": "Node", "name": f"n{ts}_kernel_time", "dur": dur, "ts": ts,
            "args": {"op_name": op, "input_type_shape": [{"float": x}, {"float": w}],
                     "output_type_shape": [{"float": y}]}}


def _run(ts, dur):
    return {"cat": "Session", "name": "model_run", "ts": ts, "dur": dur}


def test_conv_layer_reads_both_layouts():
    ours = onnx_layers.conv_layer(_node("YoloConvBnLeaky", [1, 52, 52, 128], [3, 3, 128, 256],
                                        [1, 52, 52, 256], 10, 0))
    theirs = onnx_layers.conv_layer(_node("Conv", [1, 128, 52, 52], [256, 128, 3, 3], [1, 256, 52, 52], 10, 0))
    assert ours[0] == theirs[0]
    assert ours[1] == pytest.approx(2 * 52 * 52 * 256 * 128 * 9 / 1e9)
    assert ours[2] == "winograd" and ours[3] == "52x52 128->256 3x3"
    s2 = onnx_layers.conv_layer(_node("YoloConvBnLeaky", [1, 416, 416, 32], [3, 3, 32, 64], [1, 208, 208, 64], 1, 0))
    assert s2[2] == "direct" and s2[3].endswith("s2")
    # onnxruntime pads 255 output channels to its block of 16: the rows still match
    head = onnx_layers.conv_layer(_node("YoloConvBnLeaky", [1, 13, 13, 1024], [1, 1, 1024, 255], [1, 13, 13, 255], 1, 0))
    nchwc = onnx_layers.conv_layer(_node("Conv", [1, 1024, 13, 13], [256, 1024, 1, 1], [1, 256, 13, 13], 1, 0))
    assert head[0] == nchwc[0]
    assert onnx_layers.conv_layer(_node("Add", [1, 2], [1, 2], [1, 2], 1, 0)) is None


@pytest.mark.parametrize("shape,expected", [
    ((3, 3, 1, 128, 64, 13, 13), True),
    ((3, 3, 1, 64, 128, 104, 104), False),     # too few input channels
    ((3, 3, 2, 256, 512, 26, 26), False),      # stride 2
    ((1, 1, 1, 512, 256, 26, 26), False),
    ((3, 3, 1, 512, 1024, 9, 9), False),       # too few output tiles
])
def test_wino_rule_matches_conv_core(shape, expected):
    assert onnx_layers.wino_eligible(*shape) is expected
    # the rule is conv_core.h's: its numbers appear there
    core = (Path(__file__).resolve().parents[1] / "bridge" / "kernels" / "conv_core.h").read_text()
    assert "g.cin >= 128" in core and "g.cout >= 64" in core and "g.oh * g.ow >= 100" in core


def test_profile_leaves_out_the_first_run(tmp_path):
    conv = ([1, 26, 26, 256], [3, 3, 256, 512], [1, 26, 26, 512])
    events = [_run(0, 100), _node("YoloConvBnLeaky", *conv, 90, 5),          # the first run: packs filters
              _run(200, 30), _node("YoloConvBnLeaky", *conv, 20, 205), _node("Add", [1], [1], [1], 4, 230),
              _run(300, 30), _node("YoloConvBnLeaky", *conv, 24, 305), _node("Add", [1], [1], [1], 6, 330)]
    path = tmp_path / "p.json"
    path.write_text(json.dumps(events))
    got = onnx_layers.profile_layers(str(path))
    assert got["runs"] == 2
    assert got["other_us"] == pytest.approx(5.0)
    (row,) = got["layers"].values()
    assert row[0] == pytest.approx(22.0) and row[1] == 1


def test_summary_arithmetic():
    key_d, key_w = (3, 3, 2, 32, 64, 208, 208), (3, 3, 1, 256, 512, 26, 26)
    profiles = {
        "bridge": {"runs": 1, "other_us": 10_000.0,
                   "layers": {key_d: [30_000.0, 1, 1.5, "direct", "d"], key_w: [50_000.0, 2, 4.0, "winograd", "w"]}},
        "tf2onnx": {"runs": 1, "other_us": 12_000.0,
                    "layers": {key_d: [25_000.0, 1, 1.5, "direct", "d"], key_w: [75_000.0, 2, 4.0, "winograd", "w"]}},
    }
    times = {"bridge": 0.090, "tf2onnx": 0.117}

    class Args:
        size, width, threads = 416, 1.0, 2
    r = onnx_layers.summarize(profiles, times, 5, 150.0, 2.0, Args)
    assert r["ratio"] == pytest.approx(1.3)
    assert r["gflop"] == pytest.approx(1.5 + 8.0)
    assert r["conv_ms"] == {"bridge": pytest.approx(80.0), "tf2onnx": pytest.approx(100.0)}
    # 1.3x: the step in 90 ms; other ops 10 ms: the convolutions in 80 ms
    assert r["need_conv_ms"] == pytest.approx(80.0)
    assert r["need_conv_gflops"] == pytest.approx(9.5 / 0.080)
    assert r["by_road"]["winograd"] == {"gflop": 8.0, "bridge_ms": 50.0, "tf2onnx_ms": 75.0}
    assert r["winograd_need_ms"] == pytest.approx(80.0 - 25.0)
    assert r["winograd_rows"] == 2
