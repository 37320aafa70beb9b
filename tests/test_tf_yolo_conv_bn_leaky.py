"""YoloConvBnLeaky in TensorFlow: both convolution roads of the kernel, the
composite, the gradient and the shape function, against the numpy float64
reference of bridge.ops (and TF's own conv2d + batch_normalization + leaky_relu)."""
from __future__ import annotations

import contextlib
import os
import re

import numpy as np
import pytest
import tensorflow as tf

from bridge import ops as specs
from bridge import tf_ops
from conftest import onednn_has_f32_brgemm

SPEC = specs.get("YoloConvBnLeaky")
OP = SPEC.name
PARAMS = [a.name for a in SPEC.inputs[2:]]


def _case(x, k, cout, **attrs):
    return pytest.param(x, k, cout, attrs, id=f"{x}-{k}-{cout}-" + ",".join(f"{a}={v}" for a, v in attrs.items()))


S2 = dict(strides=(1, 2, 2, 1))
D2 = dict(dilations=(1, 2, 2, 1))
# Odd and even sizes, strides 1 and 2, dilation 2, the three paddings, 1x1 (the
# direct GEMM), size-1 spatial, few pixels with many channels (split along Cout),
# enough pixels for several row tiles, and empty outputs of every kind.
CASES = [
    _case((2, 7, 9, 3), (3, 3), 5),
    _case((1, 8, 8, 4), (3, 3), 6, **S2),
    _case((1, 9, 9, 4), (3, 3), 6, **S2),
    _case((1, 9, 9, 4), (3, 3), 6, padding="VALID", **S2),
    _case((1, 8, 10, 4), (3, 3), 6, padding="VALID"),
    _case((1, 10, 11, 3), (3, 3), 4, padding="EXPLICIT", explicit_paddings=(0, 0, 1, 0, 1, 0, 0, 0), **S2),
    _case((1, 9, 10, 4), (3, 2), 6, padding="EXPLICIT", explicit_paddings=(0, 0, 1, 0, 2, 1, 0, 0),
          strides=(1, 2, 1, 1)),
    _case((1, 9, 10, 4), (3, 3), 6, **D2),
    _case((1, 11, 10, 4), (3, 3), 6, padding="VALID", strides=(1, 2, 2, 1), dilations=(1, 2, 1, 1)),
    _case((3, 6, 5, 8), (1, 1), 70),
    _case((1, 7, 7, 8), (1, 1), 16, **S2),
    _case((1, 1, 1, 3), (3, 3), 5),
    _case((2, 1, 1, 16), (1, 1), 8),
    _case((1, 3, 3, 16), (3, 3), 200),
    _case((1, 19, 21, 24), (3, 3), 40),
    _case((0, 7, 9, 3), (3, 3), 5),
    _case((1, 0, 4, 3), (3, 3), 5),
    _case((1, 4, 4, 3), (3, 3), 0),
    _case((1, 5, 5, 0), (3, 3), 5),
    _case((1, 2, 2, 3), (3, 3), 4, padding="VALID"),
]
SMALL = CASES[:3] + CASES[5:6] + CASES[9:10] + CASES[15:16]


def _inputs(rng, x_shape, k, cout, dtype="float32"):
    cin = x_shape[-1]
    x = rng.normal(size=x_shape)
    filt = rng.normal(size=(*k, cin, cout)) / np.sqrt(max(1, k[0] * k[1] * cin))
    conv_bias = rng.uniform(-0.5, 0.5, cout) + 0.05
    gamma = rng.uniform(0.5, 1.5, cout) * rng.choice([-1.0, 1.0], cout)  # non-zero, both signs
    beta = rng.uniform(-0.5, 0.5, cout) + 0.05
    mean = rng.uniform(-0.5, 0.5, cout) + 0.05
    variance = rng.uniform(0.5, 2.0, cout)
    return [np.asarray(t, dtype=dtype) for t in (x, filt, conv_bias, gamma, beta, mean, variance)]


@contextlib.contextmanager
def _road(impl):
    """The kernel reads BRIDGE_CONV_IMPL when it is constructed: a fresh
    tf.function traced inside this block gets a kernel on that road."""
    old = os.environ.get("BRIDGE_CONV_IMPL")
    if impl is None:
        os.environ.pop("BRIDGE_CONV_IMPL", None)
    else:
        os.environ["BRIDGE_CONV_IMPL"] = impl
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("BRIDGE_CONV_IMPL", None)
        else:
            os.environ["BRIDGE_CONV_IMPL"] = old


