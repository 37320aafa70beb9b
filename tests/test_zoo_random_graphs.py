"""A property test: seeded random Keras graphs (chains and branches of Conv2D
with random kernel, stride, dilation, padding and bias, BatchNormalization,
LeakyReLU with a random slope, ZeroPadding2D, LayerNormalization, Dense, Add,
Concatenate; random input sizes, odd and size 1 included), fused and exported
to ONNX. Every graph either matches the unfused Keras model (another
implementation: Keras' own layers) on onnxruntime, with bridge's kernels and
with the function bodies, or ends with a clear, named reason (bridge's
ExportError / OptionError / ModelSourceError, one line); nothing crashes.

CI runs QUICK seeds; `BRIDGE_RANDOM_GRAPHS=N pytest -m slow -k random_graphs_long`
tries N more."""
from __future__ import annotations

import os

import numpy as np
import pytest

keras = pytest.importorskip("keras")

from bridge import modelsource, onnx_plugins  # noqa: E402
from bridge.converters import export_onnx, fuse  # noqa: E402
from bridge.exporting import ExportError, OptionError, quiet  # noqa: E402
from bridge.parity.compare import Tolerance, compare  # noqa: E402

QUICK = list(range(6)) + [177]  # 177: tf2onnx writes a Reshape that onnxruntime refuses (plain tf2onnx too)
CLEAR = (ExportError, OptionError, modelsource.ModelSourceError)


def random_graph(seed: int, dtype: str = "float32"):
    """(Keras model, input shape with batch, what it is made of). The same seed
    gives the same graph and weights (float32 values) at either dtype: float64 is
    the reference."""
    rng = np.random.default_rng(seed)
    h, w = (int(v) for v in rng.integers(1, 14, size=2))
    c = int(rng.integers(1, 6))
    x = keras.Input((h, w, c), name="x", dtype=dtype)
    tensors, made = [x], []
    L = keras.layers

    def make(cls, *args, **kwargs):
        return cls(*args, dtype=dtype, **kwargs)

    def conv(t, block):
        k = int(rng.choice([1, 2, 3, 5]))
        stride = int(rng.choice([1, 1, 2]))
        dilation = int(rng.choice([1, 2])) if stride == 1 else 1
        span = (k - 1) * dilation + 1
        fits = min(t.shape[1], t.shape[2]) >= span
        padding = "valid" if fits and rng.random() < 0.5 else "same"
        if block and padding == "valid" and rng.random() < 0.5:
            t = make(L.ZeroPadding2D, ((int(rng.integers(0, 3)), int(rng.integers(0, 3))),
                                            (int(rng.integers(0, 3)), int(rng.integers(0, 3)))))(t)
        filters = int(rng.integers(1, 9))
        made.append(f"conv{k}x{k}/s{stride}/d{dilation}/{padding}")
        return make(L.Conv2D, filters, k, strides=stride, dilation_rate=dilation, padding=padding,
                                   use_bias=bool(rng.random() < 0.5))(t)

    for _ in range(int(rng.integers(2, 7))):
        t = tensors[int(rng.integers(len(tensors)))] if rng.random() < 0.3 else tensors[-1]
        kind = str(rng.choice(["conv_bn_leaky", "conv_bn_leaky", "conv", "layer_norm", "dense", "add", "concat"]))
        if kind == "conv_bn_leaky":
            y = make(L.BatchNormalization, epsilon=float(rng.choice([1e-3, 1e-5])))(conv(t, True))
            y = make(L.LeakyReLU, negative_slope=float(rng.uniform(0.0, 0.5)))(y)
        elif kind == "conv":
            y = conv(t, False)
        elif kind == "layer_norm":
            y = make(L.LayerNormalization, epsilon=float(rng.choice([1e-3, 1e-6])))(t)
        elif kind == "dense":
            y = make(L.Dense, int(rng.integers(1, 7)))(t)
        elif kind == "add":
            y = make(L.Add)([t, make(L.Conv2D, t.shape[-1], 1)(t)])
        else:
            y = make(L.Concatenate)([t, make(L.Conv2D, int(rng.integers(1, 4)), 3, padding="same")(t)])
        made.append(kind)
        tensors.append(y)
    outputs = [tensors[-1]] + ([tensors[int(rng.integers(1, len(tensors) - 1))]]
                               if len(tensors) > 2 and rng.random() < 0.3 else [])
    model = keras.Model(x, outputs if len(outputs) > 1 else outputs[0])
    for v in model.weights:  # realistic, non-trivial weights and BatchNorm statistics
        if "moving_variance" in v.path:
            v.assign(rng.uniform(0.5, 2.0, v.shape).astype("float32").astype(dtype))
        elif "moving_mean" in v.path or "beta" in v.path or "bias" in v.path:
            v.assign(rng.normal(0, 0.2, v.shape).astype("float32").astype(dtype))
        elif "gamma" in v.path:
            v.assign(rng.uniform(0.5, 1.5, v.shape).astype("float32").astype(dtype))
        else:
            fan_in = int(np.prod(v.shape[:-1])) or 1
            v.assign(rng.normal(0, 1 / np.sqrt(fan_in), v.shape).astype("float32").astype(dtype))
    batch = int(rng.choice([1, 2, 3]))
    return model, (batch, h, w, c), made


def check_graph(seed: int, tmp_path) -> str:
    """'pass' or the clear reason; raises on anything else (a crash)."""
    model, shape, made = random_graph(seed)
    rng = np.random.default_rng(1000 + seed)
    try:
        src = modelsource.from_object(model, input_shapes={"x": shape})
        _, report = fuse(model)
        path = str(tmp_path / f"g{seed}.onnx")
        export_onnx.export(src, path, mode="custom", progress=quiet())  # its own check against TF runs too
    except CLEAR as e:
        message = str(e)
        assert message and "Traceback" not in message, message
        return f"refused: {message.splitlines()[0]}"
    x = (rng.random(shape) * 2 - 0.5).astype("float32")
    # the reference: the same graph in float64 (Keras' float32 LayerNormalization over 1 channel at
    # epsilon 1e-6 is itself off by 7e-5, where the fused op and float64 agree exactly)
    exact, _, _ = random_graph(seed, "float64")
    ref = exact(x.astype(np.float64), training=False)
    ref = [np.asarray(r) for r in (ref if isinstance(ref, (list, tuple)) else [ref])]
    tol = Tolerance(1e-4, 1e-4)
    for kernels in ("all", "none"):
        sess = onnx_plugins.session(path, kernels=kernels)
        got = sess.run(None, {"x": x})
        assert len(got) == len(ref), (seed, made)
        for g, r in zip(got, ref):
            c = compare(g, r, tol)
            assert c.passed, (f"seed {seed} {made}, kernels={kernels}: max error {c.max_abs_error:.3g} "
                              f"(fused: {report.total_fused})")
    return "pass"


@pytest.mark.parametrize("seed", QUICK)
def test_random_graphs(seed, tmp_path):
    outcome = check_graph(seed, tmp_path)
    assert outcome == "pass" or outcome.startswith("refused: "), outcome


@pytest.mark.slow
def test_random_graphs_long(tmp_path):
    n = int(os.environ.get("BRIDGE_RANDOM_GRAPHS", "50"))
    outcomes = [check_graph(seed, tmp_path) for seed in range(len(QUICK), len(QUICK) + n)]
    print(f"{n} random graphs: {outcomes.count('pass')} pass, {n - outcomes.count('pass')} refused with a reason")
