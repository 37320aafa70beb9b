"""Whole-model speeds: each built-in model fused (bridge.converters.fuse) against
the unfused Keras original, side by side in one run, batch 1.

    python benchmarks/models.py [--only yolov3-416,yolov3-608,bert-128] [--repeat 7] [--json]
                                [--width 1.0] [--bert-layers 4] [--busy]

Contenders per model: the unfused model eager, as a tf.function, and that function
frozen (weights as constants: what lets grappler/oneDNN fuse Conv+BiasAdd+LeakyRelu);
the fused model eager, as a tf.function, and frozen. Rounds alternate between all
contenders so drift on a shared machine hits them alike; times are medians.
ratio = the unfused contender's time / the fused tf.function's time (> 1: fused is
faster); the 'eager' comparison row uses the fused model eager. --busy times every
contender with one core held by another process (building, fusing and tracing
run before it starts).

Models: YOLOv3 (62.0 M parameters at width 1) at 416 and 608; a 4-layer BERT-base
encoder (hidden 768, 12 heads, intermediate 3072) at sequence 128.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

from _common import (BERT_BASE, alternating_medians, chosen, freeze, machine_line, one_core_busy,  # noqa: E402
                     target_note)
from bridge import models  # noqa: E402
from bridge.converters import fuse  # noqa: E402
from bridge.table import render  # noqa: E402

CASES = {
    "yolov3-416": ("yolov3", 416),
    "yolov3-608": ("yolov3", 608),
    "bert-128": ("bert", 128),
}
# (case, unfused contender) -> the target for unfused time / fused time
TARGETS = {
    ("yolov3-608", "eager"): 1.4,
    ("yolov3-608", "function"): 1.05,
    ("yolov3-608", "frozen"): 1.0,
    ("bert-128", "function"): 1.1,
}


def _function(model, feeds):
    """A tf.function over the model's inputs in order, and its frozen copy."""
    names = [t.name for t in model.inputs]
    specs = [tf.TensorSpec(t.shape, t.dtype) for t in model.inputs]

    def call(*xs):
        return model(list(xs) if len(xs) > 1 else xs[0], training=False)
    fn = tf.function(call, autograph=False)
    frozen = freeze(fn, *specs)
    args = [tf.constant(feeds[n]) for n in names]
    return (lambda: fn(*args)), (lambda: frozen(*args))


def _feeds(model, x):
    return x if isinstance(x, dict) else {model.inputs[0].name: x}


def _contenders(unfused, fused, x):
    feeds = _feeds(unfused, x)
    arg = x if isinstance(x, dict) else tf.constant(x)
    out = {}
    for tag, model in (("unfused", unfused), ("fused", fused)):
        fn, frozen = _function(model, feeds)
        out[(tag, "eager")] = lambda m=model: m(arg, training=False)
        out[(tag, "function")] = fn
        out[(tag, "frozen")] = frozen
    return out


def run_case(case, repeat, width, bert_layers, budget_s, busy=False):
    name, size = CASES[case]
    config = dict(width=width) if name == "yolov3" else dict(layers=bert_layers, **BERT_BASE)
    t0 = time.perf_counter()
    unfused = models.build(name, size, **config)
    fused, report = fuse(unfused)
    built = time.perf_counter() - t0
    x = models.sample_inputs(unfused, batch=1)
    contenders = _contenders(unfused, fused, x)
    for fn in contenders.values():  # trace and warm up before another process takes a core
        fn()
    with one_core_busy() if busy else contextlib.nullcontext():
        times, rounds = alternating_medians(contenders, repeat, warmup=0, budget_s=budget_s)
    rows = []
    for mode in ("eager", "function", "frozen"):
        ours = times[("fused", "eager" if mode == "eager" else "function")]
        base = times[("unfused", mode)]
        ratio = base / ours
        target = TARGETS.get((case, mode))
        rows.append({
            "model": case, "unfused": mode, "unfused_ms": base * 1e3,
            "fused": "eager" if mode == "eager" else "function", "fused_ms": ours * 1e3,
            "fused_frozen_ms": times[("fused", "frozen")] * 1e3, "ratio": ratio,
            "target": target_note(ratio, target),
            "rounds": rounds, "fused_blocks": report.total_fused,
            "config": {k: v for k, v in config.items()}, "build_and_fuse_s": built, "one_core_busy": busy,
        })
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", default=",".join(CASES), help=f"comma-separated cases of {list(CASES)}")
    p.add_argument("--repeat", type=int, default=7, help="rounds (each runs every contender once)")
    p.add_argument("--budget", type=float, default=90.0, help="seconds per model after which rounds stop (>= 3)")
    p.add_argument("--width", type=float, default=1.0, help="YOLOv3 channel multiplier (1.0: the real model)")
    p.add_argument("--bert-layers", type=int, default=4)
    p.add_argument("--busy", action="store_true",
                   help="time with one core busy (another process spinning), as a shared machine runs")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = p.parse_args(argv)
    cases = chosen(p, args.only, list(CASES))
    rows = []
    for case in cases:
        rows += run_case(case, args.repeat, args.width, args.bert_layers, args.budget, args.busy)
    if args.json:
        print(json.dumps({"threads": os.cpu_count(), "tensorflow": tf.__version__, "rows": rows}, indent=1))
        return 0
    table = [(r["model"], r["unfused"], f"{r['unfused_ms']:.1f}", r["fused"], f"{r['fused_ms']:.1f}",
              f"{r['fused_frozen_ms']:.1f}", f"{r['ratio']:.2f}x", r["target"], r["rounds"]) for r in rows]
    print(machine_line() + ("; one core busy while timing" if args.busy else ""))
    print(render(("model", "unfused", "ms", "fused", "ms", "fused frozen ms", "ratio", "target", "rounds"), table))
    print("ratio = unfused ms / fused ms (> 1: the fused model is faster); batch 1, medians")
    return 0


if __name__ == "__main__":
    sys.exit(main())
