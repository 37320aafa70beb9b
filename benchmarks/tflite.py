"""LiteRT CPU speeds: bridge's custom-op kernels (the `--mode custom` export
with litert/ registered) against the lowered export (TFLite builtins,
XNNPack on), side by side in one run, per op and on YOLOv3-416.

    python benchmarks/tflite.py [--repeat 20] [--quick] [--only ops,yolov3-416,yolov3-layers] [--json] [--no-busy]

Both roads run on the same harness (LiteRT's CompiledModel, CPU accelerator:
XNNPack takes every builtin it supports; custom ops run on the interpreter's
thread, spreading their loops over an OpenMP team). Rounds alternate
between the roads; the table shows medians and lowered/custom (>1: custom is
faster), quiet and then with one core busy (another process spinning;
--no-busy: quiet only). XNNPack runs on as many threads as bridge's OpenMP
team (runtime.host_threads(); LiteRT's own default is one). yolov3-layers:
each distinct conv layer of YOLOv3-416 alone, and their total weighted by how
often the model has each (where the whole model's ratio comes from). The
whole model runs twice: `--mode custom` (every fused op custom) and `--mode
fastest` (pointwise convolutions as builtins), each against lowered. Goal (issue 17): YoloConvBnLeaky at least as fast as XNNPack's CONV_2D +
LEAKY_RELU, the other ops faster.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

from _common import alternating_medians, chosen, machine_line, one_core_busy, target_note
from bridge.table import render

TARGET = 1.0  # lowered/custom: every op's custom kernel at least as fast (issue 17), and the whole model


def _op_cases(rng, quick):
    """(op, label, fn, input specs, output names, feeds) for every built-in op the
    LiteRT kernels serve, at its LITERT_BENCH_SHAPES (its folder's bench.py), else at
    its large case-table rows. The first input is fed (normal values), the others
    are constants (uniform in [0.5, 1.5]: a variance or a scale stays positive)."""
    import tensorflow as tf
    from bridge import ops, tf_ops
    from bridge.litert import runtime
    served = runtime.served_ops()
    for spec in ops.all_specs():
        if not ops.is_builtin(spec):
            continue
        if served.get(spec.name, "not served") is not None:
            print(f"  {spec.name}: skipped ({served.get(spec.name, 'not served')})", file=sys.stderr)
            continue
        rows = getattr(ops.part(spec, "bench"), "LITERT_BENCH_SHAPES", None)
        if rows is None:
            rows = [("x".join(map(str, e.shapes[0])), e.shapes, e.attrs, i == 0)
                    for i, e in enumerate([e for e in spec.examples() if e.large] or spec.examples()[:1])]
        fn_op, name = getattr(tf_ops, spec.module), spec.inputs[0].name
        for label, shapes, attrs, in_quick in rows:
            if quick and not in_quick:
                continue
            consts = [rng.uniform(0.5, 1.5, s).astype(np.float32) for s in shapes[1:]]
            yield (spec.name, label, lambda x, c=consts, a=attrs: fn_op(x, *c, **a),
                   [tf.TensorSpec(shapes[0], tf.float32, name=name)], [o.name for o in spec.outputs],
                   {name: rng.standard_normal(shapes[0]).astype(np.float32)})


# YOLOv3-416's YoloConvBnLeaky layers: (input size, Cin, Cout, kernel, stride, how many), SAME padding
YOLOV3_LAYERS = [(416, 3, 32, 3, 1, 1), (416, 32, 64, 3, 2, 1), (208, 64, 32, 1, 1, 1), (208, 32, 64, 3, 1, 1),
                 (208, 64, 128, 3, 2, 1), (104, 128, 64, 1, 1, 2), (104, 64, 128, 3, 1, 2), (104, 128, 256, 3, 2, 1),
                 (52, 256, 128, 1, 1, 10), (52, 128, 256, 3, 1, 11), (52, 256, 512, 3, 2, 1), (26, 512, 256, 1, 1, 11),
                 (26, 256, 512, 3, 1, 11), (26, 512, 1024, 3, 2, 1), (13, 1024, 512, 1, 1, 7), (13, 512, 1024, 3, 1, 7),
                 (13, 512, 256, 1, 1, 1), (26, 768, 256, 1, 1, 1), (26, 256, 128, 1, 1, 1), (52, 384, 128, 1, 1, 1)]


def _layer_cases(rng):
    """(label, fn, input specs, output names, feeds, count) per YOLOV3_LAYERS row."""
    import tensorflow as tf
    from bridge import tf_ops
    for n, cin, cout, k, s, count in YOLOV3_LAYERS:
        consts = [rng.uniform(0.5, 1.5, (k, k, cin, cout)).astype(np.float32) * 0.1] + \
                 [rng.uniform(0.5, 1.5, cout).astype(np.float32) for _ in range(5)]
        yield (f"{n}x{n}x{cin}->{cout} k{k} s{s} x{count}",
               lambda x, c=consts, st=s: tf_ops.yolo_conv_bn_leaky(x, *c, strides=[1, st, st, 1], padding="SAME"),
               [tf.TensorSpec((1, n, n, cin), tf.float32, name="x")], ["y"],
               {"x": rng.standard_normal((1, n, n, cin)).astype(np.float32)}, count)


def _time(custom_data, lowered_data, feeds, repeat, busy):
    """(quiet medians, rounds, max relative difference, medians with one core busy or None)."""
    from bridge.litert import runtime
    custom = runtime.Model(custom_data, custom=True)
    lowered = runtime.Model(lowered_data, custom=False)
    got, ref = custom.run(feeds), lowered.run(feeds)
    err = max(float(np.max(np.abs(got[k].astype(np.float64) - ref[k]) / np.maximum(1, np.abs(ref[k]))))
              for k in ref if ref[k].size)
    fns = {"custom": lambda: custom.run(feeds), "lowered": lambda: lowered.run(feeds)}
    med, rounds = alternating_medians(fns, repeat, warmup=2)
    loaded = None
    if busy:
        with one_core_busy():
            loaded, _ = alternating_medians(fns, repeat, warmup=2)
    custom.close()
    lowered.close()
    return med, rounds, err, loaded


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="fewer shapes")
    parser.add_argument("--only", default="ops,yolov3-416", help="ops and/or yolov3-416")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--no-busy", action="store_true", help="quiet only: no second run with one core busy")
    args = parser.parse_args(argv)
    parts = chosen(parser, args.only, ["ops", "yolov3-416", "yolov3-layers"])
    from bridge.converters import export_tflite as ex
    from bridge.litert import runtime
    lib = runtime.library()
    rows = []
    rng = np.random.default_rng(0)
    if "ops" in parts:
        for op, case, fn, specs, names, feeds in _op_cases(rng, args.quick):
            data = {m: ex.convert(fn, specs, names, mode=m) for m in ("custom", "lowered")}
            rows.append((op, case, *_time(data["custom"], data["lowered"], feeds, args.repeat, not args.no_busy)))
    if "yolov3-layers" in parts:
        weighted = {"custom": 0.0, "lowered": 0.0}
        for label, fn, specs, names, feeds, count in _layer_cases(rng):
            data = {m: ex.convert(fn, specs, names, mode=m) for m in ("custom", "lowered")}
            med, rounds, err, loaded = _time(data["custom"], data["lowered"], feeds, args.repeat, False)
            rows.append(("YoloConvBnLeaky", label, med, rounds, err, loaded))
            for m in weighted:
                weighted[m] += count * med[m]
        rows.append(("yolov3-416 layers", "weighted by count", weighted, rounds, 0.0, None))
    if "yolov3-416" in parts:
        from bridge.parity import open_source
        from bridge.parity.runtimes.tflite import exported
        source = open_source("yolov3", config={"input_size": 416})
        try:
            data = {m: exported(source, m, "none") for m in ("custom", "lowered", "fastest")}
            feeds = {i.name: rng.uniform(0, 1, [1 if d is None or d < 0 else d for d in i.shape]).astype(np.float32)
                     for i in source.inputs}
        finally:
            source.close()
        rows.append(("yolov3-416", "whole model",
                     *_time(data["custom"], data["lowered"], feeds, max(3, args.repeat // 4), not args.no_busy)))
        # --mode fastest: pointwise convolutions as builtins (XNNPack), the rest bridge's kernels
        rows.append(("yolov3-416", "whole model, --mode fastest",
                     *_time(data["fastest"], data["lowered"], feeds, max(3, args.repeat // 4), not args.no_busy)))
    table = []
    for op, case, med, rounds, err, loaded in rows:
        ratio = med["lowered"] / med["custom"]
        row = {"op": op, "case": case, "custom ms": round(med["custom"] * 1e3, 3),
               "lowered+XNNPack ms": round(med["lowered"] * 1e3, 3), "lowered/custom": round(ratio, 2)}
        if loaded:
            row.update({"busy: custom ms": round(loaded["custom"] * 1e3, 3),
                        "busy: lowered ms": round(loaded["lowered"] * 1e3, 3),
                        "busy: lowered/custom": round(loaded["lowered"] / loaded["custom"], 2)})
        elif any(r[5] for r in rows):  # the layer sweep runs quiet only
            row.update({"busy: custom ms": "", "busy: lowered ms": "", "busy: lowered/custom": ""})
        row.update({"max rel diff": f"{err:.1e}", "rounds": rounds, "target": target_note(ratio, TARGET)})
        table.append(row)
    if args.json:
        print(json.dumps({"machine": machine_line(), "litert": runtime.litert_version(),
                          "omp_threads": os.environ.get("OMP_NUM_THREADS"), "rows": table}, indent=1))
    else:
        print(machine_line() + f"; ai-edge-litert {runtime.litert_version()}; kernels {lib.parent.name}")
        print(render(list(table[0]) if table else ["op"], [list(r.values()) for r in table], colour=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