def _run_on(impl, inputs, attrs):
    with _road(impl):
        return tf.function(lambda *a: tf_ops.yolo_conv_bn_leaky(*a, **attrs))(*inputs).numpy()


def _onednn_built():
    try:
        _run_on("onednn", _inputs(np.random.default_rng(0), (1, 3, 3, 2), (1, 1), 2), {})
        return True
    except tf.errors.InvalidArgumentError as e:
        assert "built without oneDNN" in str(e)
        return False


HAVE_ONEDNN = _onednn_built()
ROADS = ["eigen", pytest.param("onednn", marks=pytest.mark.skipif(
    not HAVE_ONEDNN, reason="op library built without oneDNN (pip install onednn-devel-cpu-gomp)"))]


# -- numbers --------------------------------------------------------------------

TABLE = [pytest.param(e, dtype, id=f"{e.id}-{dtype}") for e in SPEC.examples() for dtype in e.dtypes]


@pytest.mark.parametrize("road", ROADS)
@pytest.mark.parametrize("example,dtype", TABLE)
def test_case_table_on_every_road(close, road, example, dtype):
    """The op's case table (bridge/ops/yolo_conv_bn_leaky/cases.py): both kernel roads and the composite."""
    inputs, attrs = example.cast(dtype), example.attrs
    ref = SPEC.reference(*inputs, **attrs)
    close(OP, _run_on(road, inputs, attrs), ref, dtype, what=road)
    close(OP, tf_ops.composite.yolo_conv_bn_leaky(*inputs, **attrs).numpy(), ref, dtype, what="composite")


# The kernel's own cases beyond the table: row tiles, Cout split, empty outputs of every kind.

@pytest.mark.parametrize("road", ROADS)
@pytest.mark.parametrize("x_shape,k,cout,attrs", CASES)
def test_float32_matches_reference(rng, close, road, x_shape, k, cout, attrs):
    inputs = _inputs(rng, x_shape, k, cout)
    ref = SPEC.reference(*inputs, **attrs)
    close(OP, _run_on(road, inputs, attrs), ref, "float32", what=road)


@pytest.mark.parametrize("road", ROADS)  # float16 always takes the eigen road; both settings must work
@pytest.mark.parametrize("x_shape,k,cout,attrs", CASES[:4] + CASES[5:6] + CASES[7:8] + CASES[9:10] + CASES[13:16])
def test_float16_matches_reference(rng, close, road, x_shape, k, cout, attrs):
    inputs = _inputs(rng, x_shape, k, cout, "float16")
    got = _run_on(road, inputs, attrs)
    assert got.dtype == np.float16
    close(OP, got, SPEC.reference(*inputs, **attrs), "float16", what=road)


@pytest.mark.parametrize("x_shape,k,cout,attrs", CASES)
def test_composite_matches_reference(rng, close, x_shape, k, cout, attrs):
    inputs = _inputs(rng, x_shape, k, cout)
    close(OP, tf_ops.composite.yolo_conv_bn_leaky(*inputs, **attrs).numpy(), SPEC.reference(*inputs, **attrs),
          what="composite")


@pytest.mark.parametrize("x_shape,k,cout,attrs", SMALL)
def test_eager_matches_reference_and_composite(rng, close, x_shape, k, cout, attrs):
    inputs = _inputs(rng, x_shape, k, cout)
    got = tf_ops.yolo_conv_bn_leaky(*inputs, **attrs).numpy()
    close(OP, got, SPEC.reference(*inputs, **attrs), what="eager")
    close(OP, got, tf_ops.composite.yolo_conv_bn_leaky(*inputs, **attrs).numpy().astype(np.float64),
          what="eager vs composite")


