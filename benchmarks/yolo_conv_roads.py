"""YoloConvBnLeaky's roads side by side: the fused YOLOv3 (whole model) and
single YOLOv3 convolutions on each kernel setting, against TensorFlow's own
unfused Conv2D + BatchNormalization + LeakyReLU, in one run.

    python benchmarks/yolo_conv_roads.py [--sizes 416,608] [--roads default,eigen,...]
                                         [--repeat 9] [--no-layers] [--json]

A road is a set of environment variables the kernel reads when it is built
(tf_ops/yolo_conv_bn_leaky.cc): BRIDGE_CONV_IMPL (eigen | onednn),
BRIDGE_DNNL_WEIGHTS (cached | plain | blocked), BRIDGE_CONV_WINOGRAD (auto | off).
Each fused contender is a tf.function whose kernels were built under its road;
the unfused contenders are the Keras model eager, as a tf.function, and that
function frozen. Rounds alternate between all contenders (drift on a shared
machine hits them alike); times are medians. ratio = the unfused frozen time /
the contender's time (> 1: faster than TensorFlow's best).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from _common import alternating_medians, chosen, env, freeze, machine_line  # noqa: E402
from bridge import models, tf_ops  # noqa: E402
from bridge.converters import fuse  # noqa: E402
from bridge.table import render  # noqa: E402

ROADS = {
    "default": {},
    "eigen": {"BRIDGE_CONV_IMPL": "eigen"},
    "onednn-plain": {"BRIDGE_CONV_IMPL": "onednn", "BRIDGE_DNNL_WEIGHTS": "plain", "BRIDGE_CONV_WINOGRAD": "off"},
    "onednn-blocked": {"BRIDGE_CONV_IMPL": "onednn", "BRIDGE_DNNL_WEIGHTS": "blocked", "BRIDGE_CONV_WINOGRAD": "off"},
    "onednn-cached": {"BRIDGE_CONV_IMPL": "onednn", "BRIDGE_DNNL_WEIGHTS": "cached", "BRIDGE_CONV_WINOGRAD": "off"},
    "onednn-winograd": {"BRIDGE_CONV_IMPL": "onednn", "BRIDGE_DNNL_WEIGHTS": "cached", "BRIDGE_CONV_WINOGRAD": "auto"},
}
_VARS = sorted({k for env in ROADS.values() for k in env})
LAYERS = [  # (input, Cout, kernel, stride): the four shapes of benchmarks/tf_ops.py, plus Winograd's two
    ((1, 416, 416, 32), 64, 3, 2),
    ((1, 104, 104, 128), 128, 3, 1),
    ((1, 13, 13, 512), 1024, 3, 1),
    ((1, 52, 52, 256), 128, 1, 1),
    ((1, 52, 52, 128), 256, 3, 1),
    ((1, 26, 26, 256), 512, 3, 1),
]


def built_on(road, fn, *args):
    """`fn(*args)` once with the road's variables set, so the kernels it builds
    keep that road; the environment is restored afterwards."""
    with env(ROADS[road], clear=_VARS):
        fn(*args)
    return lambda: fn(*args)


def _rows(what, times, rounds, load):
    base = times["unfused frozen"]
    return [{"what": what, "contender": k, "ms": v * 1e3, "ratio": base / v, "rounds": rounds, "load": load}
            for k, v in times.items()]


def bench_model(size, roads, repeat):
    unfused = models.build("yolov3", size)
    fused, _ = fuse(unfused)
    x = tf.constant(models.sample_inputs(unfused, batch=1))
    spec = tf.TensorSpec(x.shape, x.dtype)
    fns = {}
    for tag, model in (("unfused", unfused), ("fused", fused)):
        fn = tf.function(lambda t, m=model: m(t, training=False), autograph=False)
        if tag == "unfused":
            fns["unfused eager"] = lambda: unfused(x, training=False)
            fns["unfused function"] = lambda f=fn: f(x)
            fns["unfused frozen"] = lambda f=freeze(fn, spec): f(x)
        else:
            fns["fused eager"] = built_on("default", lambda: fused(x, training=False))
    for road in roads:
        fn = tf.function(lambda t: fused(t, training=False), autograph=False)
        fns[f"fused function [{road}]"] = built_on(road, fn, x)
    times, rounds = alternating_medians(fns, repeat)
    return _rows(f"yolov3-{size}", times, rounds, os.getloadavg()[0])


def bench_layer(rng, shape, cout, k, stride, roads, repeat):
    cin = shape[-1]
    x = tf.constant(rng.standard_normal(shape).astype(np.float32))
    filt = (rng.standard_normal((k, k, cin, cout)) / np.sqrt(k * k * cin)).astype(np.float32)
    vecs = [rng.normal(0, .1, cout), rng.uniform(.5, 1.5, cout), rng.normal(0, .1, cout), rng.normal(0, .1, cout),
            rng.uniform(.5, 2, cout)]
    params = [tf.Variable(filt)] + [tf.Variable(v.astype(np.float32)) for v in vecs]
    pad = dict(padding="EXPLICIT", explicit_paddings=[0, 0, 1, 0, 1, 0, 0, 0]) if stride == 2 else {}
    s = params[2] / tf.sqrt(params[5] + 1e-5)

    def unfused(t):  # Conv2D, BatchNorm arithmetic, LeakyReLU: what Keras 3 runs
        if stride == 2:
            t = tf.pad(t, [[0, 0], [1, 0], [1, 0], [0, 0]])
        z = tf.nn.conv2d(t, params[0], stride, "VALID" if stride == 2 else "SAME") + params[1]
        return tf.nn.leaky_relu((z - params[4]) * s + params[3], 0.1)

    spec = tf.TensorSpec(shape, tf.float32)
    fn = tf.function(unfused)
    fns = {"unfused eager": lambda: unfused(x), "unfused function": lambda: fn(x),
           "unfused frozen": lambda f=freeze(fn, spec): f(x)}
    for road in roads:
        op = tf.function(lambda t: tf_ops.yolo_conv_bn_leaky(t, *params, strides=[1, stride, stride, 1], **pad))
        fns[f"fused function [{road}]"] = built_on(road, op, x)
    times, rounds = alternating_medians(fns, repeat, warmup=2)
    label = f"{'x'.join(map(str, shape))}->{cout} {k}x{k}" + (f" s{stride}" if stride > 1 else "")
    return _rows(label, times, rounds, os.getloadavg()[0])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="416,608", help="YOLOv3 input sizes (empty: none)")
    p.add_argument("--roads", default="default,eigen,onednn-plain,onednn-cached",
                   help=f"comma-separated, of {', '.join(ROADS)}")
    p.add_argument("--repeat", type=int, default=9)
    p.add_argument("--no-layers", action="store_true", help="whole models only")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    roads = chosen(p, args.roads, list(ROADS))
    rows = []
    if not args.no_layers:
        rng = np.random.default_rng(0)
        for case in LAYERS:
            rows += bench_layer(rng, *case, roads, 2 * args.repeat)
    for size in [int(v) for v in args.sizes.split(",") if v.strip()]:
        rows += bench_model(size, roads, args.repeat)
    if args.json:
        print(json.dumps({"tensorflow": tf.__version__, "cpus": os.cpu_count(), "roads": ROADS, "rows": rows},
                         indent=1))
        return 0
    print(machine_line())
    print(render(["what", "contender", "ms", "frozen/this", "rounds", "load"],
                 [[r["what"], r["contender"], f"{r['ms']:.2f}", f"{r['ratio']:.2f}x", r["rounds"], f"{r['load']:.1f}"]
                  for r in rows]))
    print("\nfrozen/this = unfused frozen time / this time (> 1: faster than TensorFlow's frozen graph); medians of "
          "alternating rounds; load = the 1-minute load average when the case ended")
    return 0


if __name__ == "__main__":
    sys.exit(main())
