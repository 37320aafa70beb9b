"""LiteRT CPU speeds: bridge's custom-op kernels (the `--mode custom` export
with litert/ registered) against the lowered export (TFLite builtins,
XNNPack on), side by side in one run, per op and on YOLOv3-416.

    python benchmarks/tflite.py [--repeat 20] [--quick] [--only ops,yolov3-416] [--json] [--no-busy]

Both roads run on the same harness (LiteRT's CompiledModel, CPU accelerator:
XNNPack takes every builtin it supports; custom ops run on the interpreter's
thread, spreading their loops over an OpenMP team). Rounds alternate
between the roads; the table shows medians and lowered/custom (>1: custom is
faster), quiet and then with one core busy (another process spinning;
--no-busy: quiet only). Goal (issue 17): YoloConvBnLeaky at least as fast as XNNPack's CONV_2D +
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
    parts = chosen(parser, args.only, ["ops", "yolov3-416"])
    from bridge.converters import export_tflite as ex
    from bridge.litert import runtime
    lib = runtime.library()
    rows = []
    rng = np.random.default_rng(0)
    if "ops" in parts:
        for op, case, fn, specs, names, feeds in _op_cases(rng, args.quick):
            data = {m: ex.convert(fn, specs, names, mode=m) for m in ("custom", "lowered")}
            rows.append((op, case, *_time(data["custom"], data["lowered"], feeds, args.repeat, not args.no_busy)))
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
        rows.append(("yolov3-416", "whole model",
                     *_time(data["custom"], data["lowered"], feeds, max(3, args.repeat // 4), not args.no_busy)))
    table = []
    for op, case, med, rounds, err, loaded in rows:
        ratio = med["lowered"] / med["custom"]
        row = {"op": op, "case": case, "custom ms": round(med["custom"] * 1e3, 3),
               "lowered+XNNPack ms": round(med["lowered"] * 1e3, 3), "lowered/custom": round(ratio, 2)}
        if loaded:
            row.update({"busy: custom ms": round(loaded["custom"] * 1e3, 3),
                        "busy: lowered ms": round(loaded["lowered"] * 1e3, 3),
                        "busy: lowered/custom": round(loaded["lowered"] / loaded["custom"], 2)})
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