@pytest.mark.parametrize("road", ROADS)
@pytest.mark.parametrize("x_shape,k,cout,attrs", [CASES[0], CASES[2], CASES[5], CASES[9], CASES[13]])
def test_matches_tf_conv_batch_norm_leaky_relu(rng, close, road, x_shape, k, cout, attrs):
    """The unfused chain from TF's own ops: conv2d with the conv bias, then
    batch_normalization with the moving statistics, then leaky_relu."""
    x, filt, conv_bias, gamma, beta, mean, variance = inputs = _inputs(rng, x_shape, k, cout)
    padding = attrs.get("padding", "SAME")
    xin = x
    if padding == "EXPLICIT":
        p = attrs["explicit_paddings"]
        xin, padding = np.pad(x, ((0, 0), (p[2], p[3]), (p[4], p[5]), (0, 0))), "VALID"
    z = tf.nn.conv2d(xin, filt, strides=list(attrs.get("strides", (1, 1, 1, 1))), padding=padding) + conv_bias
    z = tf.nn.batch_normalization(z, mean, variance, beta, gamma, SPEC.attr("epsilon").default)
    chain = tf.nn.leaky_relu(z, alpha=SPEC.attr("alpha").default).numpy().astype(np.float64)
    close(OP, _run_on(road, inputs, attrs), chain, what=f"{road} vs TF chain")


@pytest.mark.parametrize("road", ROADS)
@pytest.mark.parametrize("epsilon,alpha", [(1e-3, 0.2), (0.5, 0.0), (1e-5, -0.3)])
def test_epsilon_and_alpha_are_used(rng, close, road, epsilon, alpha):
    inputs = _inputs(rng, (1, 5, 6, 3), (3, 3), 4)
    inputs[6] = np.full_like(inputs[6], 0.01)  # small variance: epsilon matters
    attrs = dict(epsilon=epsilon, alpha=alpha)
    close(OP, _run_on(road, inputs, attrs), SPEC.reference(*inputs, **attrs), what=road)


def test_conv_bias_and_mean_are_combined_once(close):
    """conv_bias = bn_mean cancels exactly (seed 001's pitfall would add it twice)."""
    x = np.ones((1, 3, 3, 1), np.float32)
    filt = np.zeros((1, 1, 1, 2), np.float32)
    ones = np.ones(2, np.float32)
    got = tf_ops.yolo_conv_bn_leaky(x, filt, 5 * ones, ones, 0.25 * ones, 5 * ones, ones - 1e-5).numpy()
    np.testing.assert_allclose(got, np.full((1, 3, 3, 2), 0.25), rtol=1e-6)


# -- the packed filter (oneDNN road) ---------------------------------------------
# From a graph node's second call on, the kernel keeps the filter packed in
# oneDNN's blocked layout, holding a reference to the filter's buffer; every way
# a filter can change must still be seen.

ONEDNN_ONLY = pytest.mark.skipif(not HAVE_ONEDNN, reason="op library built without oneDNN")


@contextlib.contextmanager
def _env(name, value):
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


def _check(close, fn, x, params, attrs, what):
    close(OP, fn(x).numpy(), SPEC.reference(x, *[np.asarray(p) for p in params], **attrs), what=what)


@ONEDNN_ONLY
@pytest.mark.parametrize("weights", ["cached", "plain", "blocked"])
@pytest.mark.parametrize("x_shape,k,cout,attrs", [CASES[0], CASES[5], CASES[9], CASES[14]])
def test_every_weights_layout_matches_reference_call_after_call(rng, close, weights, x_shape, k, cout, attrs):
    x, *params = _inputs(rng, x_shape, k, cout)
    with _road("onednn"), _env("BRIDGE_DNNL_WEIGHTS", weights):
        fn = tf.function(lambda t: tf_ops.yolo_conv_bn_leaky(t, *params, **attrs))
        for call in range(3):  # the second call packs, the third reuses
            _check(close, fn, x, params, attrs, f"{weights}, call {call + 1}")


# Shapes the Winograd road takes (3x3, stride 1, Cin >= 128, >= 100 output
# pixels): odd sizes (partial 2x2 tiles), batch 2, and the three paddings.
WINOGRAD_CASES = [
    _case((1, 21, 23, 128), (3, 3), 72),
    _case((2, 24, 22, 128), (3, 3), 64, padding="VALID"),
    _case((1, 22, 21, 128), (3, 3), 80, padding="EXPLICIT", explicit_paddings=(0, 0, 1, 2, 0, 1, 0, 0)),
]


