"""TensorFlow op speeds: each fused op against what TensorFlow runs without it,
side by side in one run.

    python benchmarks/tf_ops.py [--repeat 20] [--json] [--quick] [--only fln,fln_grad,conv,composite] [--busy]

Rows (ratio = baseline time / fused time: > 1 means the fused op is faster):
  FusedLayerNorm   vs the native composition (moments + rsqrt) and vs Keras
                   LayerNormalization, eager and tf.function, at [4,128,768] and
                   [32,512,1024]; and its bytes/s against a memory copy of the same
                   bytes (numpy into a ready buffer, the better of one and two
                   threads; and TF's DeepCopy, which allocates its output as the op
                   does); ratio = the fraction of copy bandwidth reached.
  FusedLayerNorm forward + backward (a training step's share: the gradients of
                   sum(w * y) for x, gamma, beta) in tf.function: the fused forward
                   with the fused gradient op vs the same forward with the composite
                   gradient (standard TF ops), the native composition and Keras
                   LayerNormalization, both differentiated by TensorFlow.
  YoloConvBnLeaky  vs Keras Conv2D + BatchNormalization + LeakyReLU: eager,
                   tf.function, and frozen (weights as constants, which lets
                   grappler/oneDNN fuse Conv+BiasAdd+LeakyRelu) at YOLOv3 shapes.
  every other op    (YoloDecode; a new built-in op with no edit here) vs its
                   composite (standard TF ops), eager and tf.function, at its
                   TF_BENCH_SHAPES (the op folder's bench.py), else its large case-table rows.
Rounds alternate between the contenders so drift on a shared machine hits both
alike; times are medians. --busy: the whole run with one core held by another
process (the ops run on TensorFlow's own pool, as its kernels do).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import threading

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.python.framework import op_def_registry  # noqa: E402

from _common import chosen, freeze, median_pair, one_core_busy, target_note, machine_line  # noqa: E402
from bridge import ops as specs  # noqa: E402
from bridge import tf_ops  # noqa: E402
from bridge.table import render  # noqa: E402

# (what, target ratio) for the rows the issue sets a target on.
TARGETS = {
    ("FusedLayerNorm", "32x512x1024", "function", "native composition"): 3.0,
    ("FusedLayerNorm", "32x512x1024", "function", "memory copy"): 0.7,
    ("YoloDecode", "1x13x13x255", "function", "composite"): 3.0,
    ("YoloDecode", "1x52x52x255", "function", "composite"): 3.0,
}


def _row(op, shape, mode, versus, t_ours, t_base, note=""):
    ratio = t_base / t_ours
    target = TARGETS.get((op, shape, mode, versus))
    return {"op": op, "shape": shape, "mode": mode, "versus": versus, "ours_ms": t_ours * 1e3,
            "baseline_ms": t_base * 1e3, "ratio": ratio, "target": target_note(ratio, target), "note": note}


def _label(shape):
    return "x".join(map(str, shape))


# -- FusedLayerNorm -----------------------------------------------------------------

def _moments_layer_norm(x, gamma, beta, epsilon):
    mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
    return (x - mean) * tf.math.rsqrt(var + epsilon) * gamma + beta


def _copy_rows(label, ours, x, repeat):
    """The fused op's bytes/s against copies of the same bytes, timed alternately
    with it: numpy into a ready buffer (the better of one and two threads; numpy
    lets go of the GIL while copying), and TensorFlow's DeepCopy, which like the
    op allocates its output on every call."""
    src = x.numpy()
    dst = np.empty_like(src)
    flat_s, flat_d = src.reshape(-1), dst.reshape(-1)
    half = flat_s.size // 2

    def numpy_one():
        np.copyto(dst, src)

    def numpy_two():
        t = threading.Thread(target=np.copyto, args=(flat_d[:half], flat_s[:half]))
        t.start()
        np.copyto(flat_d[half:], flat_s[half:])
        t.join()

    deep_copy = tf.function(lambda t: tf.raw_ops.DeepCopy(x=t))
    moved = 2 * src.nbytes  # x read once, y written once
    rows = []
    t1 = median_pair(lambda: ours(x), numpy_one, repeat)
    t2 = median_pair(lambda: ours(x), numpy_two, repeat)
    t_ours, t_copy = min(t1[0], t2[0]), min(t1[1], t2[1])
    for versus, (t_ours, t_copy) in (("memory copy", (t_ours, t_copy)),
                                     ("tf DeepCopy", median_pair(lambda: ours(x), lambda: deep_copy(x), repeat))):
        rows.append(_row("FusedLayerNorm", label, "function", versus, t_ours, t_copy,
                         f"{moved / t_ours / 1e9:.1f} GB/s vs {moved / t_copy / 1e9:.1f} GB/s"))
    return rows


LN_SHAPES = [(4, 128, 768), (32, 512, 1024)]


def _layer_norm_case(rng, shape, eps, make):
    """x, gamma and beta (made by `make`: tf.Variable or tf.constant) and a Keras
    LayerNormalization holding the same gamma and beta."""
    h = shape[-1]
    x = tf.constant(rng.standard_normal(shape).astype(np.float32))
    gamma = make(rng.uniform(0.5, 1.5, h).astype(np.float32))
    beta = make(rng.uniform(-0.5, 0.5, h).astype(np.float32))
    keras_ln = tf.keras.layers.LayerNormalization(epsilon=eps)
    keras_ln.build(shape)
    keras_ln.set_weights([gamma.numpy(), beta.numpy()])
    return x, gamma, beta, keras_ln


def bench_layer_norm(rng, repeat, quick):
    spec = specs.get("FusedLayerNorm")
    eps = spec.attr("epsilon").default
    rows = []
    for shape in LN_SHAPES[:1] if quick else LN_SHAPES:
        x, gamma, beta, keras_ln = _layer_norm_case(rng, shape, eps, tf.Variable)
        fused = lambda x: tf_ops.fused_layer_norm(x, gamma, beta, epsilon=eps)
        native = lambda x: _moments_layer_norm(x, gamma, beta, eps)
        keras = lambda x: keras_ln(x)
        # The three must agree before their speeds mean anything.
        ref = spec.reference(x.numpy(), gamma.numpy(), beta.numpy(), epsilon=eps)
        for fn in (fused, native, keras):
            assert spec.tolerance["float32"].excess(fn(x).numpy(), ref) <= 10, "layer norms disagree"
        label = _label(shape)
        for mode in ("eager", "function"):
            wrap = (lambda f: f) if mode == "eager" else tf.function
            ours = wrap(fused)
            for versus, base in (("native composition", wrap(native)), ("Keras LayerNormalization", wrap(keras))):
                rows.append(_row("FusedLayerNorm", label, mode, versus, *median_pair(lambda: ours(x), lambda: base(x),
                                                                                      repeat)))
            if mode == "function":
                rows.extend(_copy_rows(label, ours, x, repeat))
    return rows


def bench_layer_norm_grad(rng, repeat, quick):
    from bridge.ops.fused_layer_norm import tf_op as fused_layer_norm_op
    spec = specs.get("FusedLayerNorm")
    eps = spec.attr("epsilon").default
    rows = []
    for shape in LN_SHAPES[:1] if quick else LN_SHAPES:
        x, gamma, beta, keras_ln = _layer_norm_case(rng, shape, eps, tf.constant)
        w = tf.constant(rng.standard_normal(shape).astype(np.float32))

        @tf.custom_gradient
        def fused_composite_grad(x, gamma, beta):
            def grad(dy):
                return fused_layer_norm_op._composite_gradient(dy, x, gamma, eps)
            return tf_ops.fused_layer_norm(x, gamma, beta, epsilon=eps), grad

        def step(layer_norm):
            @tf.function
            def run(x, gamma, beta):
                with tf.GradientTape() as tape:
                    tape.watch([x, gamma, beta])
                    loss = tf.reduce_sum(w * layer_norm(x, gamma, beta))
                return tape.gradient(loss, [x, gamma, beta])
            return lambda: run(x, gamma, beta)

        def keras_step():
            @tf.function
            def run(x):
                with tf.GradientTape() as tape:
                    tape.watch(x)
                    loss = tf.reduce_sum(w * keras_ln(x))
                return tape.gradient(loss, [x] + keras_ln.trainable_variables)
            return lambda: run(x)

        ours = step(lambda x, g, b: tf_ops.fused_layer_norm(x, g, b, epsilon=eps))
        # The four must agree before their speeds mean anything.
        want = ours()
        for other in (step(fused_composite_grad), step(lambda x, g, b: _moments_layer_norm(x, g, b, eps)),
                      keras_step()):
            for a, b in zip(want, other()):
                assert np.allclose(a.numpy(), b.numpy(), rtol=1e-3, atol=1e-3 * float(np.abs(b.numpy()).max())), \
                    "layer-norm gradients disagree"
        label = _label(shape)
        for versus, base in (("composite gradient", step(fused_composite_grad)),
                             ("native composition", step(lambda x, g, b: _moments_layer_norm(x, g, b, eps))),
                             ("Keras LayerNormalization", keras_step())):
            rows.append(_row("FusedLayerNorm fwd+bwd", label, "function", versus, *median_pair(ours, base, repeat)))
    return rows


# -- YoloConvBnLeaky ----------------------------------------------------------------

CONV_CASES = [  # input, Cout, kernel, stride; stride 2 written as Keras YOLO ports do
    ((1, 416, 416, 32), 64, 3, 2),
    ((1, 104, 104, 128), 128, 3, 1),
    ((1, 13, 13, 512), 1024, 3, 1),
    ((1, 52, 52, 256), 128, 1, 1),
]


def _conv_missing():
    if op_def_registry.get("YoloConvBnLeaky") is None:
        return "YoloConvBnLeaky is not registered by the op library"
    try:
        tf_ops.yolo_conv_bn_leaky(np.ones((1, 3, 3, 1), np.float32), np.ones((1, 1, 1, 1), np.float32),
                                  *[np.ones(1, np.float32)] * 5)
    except Exception as e:  # e.g. a placeholder wrapper
        return f"YoloConvBnLeaky does not run: {type(e).__name__}: {e}"[:120]
    return None


def _keras_block(shape, cout, k, stride, weights):
    filt, bias, bn = weights
    inp = tf.keras.Input(shape[1:], batch_size=shape[0])
    y = inp
    if stride == 2:
        y = tf.keras.layers.ZeroPadding2D(((1, 0), (1, 0)))(y)
    conv = tf.keras.layers.Conv2D(cout, k, strides=stride, padding="valid" if stride == 2 else "same")
    norm = tf.keras.layers.BatchNormalization(epsilon=specs.get("YoloConvBnLeaky").attr("epsilon").default)
    y = tf.keras.layers.LeakyReLU(negative_slope=specs.get("YoloConvBnLeaky").attr("alpha").default)(norm(conv(y)))
    model = tf.keras.Model(inp, y)
    conv.set_weights([filt, bias])
    norm.set_weights(bn)
    return model


def bench_conv(rng, repeat, quick):
    missing = _conv_missing()
    rows = []
    for shape, cout, k, stride in CONV_CASES[:2] if quick else CONV_CASES:
        label = f"{_label(shape)}->{cout} {k}x{k}" + (f" s{stride}" if stride > 1 else "")
        if missing:
            rows.append({"op": "YoloConvBnLeaky", "shape": label, "mode": "-", "versus": "-", "ours_ms": None,
                         "baseline_ms": None, "ratio": None, "target": "", "note": f"skipped: {missing}"})
            continue
        cin = shape[-1]
        x = tf.constant(rng.standard_normal(shape).astype(np.float32))
        filt = (rng.standard_normal((k, k, cin, cout)) / np.sqrt(k * k * cin)).astype(np.float32)
        bias = rng.normal(0, 0.1, cout).astype(np.float32)
        bn = [rng.uniform(0.5, 1.5, cout).astype(np.float32), rng.normal(0, 0.1, cout).astype(np.float32),
              rng.normal(0, 0.1, cout).astype(np.float32), rng.uniform(0.5, 2.0, cout).astype(np.float32)]
        keras = _keras_block(shape, cout, k, stride, (filt, bias, bn))
        params = [tf.Variable(v) for v in (filt, bias, *bn)]
        pad = dict(padding="EXPLICIT", explicit_paddings=[0, 0, 1, 0, 1, 0, 0, 0]) if stride == 2 else \
            dict(padding="SAME")
        fused = lambda x: tf_ops.yolo_conv_bn_leaky(x, *params, strides=[1, stride, stride, 1], **pad)
        base = lambda x: keras(x, training=False)
        got, want = fused(x).numpy(), base(x).numpy()
        assert np.max(np.abs(got - want) / np.maximum(1, np.abs(want))) < 1e-3, "conv blocks disagree"
        spec_in = tf.TensorSpec(shape, tf.float32)
        frozen = lambda f: freeze(tf.function(f), spec_in)
        for mode, ours, theirs in (("eager", fused, base),
                                   ("function", tf.function(fused), tf.function(base)),
                                   ("frozen", frozen(fused), frozen(base))):
            rows.append(_row("YoloConvBnLeaky", label, mode, "Conv2D+BatchNorm+LeakyReLU",
                             *median_pair(lambda: ours(x), lambda: theirs(x), repeat)))
    return rows


# -- every other op: against its composite ---------------------------------------------

def _composite_rows(spec):
    """The op's TF_BENCH_SHAPES (its folder's bench.py), else its large case-table rows:
    (label, input shapes, TF attributes, in --quick)."""
    own = getattr(specs.part(spec, "bench"), "TF_BENCH_SHAPES", None)
    if own is not None:
        return own
    rows = [e for e in spec.examples() if e.large] or list(spec.examples()[:1])
    return [(_label(e.shapes[0]), e.shapes, e.attrs, i == 0) for i, e in enumerate(rows)]


def bench_composite(rng, repeat, quick):
    """Each built-in op without a bench of its own above, against its composite
    (standard TF ops), eager and tf.function; the first input is fed, the others
    are constants (uniform in [0.5, 1.5]: a variance or a scale stays positive)."""
    rows = []
    for spec in specs.all_specs():
        if not specs.is_builtin(spec) or spec.name in OWN_BENCH:
            continue
        fused_op, comp_op = getattr(tf_ops, spec.module), getattr(tf_ops.composite, spec.module)
        for label, shapes, attrs, in_quick in _composite_rows(spec):
            if quick and not in_quick:
                continue
            x = tf.constant(rng.standard_normal(shapes[0]).astype(np.float32))
            consts = [tf.constant(rng.uniform(0.5, 1.5, s).astype(np.float32)) for s in shapes[1:]]
            fused = lambda x, a=attrs, c=consts: fused_op(x, *c, **a)
            comp = lambda x, a=attrs, c=consts: comp_op(x, *c, **a)
            # What any tf.function with this signature costs per call, doing nothing.
            empty = tf.function(lambda x, n=len(spec.outputs): (x,) * n)
            t_call, _ = median_pair(lambda: empty(x), lambda: None, repeat)
            for mode in ("eager", "function"):
                wrap = (lambda f: f) if mode == "eager" else tf.function
                ours, base = wrap(fused), wrap(comp)
                rows.append(_row(spec.name, label, mode, "composite",
                                 *median_pair(lambda: ours(x), lambda: base(x), repeat),
                                 note="" if mode == "eager" else f"an empty tf.function call: {t_call * 1e3:.3f} ms"))
    return rows


BENCHES = {"fln": bench_layer_norm, "fln_grad": bench_layer_norm_grad, "conv": bench_conv,
           "composite": bench_composite}
OWN_BENCH = {"FusedLayerNorm", "YoloConvBnLeaky"}   # the ops the benches above measure against their own baselines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=20, help="timed rounds per pair (median reported)")
    p.add_argument("--quick", action="store_true", help="the smaller shapes only")
    p.add_argument("--only", default=",".join(BENCHES), help=f"comma-separated subset of {','.join(BENCHES)}")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.add_argument("--busy", action="store_true", help="the whole run with one core busy (another process spinning)")
    args = p.parse_args(argv)
    rng = np.random.default_rng(0)
    with one_core_busy() if args.busy else contextlib.nullcontext():
        rows = [r for name in chosen(p, args.only, list(BENCHES)) for r in BENCHES[name](rng, args.repeat, args.quick)]
    if args.json:
        json.dump({"tensorflow": tf.__version__, "cpus": os.cpu_count(), "repeat": args.repeat,
                   "one_core_busy": args.busy, "load_average": os.getloadavg(), "rows": rows},
                  sys.stdout, indent=1)
        print()
        return 0
    fmt = lambda v, spec: "-" if v is None else format(v, spec)
    print(machine_line() + ("; one core busy (another process spinning)" if args.busy else ""))
    print(render(["op", "shape", "mode", "versus", "ours ms", "baseline ms", "ratio", "target", "note"],
                 [[r["op"], r["shape"], r["mode"], r["versus"], fmt(r["ours_ms"], ".3f"), fmt(r["baseline_ms"], ".3f"),
                   "-" if r["ratio"] is None else f"{r['ratio']:.2f}x", r["target"], r["note"]] for r in rows]))
    print(f"\nratio = baseline time / fused time (> 1: fused is faster); for 'memory copy' it is the fraction of "
          f"copy bandwidth reached. Medians of {args.repeat} alternating rounds; TensorFlow {tf.__version__}, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end (other processes skew the "
          f"ratios: one busy core halves a two-thread kernel but not a one-thread copy).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
