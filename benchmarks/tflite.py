"""LiteRT CPU speeds: bridge's custom-op kernels (the `--mode custom` export
with bridge/litert registered) against the lowered export (TFLite builtins,
XNNPack on), side by side in one run, per op and on YOLOv3-416.

    python benchmarks/tflite.py [--repeat 20] [--quick] [--only ops,yolov3-416] [--json]

Both roads run on the same harness (LiteRT's CompiledModel, CPU accelerator:
XNNPack takes every builtin it supports; custom ops run on the interpreter's
thread, bridge's convolution on oneDNN's OpenMP threads). Rounds alternate
between the roads; the table shows medians and lowered/custom (>1: custom is
faster). Goal (issue 17): YoloConvBnLeaky at least as fast as XNNPack's CONV_2D +
LEAKY_RELU, the other ops faster.
"""
from __future__ import annotations

import argparse
import json
import os

import numpy as np

from _common import alternating_medians, chosen, machine_line, target_note
from bridge.table import render

TARGETS = {"FusedLayerNorm": 1.0, "YoloConvBnLeaky": 1.0, "YoloDecode": 1.0, "yolov3-416": 1.0}


def _op_cases(rng, quick):
    import tensorflow as tf
    from bridge import tf_ops
    r = lambda *s: rng.standard_normal(s).astype(np.float32)
    spec = lambda n, s: tf.TensorSpec(s, tf.float32, name=n)
    h = 768
    g, b = r(h), r(h)
    yield ("FusedLayerNorm", "[4,128,768]", lambda x: tf_ops.fused_layer_norm(x, g, b, epsilon=1e-6),
           [spec("x", [4, 128, h])], ["y"], {"x": r(4, 128, h)})
    convs = [(52, 256, 512, 3, 1), (26, 512, 256, 1, 1)] + ([] if quick else [(104, 128, 256, 3, 1), (208, 64, 128, 3, 2)])
    for size, cin, cout, k, s in convs:
        p = [r(k, k, cin, cout) * 0.05, r(cout), r(cout), r(cout), r(cout), np.abs(r(cout)) + 0.5]
        yield ("YoloConvBnLeaky", f"{size}x{size}x{cin}->{cout} k{k} s{s}",
               lambda x, p=p, s=s: tf_ops.yolo_conv_bn_leaky(x, *p, strides=[1, s, s, 1], padding="SAME"),
               [spec("x", [1, size, size, cin])], ["y"], {"x": r(1, size, size, cin)})
    anchors = [116.0, 90.0, 156.0, 198.0, 373.0, 326.0]
    for size in [52] + ([] if quick else [13]):
        yield ("YoloDecode", f"[1,{size},{size},255]",
               lambda raw: tf_ops.yolo_decode(raw, anchors=anchors, num_classes=80, stride=8),
               [spec("raw", [1, size, size, 255])], ["boxes", "objectness", "class_probs"], {"raw": r(1, size, size, 255)})


def _time(custom_data, lowered_data, feeds, repeat):
    from bridge.litert import runtime
    custom = runtime.Model(custom_data, custom=True)
    lowered = runtime.Model(lowered_data, custom=False)
    got, ref = custom.run(feeds), lowered.run(feeds)
    err = max(float(np.max(np.abs(got[k].astype(np.float64) - ref[k]) / np.maximum(1, np.abs(ref[k]))))
              for k in ref if ref[k].size)
    med, rounds = alternating_medians({"custom": lambda: custom.run(feeds), "lowered": lambda: lowered.run(feeds)},
                                      repeat, warmup=2)
    custom.close()
    lowered.close()
    return med, rounds, err


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="fewer shapes")
    parser.add_argument("--only", default="ops,yolov3-416", help="ops and/or yolov3-416")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    parts = chosen(parser, args.only, ["ops", "yolov3-416"])
    from bridge.converters import export_tflite as ex
    from bridge.litert import runtime
    lib = runtime.library()
    rows = []
    rng = np.random.default_rng(0)
    if "ops" in parts:
        for op, case, fn, specs, names, feeds in _op_cases(rng, args.quick):
            data = {m: ex.convert(fn, specs, names, mode=m) for m in ("custom", "lowered")}
            med, rounds, err = _time(data["custom"], data["lowered"], feeds, args.repeat)
            rows.append((op, case, med, rounds, err))
    if "yolov3-416" in parts:
        from bridge.parity import open_source
        from bridge.parity.runtimes.tflite import exported
        source = open_source("yolov3", config={"input_size": 416})
        try:
            data = {m: exported(source, m, "none") for m in ("custom", "lowered")}
            feeds = {i.name: rng.uniform(0, 1, [1 if d is None or d < 0 else d for d in i.shape]).astype(np.float32)
                     for i in source.inputs}
        finally:
            source.close()
        med, rounds, err = _time(data["custom"], data["lowered"], feeds, max(3, args.repeat // 4))
        rows.append(("yolov3-416", "whole model", med, rounds, err))
    table = []
    for op, case, med, rounds, err in rows:
        ratio = med["lowered"] / med["custom"]
        table.append({"op": op, "case": case, "custom ms": round(med["custom"] * 1e3, 3),
                      "lowered+XNNPack ms": round(med["lowered"] * 1e3, 3), "lowered/custom": round(ratio, 2),
                      "max rel diff": f"{err:.1e}", "rounds": rounds, "target": target_note(ratio, TARGETS.get(op))})
    if args.json:
        print(json.dumps({"machine": machine_line(), "litert": runtime.litert_version(),
                          "omp_threads": os.environ.get("OMP_NUM_THREADS"), "rows": table}, indent=1))
    else:
        print(machine_line() + f"; ai-edge-litert {runtime.litert_version()}; kernels {lib.parent.name}")
        print(render(list(table[0]) if table else ["op"], [list(r.values()) for r in table], colour=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