@ONEDNN_ONLY
@pytest.mark.parametrize("x_shape,k,cout,attrs", WINOGRAD_CASES)
def test_winograd_road_matches_reference_call_after_call(rng, close, x_shape, k, cout, attrs):
    x, *params = _inputs(rng, x_shape, k, cout)
    vs = [tf.Variable(p) for p in params]
    with _road("onednn"), _env("BRIDGE_DNNL_WEIGHTS", "cached"), _env("BRIDGE_CONV_WINOGRAD", "auto"):
        fn = tf.function(lambda t: tf_ops.yolo_conv_bn_leaky(t, *vs, **attrs))
        for call in range(3):  # the second call packs the transformed filter, the third reuses it
            _check(close, fn, x, params, attrs, f"winograd, call {call + 1}")
        vs[0].assign_add(np.full_like(params[0], 0.01))
        for call in range(2):
            _check(close, fn, x, [v.numpy() for v in vs], attrs, f"winograd after an update, call {call + 1}")


@ONEDNN_ONLY
def test_packed_filter_follows_every_kind_of_variable_update(rng, close):
    x, *params = _inputs(rng, (1, 9, 8, 16), (3, 3), 24)
    vs = [tf.Variable(p) for p in params]
    with _road("onednn"):
        fn = tf.function(lambda t: tf_ops.yolo_conv_bn_leaky(t, *vs))
        check = lambda what: _check(close, fn, x, [v.numpy() for v in vs], {}, what)  # noqa: E731
        for call in range(3):
            check(f"call {call + 1}")
        updates = {
            "assign": lambda: vs[0].assign(-params[0]),
            "assign_add": lambda: vs[0].assign_add(0.5 * params[0]),
            "assign_sub": lambda: vs[0].assign_sub(np.full_like(params[0], 0.25)),
            "sliced assign": lambda: vs[0][1, :, :, 3:7].assign(np.full((3, 16, 4), 0.5, np.float32)),
            "scatter_nd_update": lambda: vs[0].scatter_nd_update([[2, 2, 5, 1]], [3.0]),
            "gamma assign": lambda: vs[2].assign(-params[2]),
            "variance assign_add": lambda: vs[5].assign_add(np.full_like(params[5], 1.0)),
        }
        for name, update in updates.items():
            update()
            for call in range(3):
                check(f"after {name}, call {call + 1}")


@ONEDNN_ONLY
def test_eager_calls_see_a_numpy_filter_changed_in_place(rng, close):
    x, filt, *rest = _inputs(rng, (1, 7, 6, 8), (3, 3), 16)
    attrs = dict(alpha=0.0625)  # attributes of its own: a fresh eager kernel, built on the oneDNN road
    with _road("onednn"):
        held = tf.constant(filt)
        for call in range(3):
            got = tf_ops.yolo_conv_bn_leaky(x, held, *rest, **attrs).numpy()
            close(OP, got, SPEC.reference(x, filt, *rest, **attrs), what=f"held tensor, call {call + 1}")
        for round_ in range(3):
            for call in range(3):
                got = tf_ops.yolo_conv_bn_leaky(x, filt, *rest, **attrs).numpy()
                close(OP, got, SPEC.reference(x, filt, *rest, **attrs), what=f"numpy {round_}, call {call + 1}")
            filt *= -1.5  # in place: the next conversion may wrap the very same memory


_REORDERS = r"""
import os, sys
import numpy as np, tensorflow as tf
from bridge import tf_ops
rng = np.random.default_rng(0)
x = rng.normal(size=(1, 12, 12, 16)).astype(np.float32)
params = [tf.Variable(rng.uniform(0.5, 1.5, s).astype(np.float32)) for s in [(3, 3, 16, 32)] + [(32,)] * 5]
fn = tf.function(lambda t: tf_ops.yolo_conv_bn_leaky(t, *params))
for step in range(7):
    if step == 4:
        params[0].assign_add(tf.ones_like(params[0]))
    print(f"@@ call {step + 1}", flush=True)
    fn(x)
    print("@@ done", flush=True)
# a layer for the Winograd road: its GEMMs are oneDNN matmuls
xw = rng.normal(size=(1, 20, 20, 128)).astype(np.float32)
pw = [tf.Variable(rng.uniform(0.5, 1.5, s).astype(np.float32)) for s in [(3, 3, 128, 64)] + [(64,)] * 5]
fw = tf.function(lambda t: tf_ops.yolo_conv_bn_leaky(t, *pw))
for step in range(3):
    print(f"@@ call {11 + step}", flush=True)
    fw(xw)
    print("@@ done", flush=True)
"""


