"""A SavedModel of the unfused model against `bridge fuse`'s output, in
TensorFlow, side by side in one run (issue 24's speed claim: YOLOv3-416 >= 1.5x).

    python benchmarks/graph_fuse.py [--model yolov3] [--size 416] [--width 1.0] [--repeat 7] [--json]

The built-in model is built unfused (random weights, BatchNorm statistics
non-trivial), saved with `model.export` as its team would serve it, rewritten
by graph_fuse.fuse_graph and saved again (`bridge fuse` does exactly this); both
SavedModels are reloaded and their serving signatures timed in alternating
rounds at batch 1 (medians). The fused counts are printed beside the .keras
road's (converters.fuse on the same Keras model): they must be equal. The
outputs of the two are compared (max |diff|) before timing.
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
from _common import alternating_medians, machine_line, target_note  # noqa: E402

TARGET = 1.5


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="yolov3", help="a built-in model (default yolov3)")
    p.add_argument("--size", type=int, default=416, help="input size (default 416)")
    p.add_argument("--width", type=float, default=1.0, help="channel width multiplier (default 1.0: 62 M params)")
    p.add_argument("--repeat", type=int, default=7, help="timed rounds (default 7)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    args = p.parse_args(argv)

    import tensorflow as tf
    from bridge import models, tf_ops  # noqa: F401  the op library, before the fused SavedModel loads
    from bridge.converters import fuse
    from bridge.converters.graph_fuse import fuse_graph
    work = tempfile.mkdtemp(prefix="bridge-graph-fuse-")
    t0 = time.perf_counter()
    config = {"input_size": args.size} if args.model.startswith("yolo") else {}
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
    _, keras_report = fuse(model)
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
    medians, rounds = alternating_medians({"unfused": lambda: unfused(**{name: x}),
                                           "fused": lambda: fast(**{name: x})}, args.repeat)
    ratio = medians["unfused"] / medians["fused"]
    result = {"model": args.model, "size": args.size, "width": args.width, "rounds": rounds,
              "unfused_ms": medians["unfused"] * 1e3, "fused_ms": medians["fused"] * 1e3, "ratio": ratio,
              "max_abs_diff": diff, "fused_counts_graph_vs_keras": counts, "machine": machine_line()}
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(machine_line())
        print(f"{args.model}-{args.size} SavedModel, batch 1, {rounds} rounds: unfused {result['unfused_ms']:.1f} ms, "
              f"bridge fuse {result['fused_ms']:.1f} ms: {ratio:.2f}x ({target_note(ratio, TARGET)}); "
              f"outputs differ by {diff:.3g}")
    import shutil
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
