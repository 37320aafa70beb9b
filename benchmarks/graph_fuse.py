"""A SavedModel of the unfused model against `bridge fuse`'s output, in
TensorFlow, side by side in one run (issue 24's speed claim: YOLOv3-416 >= 1.5x).

    python benchmarks/graph_fuse.py [--model yolov3] [--size 416] [--width 1.0] [--repeat 7] [--no-decode] [--json]

The built-in model is built unfused (random weights, BatchNorm statistics
non-trivial; a YOLO with its decode heads, as a detector is served, unless
--no-decode), saved with `model.export` as its team would serve it, rewritten
by graph_fuse.fuse_graph and saved again (`bridge fuse` does exactly this); both
SavedModels are reloaded and their serving signatures timed in alternating
rounds at batch 1, beside the .keras road (the Keras model unfused and fused by
converters.fuse, each a tf.function) in the same rounds. Each call is timed in
wall time (median and fastest) and in this process's CPU time (median): on a
machine other processes load, the wall median is mostly who else ran (oneDNN's
OpenMP team waits for a preempted thread at every barrier, TensorFlow's own pool
does not), while CPU time and the fastest round measure the work. The fused
counts are printed beside the .keras road's: they must be equal. The outputs of
the two SavedModels are compared (max |diff|) before timing.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import machine_line, target_note  # noqa: E402

TARGET = 1.5


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="yolov3", help="a built-in model (default yolov3)")
    p.add_argument("--size", type=int, default=416, help="input size (default 416)")
    p.add_argument("--width", type=float, default=1.0, help="channel width multiplier (default 1.0: 62 M params)")
    p.add_argument("--repeat", type=int, default=7, help="timed rounds (default 7)")
    p.add_argument("--no-decode", dest="decode", action="store_false",
                   help="a YOLO without its decode heads (the raw head outputs, as before YoloDecode fused in graphs)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    args = p.parse_args(argv)

    import tensorflow as tf
    from bridge import models, tf_ops  # noqa: F401  the op library, before the fused SavedModel loads
    from bridge.converters import fuse
    from bridge.converters.graph_fuse import fuse_graph
    work = tempfile.mkdtemp(prefix="bridge-graph-fuse-")
    t0 = time.perf_counter()
    config = {"input_size": args.size, "decode": args.decode} if args.model.startswith("yolo") else {}
    if args.width != 1.0:
        config["width"] = args.width
    model = models.build(args.model, **config)
    unfused_dir, fused_dir = os.path.join(work, "unfused"), os.path.join(work, "fused")
    model.export(unfused_dir, verbose=False)
    print(f"built and exported {args.model} in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    t0 = time.perf_counter()
    fused, report = fuse_graph(unfused_dir)
    fuse_s = time.perf_counter() - t0
    fused.save(fused_dir)
    keras_fused, keras_report = fuse(model)
    keys = [k for k in report.to_dict()["patterns"] if report.fused(k) or keras_report.fused(k)]
    counts = {k: (report.fused(k), keras_report.fused(k)) for k in keys}
    print(f"graph fusion in {fuse_s:.0f} s: " + ", ".join(f"{k} {g} (keras road {k_})" for k, (g, k_) in counts.items()),
          file=sys.stderr)

    unfused = tf.saved_model.load(unfused_dir).signatures["serving_default"]
    fast = tf.saved_model.load(fused_dir).signatures["serving_default"]
    (name, spec), = unfused.structured_input_signature[1].items()
    shape = [1 if d is None else d for d in spec.shape]
    x = tf.constant(np.random.default_rng(0).random(shape).astype("float32"))
    a, b = unfused(**{name: x}), fast(**{name: x})
    diff = max(float(np.max(np.abs(a[k].numpy() - b[k].numpy()))) for k in a)
    spec_ = tf.TensorSpec(shape, tf.float32)
    keras_unfused = tf.function(lambda t: model(t, training=False), input_signature=[spec_])
    keras_fast = tf.function(lambda t: keras_fused(t, training=False), input_signature=[spec_])
    times = _timed({"unfused": lambda: unfused(**{name: x}), "fused": lambda: fast(**{name: x}),
                    "keras unfused": lambda: keras_unfused(x), "keras fused": lambda: keras_fast(x)}, args.repeat)
    ratios = {m: times["unfused"][m] / times["fused"][m] for m in MEASURES}
    keras_ratios = {m: times["keras unfused"][m] / times["keras fused"][m] for m in MEASURES}
    ratio = ratios["cpu_median"]
    result = {"model": args.model, "size": args.size, "width": args.width, "decode": config.get("decode", False),
              "rounds": args.repeat,
              "ms": {k: {m: v * 1e3 for m, v in t.items()} for k, t in times.items()},
              "ratio": ratios, "keras_road_ratio": keras_ratios, "load_average": os.getloadavg()[0],
              "fuse_s": fuse_s, "max_abs_diff": diff, "fused_counts_graph_vs_keras": counts,
              "machine": machine_line()}
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(machine_line())
        decode = " with decode" if result["decode"] else ""
        print(f"{args.model}-{args.size} width {args.width}{decode}, batch 1, {args.repeat} rounds, load average "
              f"{result['load_average']:.1f}; outputs differ by {diff:.3g}")
        from bridge.table import render
        rows = [[k] + [f"{t[m] * 1e3:.1f}" for m in MEASURES] for k, t in times.items()]
        rows.append(["SavedModel ratio"] + [f"{ratios[m]:.2f}x" for m in MEASURES])
        rows.append([".keras road ratio"] + [f"{keras_ratios[m]:.2f}x" for m in MEASURES])
        print(render(["ms per call"] + list(MEASURES), rows))
        print(f"bridge fuse SavedModel vs model.export SavedModel, CPU time: {ratio:.2f}x "
              f"({target_note(ratio, TARGET)})")
    import shutil
    shutil.rmtree(work, ignore_errors=True)
    return 0


MEASURES = ("wall_median", "wall_fastest", "cpu_median")


def _timed(fns, repeat):
    """{contender: {measure: seconds per call}}: one untimed round, then `repeat`
    rounds calling each contender in turn (drift hits all alike)."""
    for fn in fns.values():
        fn()
    wall = {k: [] for k in fns}
    cpu = {k: [] for k in fns}
    for _ in range(repeat):
        for k, fn in fns.items():
            t, c = time.perf_counter(), time.process_time()
            fn()
            wall[k].append(time.perf_counter() - t)
            cpu[k].append(time.process_time() - c)
    return {k: {"wall_median": float(np.median(wall[k])), "wall_fastest": min(wall[k]),
                "cpu_median": float(np.median(cpu[k]))} for k in fns}


if __name__ == "__main__":
    sys.exit(main())