@ONEDNN_ONLY
def test_filter_is_packed_once_and_repacked_after_an_update(tmp_path):
    """oneDNN's verbose log counts the reorders: call 2 packs, calls 3-4 reuse;
    after the update, call 6 packs again and call 7 reuses. And a Winograd layer
    runs its GEMMs from its second call on."""
    import subprocess
    import sys
    env = dict(os.environ, ONEDNN_VERBOSE="1", BRIDGE_CONV_IMPL="onednn", BRIDGE_DNNL_WEIGHTS="cached",
               BRIDGE_CONV_WINOGRAD="auto")
    out = subprocess.run([sys.executable, "-c", _REORDERS], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    reorders, matmuls, call = {}, {}, None
    for line in out.stdout.splitlines():
        if line.startswith("@@ call"):
            call = int(line.split()[-1])
            reorders[call] = matmuls[call] = 0
        elif line.startswith("@@ done"):
            call = None
        elif call and ",exec," in line:
            reorders[call] += ",reorder," in line
            matmuls[call] += ",matmul," in line
    assert sorted(reorders) == list(range(1, 8)) + [11, 12, 13], out.stdout[-2000:]
    assert [reorders[c] for c in (2, 3, 4, 6, 7)] == [1, 0, 0, 1, 0], reorders
    # Winograd: the first call convolves directly, the second packs U and runs the GEMMs, the third reuses U;
    # without oneDNN's brgemm matmul (an AVX2 CPU) the layer stays on the direct convolution
    winograd = onednn_has_f32_brgemm()
    assert [matmuls[c] > 0 for c in (11, 12, 13)] == [False, winograd, winograd], matmuls
    # (Winograd's U is packed per group of its 16 matrices, one reorder each, a group a piece on
    # the host's threads: a count that divides 16)
    if winograd:
        assert reorders[12] in (1, 2, 4, 8, 16) and reorders[13] == 0, reorders
    else:
        assert [reorders[c] for c in (12, 13)] == [1, 0], reorders


def _eigen_ignores_the_setting(close):
    """The Eigen road of a build without oneDNN reads no oneDNN setting: it runs and is right."""
    inputs = _inputs(np.random.default_rng(3), GOOD["x"], GOOD["filter"][:2], GOOD["filter"][3])
    close(OP, _run_on("eigen", inputs, {}), SPEC.reference(*inputs), what="eigen road, bad oneDNN setting")


@pytest.mark.parametrize("name,value,message", [
    ("BRIDGE_CONV_WINOGRAD", "always", "BRIDGE_CONV_WINOGRAD must be auto or off, got 'always'"),
    ("BRIDGE_DNNL_WEIGHTS", "tiled", "BRIDGE_DNNL_WEIGHTS must be cached, plain or blocked, got 'tiled'"),
])
def test_bad_onednn_setting_is_refused_when_the_kernel_is_built(close, name, value, message):
    """With oneDNN the kernel refuses the bad value when it is built; without, the
    setting means nothing and the (Eigen) kernel runs, and is right."""
    with _env(name, value):
        if HAVE_ONEDNN:
            with pytest.raises(tf.errors.InvalidArgumentError, match=message):
                _run_on("onednn", _filled(GOOD), {})
        else:
            _eigen_ignores_the_setting(close)


# -- gradients ----------------------------------------------------------------------

def _away_from_kink(rng, x_shape, k, cout, attrs, margin=0.05):
    """Inputs whose pre-activations keep clear of 0, so finite differences do
    not straddle the LeakyReLU kink."""
    for _ in range(200):
        inputs = _inputs(rng, x_shape, k, cout)
        z = SPEC.reference(*inputs, **{**attrs, "alpha": 1.0})  # alpha 1: y is z
        if np.min(np.abs(z)) > margin:
            return inputs
    raise AssertionError("no draw kept clear of the kink")


@pytest.mark.parametrize("x_shape,k,cout,attrs", [
    _case((1, 3, 4, 2), (2, 2), 2),
    _case((2, 5, 4, 2), (3, 3), 3, padding="EXPLICIT", explicit_paddings=(0, 0, 1, 0, 0, 1, 0, 0), **S2),
    _case((1, 5, 5, 2), (2, 2), 2, padding="VALID", **D2),
    # dilated SAME with unequal dilations: the gradient's own zero-filled filter (TF's CPU backprop
    # refuses dilations > 1 without oneDNN)
    _case((1, 7, 6, 2), (3, 2), 2, padding="SAME", dilations=(1, 2, 3, 1)),
])
def test_gradient_matches_finite_differences(rng, x_shape, k, cout, attrs):
    inputs = [tf.constant(t) for t in _away_from_kink(rng, x_shape, k, cout, attrs)]
    for i, name in enumerate(a.name for a in SPEC.inputs):
        def f(t, i=i):
            args = list(inputs)
            args[i] = t
            return tf_ops.yolo_conv_bn_leaky(*args, **attrs)
        theoretical, numerical = tf.test.compute_gradient(f, [inputs[i]], delta=1e-3)
        t, n = theoretical[0], numerical[0]
        assert np.all(np.isfinite(t)) and np.abs(t).max() > 0, name
        err = np.max(np.abs(t - n) / np.maximum(1.0, np.abs(n)))
        assert err < 2e-2, f"d/d{name}: max error {err:.3g} vs finite differences"


@pytest.mark.parametrize("alpha", [0.1, -0.3])
def test_gradient_matches_composite_autodiff_and_second_order_composes(rng, close, alpha):
    """First and second derivatives through the registered gradient equal TF's
    autodiff of the composite (standard ops only)."""
    attrs = dict(strides=(1, 2, 1, 1), alpha=alpha)
    inputs = [tf.constant(t) for t in _away_from_kink(rng, (2, 5, 4, 3), (3, 3), 4, attrs)]
    weights = tf.constant(rng.normal(size=(2, 3, 4, 4)).astype(np.float32))

    def grads(fn):
        with tf.GradientTape(persistent=True) as outer:
            outer.watch(inputs)
            with tf.GradientTape() as inner:
                inner.watch(inputs)
                loss = tf.reduce_sum(fn(*inputs, **attrs) * weights)
            first = inner.gradient(loss, inputs)
            second_var = tf.reduce_sum(first[6] * first[6])  # nonlinear in bn_variance
        second = outer.gradient(second_var, inputs[6])
        return [g.numpy() for g in first] + [second.numpy()]

    ours, theirs = grads(tf_ops.yolo_conv_bn_leaky), grads(tf_ops.composite.yolo_conv_bn_leaky)
    for name, a, b in zip([*(a.name for a in SPEC.inputs), "d2/dbn_variance"], ours, theirs):
        assert np.all(np.isfinite(a)) and np.abs(a).max() > 0, name
        close(OP, a, b.astype(np.float64), scale=10, what=f"gradient {name}")


def test_gradient_in_float16_is_finite_and_close(rng):
    inputs = [tf.constant(t) for t in _away_from_kink(rng, (1, 4, 4, 2), (3, 3), 3, {})]
    half = [tf.cast(t, tf.float16) for t in inputs]
    with tf.GradientTape() as tape:
        tape.watch(half)
        y = tf_ops.yolo_conv_bn_leaky(*half)
    g16 = tape.gradient(y, half)
    with tf.GradientTape() as tape:
        tape.watch(inputs)
        y = tf_ops.yolo_conv_bn_leaky(*inputs)
    g32 = tape.gradient(y, inputs)
    for name, a, b in zip([a.name for a in SPEC.inputs], g16, g32):
        assert a.dtype == tf.float16, name
        np.testing.assert_allclose(a.numpy().astype(np.float32), b.numpy(), rtol=2e-2, atol=2e-2, err_msg=name)


# -- shapes ----------------------------------------------------------------------------

@pytest.mark.parametrize("x_shape,k,cout,attrs", CASES)
def test_static_output_shape_is_tf_conv2d_s(x_shape, k, cout, attrs):
    x = tf.TensorSpec(x_shape, tf.float32)
    params = [tf.TensorSpec((cout,), tf.float32)] * 5
    filt = tf.TensorSpec((*k, x_shape[-1], cout), tf.float32)
    ours = tf.function(lambda *a: tf_ops.yolo_conv_bn_leaky(*a, **attrs)).get_concrete_function(x, filt, *params)
    expected = SPEC.infer_shapes([x_shape, filt.shape.as_list(), *[(cout,)] * 5], **attrs)[0]
    assert tuple(ours.output_shapes.as_list()) == expected
    conv = dict(strides=list(attrs.get("strides", (1, 1, 1, 1))), padding=attrs.get("padding", "SAME"),
                dilations=list(attrs.get("dilations", (1, 1, 1, 1))))
    if conv["padding"] == "EXPLICIT":
        p = attrs["explicit_paddings"]
        conv["padding"] = [[0, 0], [p[2], p[3]], [p[4], p[5]], [0, 0]]
    if x_shape[-1] == 0 or 0 in expected[1:3]:
        # TF's Conv2D shape function refuses an empty filter depth, and an output of
        # size 0 ("Negative dimension size", though its kernel computes 0); the spec
        # allows both.
        return
    theirs = tf.function(lambda a, b: tf.nn.conv2d(a, b, **conv)).get_concrete_function(x, filt)
    assert tuple(theirs.output_shapes.as_list()) == expected


@pytest.mark.parametrize("x_shape,f_shape,p_shape,attrs,expected", [
    ((None, 9, None, 4), (3, 3, 4, 6), (6,), S2, (None, 5, None, 6)),
    ((None, None, None, None), (3, 3, None, None), (None,), {}, (None, None, None, None)),
    ((2, 9, 9, 4), (3, 3, 4, None), (7,), dict(padding="VALID"), (2, 7, 7, 7)),
    (None, (1, 1, 4, 6), (6,), {}, (None, None, None, 6)),
    ((1, 9, 8, 4), None, None, dict(padding="VALID"), (1, None, None, None)),
    ((1, 10, 10, 3), (3, 3, 3, 4), (4,), dict(padding="EXPLICIT", explicit_paddings=(0, 0, 1, 0, 1, 0, 0, 0), **S2),
     (1, 5, 5, 4)),
])
def test_shape_function_with_unknown_dims(x_shape, f_shape, p_shape, attrs, expected):
    specs_ = [tf.TensorSpec(x_shape, tf.float32), tf.TensorSpec(f_shape, tf.float32)]
    specs_ += [tf.TensorSpec(p_shape, tf.float32)] * 5
    fn = tf.function(lambda *a: tf_ops.yolo_conv_bn_leaky(*a, **attrs)).get_concrete_function(*specs_)
    assert tuple(fn.output_shapes.as_list()) == expected
    assert SPEC.infer_shapes([x_shape, f_shape, *[p_shape] * 5], **attrs)[0] == expected


# -- bad input --------------------------------------------------------------------------

GOOD = dict(x=(1, 5, 5, 3), filter=(3, 3, 3, 4), **{p: (4,) for p in PARAMS})

BAD_SHAPES = [  # (argument, shapes changed, attrs, words of the message)
    ("x", dict(x=(5, 5, 3)), {}, "must have rank 4 [N,H,W,Cin], got [5,5,3]"),
    ("filter", dict(filter=(3, 3, 4)), {}, "must have rank 4 [KH,KW,Cin,Cout], got [3,3,4]"),
    ("filter", dict(filter=(3, 3, 2, 4)), {}, "Cin mismatch: x [1,5,5,3] has Cin=3, filter [3,3,2,4] has Cin=2"),
    *[(p, {p: (5,)}, {}, "must have shape [Cout]=[4] (filter [3,3,3,4]), got [5]") for p in PARAMS],
    ("bn_variance", dict(bn_variance=(1, 4)), {}, "got [1,4]"),
    ("x", dict(filter=(7, 3, 3, 4)), dict(padding="VALID"),
     "H axis of x [1,5,5,3] with filter [7,3,3,4]: computed output size would be negative"),
    ("x", dict(filter=(3, 4, 3, 4)), dict(padding="VALID", dilations=(1, 1, 2, 1)),
     "W axis of x [1,5,5,3] with filter [3,4,3,4]: computed output size would be negative"),
]

BAD_ATTRS = [  # (argument, attrs, words of the message)
    ("strides", dict(strides=(1, 2, 1)), "needs 4 values"),
    ("strides", dict(strides=(2, 1, 1, 1)), "must be 1 at N and C"),
    ("strides", dict(strides=(1, 1, 1, 2)), "must be 1 at N and C"),
    ("strides", dict(strides=(1, 0, 1, 1)), "must be positive"),
    ("strides", dict(strides=(1, 1, -1, 1)), "must be positive"),
    ("dilations", dict(dilations=(1, 2)), "needs 4 values"),
    ("dilations", dict(dilations=(1, 2, 2, 2)), "must be 1 at N and C"),
    ("dilations", dict(dilations=(1, 0, 1, 1)), "must be positive"),
    ("explicit_paddings", dict(padding="EXPLICIT"), "EXPLICIT padding needs 8 values"),
    ("explicit_paddings", dict(padding="EXPLICIT", explicit_paddings=(0, 0, 1, 1)), "needs 8 values"),
    ("explicit_paddings", dict(padding="EXPLICIT", explicit_paddings=(1, 0, 1, 1, 1, 1, 0, 0)), "0 at N and C"),
    ("explicit_paddings", dict(padding="EXPLICIT", explicit_paddings=(0, 0, -1, 1, 1, 1, 0, 0)), "non-negative"),
    ("explicit_paddings", dict(padding="SAME", explicit_paddings=(0, 0, 1, 1, 1, 1, 0, 0)), "must be empty"),
]


def _filled(shapes):
    return [np.full(shapes[a.name], 0.5, np.float32) for a in SPEC.inputs]


def _message(arg, words):
    return f"{OP}: argument '{arg}': .*" + re.escape(words)


@pytest.mark.parametrize("arg,changed,attrs,words", BAD_SHAPES)
def test_bad_shapes_fail_eagerly_with_invalid_argument(arg, changed, attrs, words):
    with pytest.raises(tf.errors.InvalidArgumentError, match=_message(arg, words)):
        tf_ops.yolo_conv_bn_leaky(*_filled({**GOOD, **changed}), **attrs)


@pytest.mark.parametrize("arg,changed,attrs,words", BAD_SHAPES)
def test_bad_shapes_fail_at_trace_time_with_value_error(arg, changed, attrs, words):
    shapes = {**GOOD, **changed}
    specs_ = [tf.TensorSpec(shapes[a.name], tf.float32) for a in SPEC.inputs]
    with pytest.raises(ValueError, match=_message(arg, words)):
        tf.function(lambda *a: tf_ops.yolo_conv_bn_leaky(*a, **attrs)).get_concrete_function(*specs_)
    with pytest.raises(ValueError, match=_message(arg, words)):  # the spec words it the same
        SPEC.infer_shapes([shapes[a.name] for a in SPEC.inputs], **attrs)


@pytest.mark.parametrize("arg,attrs,words", BAD_ATTRS)
def test_bad_attributes_fail_in_python_and_in_the_kernel(arg, attrs, words):
    inputs = _filled(GOOD)
    for fn in (tf_ops.yolo_conv_bn_leaky, tf_ops.composite.yolo_conv_bn_leaky):
        with pytest.raises(ValueError, match=_message(arg, words)):
            fn(*inputs, **attrs)
    raw = tf_ops.load().yolo_conv_bn_leaky  # past the Python checks: the C++ side words it the same
    full = {**SPEC.defaults(), **attrs}
    with pytest.raises(tf.errors.InvalidArgumentError, match=_message(arg, words)):
        raw(*inputs, **full)
    specs_ = [tf.TensorSpec(t.shape, tf.float32) for t in inputs]
    with pytest.raises(ValueError, match=_message(arg, words)):
        tf.function(lambda *a: raw(*a, **full)).get_concrete_function(*specs_)


def test_bad_padding_and_dtype_fail_in_python():
    inputs = _filled(GOOD)
    with pytest.raises(ValueError, match=_message("padding", "'FULL' is not one of")):
        tf_ops.yolo_conv_bn_leaky(*inputs, padding="FULL")
    with pytest.raises(ValueError, match=_message("T", "float64")):
        tf_ops.yolo_conv_bn_leaky(*[t.astype(np.float64) for t in inputs])


def test_unknown_road_is_refused_when_the_kernel_is_built():
    with pytest.raises(tf.errors.InvalidArgumentError, match="BRIDGE_CONV_IMPL must be eigen or onednn, got 'cuda'"):
        _run_on("cuda", _filled(GOOD), {})
