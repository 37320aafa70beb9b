"""FusedLayerNorm in TensorFlow: kernel, composite, gradient and shape function,
all against the numpy float64 reference of bridge.ops."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import tensorflow as tf

from bridge import ops as specs
from bridge import tf_ops

SPEC = specs.get("FusedLayerNorm")

# Odd sizes, H=1, empty batches, an empty row, a large H, rank 1 and rank 4, large
# means: the op's case table (bridge/ops/fused_layer_norm/cases.py), plus H = 0.
TABLE = [pytest.param(e, dtype, id=f"{e.id}-{dtype}") for e in SPEC.examples() for dtype in e.dtypes]


def _inputs(rng, shape, dtype, mean=0.0, std=1.0):
    h = shape[-1]
    x = rng.normal(mean, std, size=shape)
    gamma = rng.uniform(0.5, 1.5, size=h) * rng.choice([-1.0, 1.0], size=h)  # non-zero, both signs
    beta = rng.uniform(-1.0, 1.0, size=h) + 0.1
    return [np.asarray(t, dtype=dtype) for t in (x, gamma, beta)]


def _reference(x, gamma, beta, **attrs):
    with warnings.catch_warnings(), np.errstate(invalid="ignore", divide="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)  # an empty row has no mean
        return SPEC.reference(x, gamma, beta, **attrs)


def _run(fn, mode, *args, **attrs):
    if mode == "function":
        return tf.function(lambda *a: fn(*a, **attrs))(*args)
    return fn(*args, **attrs)


@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("example,dtype", TABLE + [pytest.param(None, d, id=f"H=0-{d}") for d in ("float32", "float16")])
def test_kernel_and_composite_match_reference(rng, close, example, dtype, mode):
    if example is None:
        x, gamma, beta, attrs = *_inputs(rng, (3, 0), dtype), {}
    else:
        (x, gamma, beta), attrs = example.cast(dtype), example.attrs
    ref = _reference(x, gamma, beta, **attrs)
    got = _run(tf_ops.fused_layer_norm, mode, x, gamma, beta, **attrs)
    assert got.dtype == tf.as_dtype(dtype) and got.shape == x.shape
    close("FusedLayerNorm", got.numpy(), ref, dtype, what=f"kernel {mode}")
    close("FusedLayerNorm", _run(tf_ops.composite.fused_layer_norm, mode, x, gamma, beta, **attrs).numpy(), ref,
          dtype, what=f"composite {mode}")


@pytest.mark.parametrize("epsilon", [1e-12, 1e-3, 0.5])
def test_epsilon_is_used(rng, close, epsilon):
    x, gamma, beta = _inputs(rng, (5, 6), "float32", std=0.05)  # small variance: epsilon matters
    close("FusedLayerNorm", tf_ops.fused_layer_norm(x, gamma, beta, epsilon=epsilon).numpy(),
          _reference(x, gamma, beta, epsilon=epsilon))


def test_default_epsilon_comes_from_the_spec(rng, close):
    x, gamma, beta = _inputs(rng, (3, 4), "float32", std=1e-3)  # var ~1e-6: comparable to epsilon
    close("FusedLayerNorm", tf_ops.fused_layer_norm(x, gamma, beta).numpy(),
          _reference(x, gamma, beta, epsilon=SPEC.attr("epsilon").default))


def test_outlier_first_element(rng, close):
    x, gamma, beta = _inputs(rng, (2, 257), "float32")
    x[:, 0] = 1e6
    close("FusedLayerNorm", tf_ops.fused_layer_norm(x, gamma, beta).numpy(), _reference(x, gamma, beta))


def test_constant_row_gives_beta(close):
    x = np.full((2, 9), 3.25, np.float32)
    gamma, beta = np.linspace(0.5, 2, 9, dtype=np.float32), np.linspace(-1, 1, 9, dtype=np.float32) + 0.05
    close("FusedLayerNorm", tf_ops.fused_layer_norm(x, gamma, beta).numpy(), _reference(x, gamma, beta))


def test_large_tensor_with_unaligned_rows(rng, close):
    """Over 16 MB the kernel writes around the cache (streaming stores); an odd H
    leaves most rows unaligned."""
    x, gamma, beta = _inputs(rng, (2053, 2051), "float32", mean=2.0)
    close("FusedLayerNorm", tf_ops.fused_layer_norm(x, gamma, beta).numpy(), _reference(x, gamma, beta))


def test_input_is_not_overwritten_when_still_needed(rng, close):
    x, gamma, beta = _inputs(rng, (64, 48), "float32")

    @tf.function
    def f(x):
        z = x * 1.5  # an intermediate the kernel could reuse for y, but z is needed after
        return tf_ops.fused_layer_norm(z, gamma, beta), z

    y, z = f(x)
    np.testing.assert_array_equal(z.numpy(), x * np.float32(1.5))
    close("FusedLayerNorm", y.numpy(), _reference(x * np.float32(1.5), gamma, beta))


def test_nan_propagates_to_its_row_only(rng):
    x, gamma, beta = _inputs(rng, (3, 8), "float32")
    x[1, 2] = np.nan
    y = tf_ops.fused_layer_norm(x, gamma, beta).numpy()
    assert np.all(np.isnan(y[1])) and np.all(np.isfinite(y[[0, 2]]))


# -- gradients ------------------------------------------------------------------

def _fd_reference(x, gamma, beta, which, weights, eps=1e-6):
    """d sum(weights * y) / d input, by central differences of the float64 reference."""
    args = [np.asarray(t, np.float64) for t in (x, gamma, beta)]
    grad = np.zeros_like(args[which])
    for i in np.ndindex(grad.shape):
        hi, lo = [a.copy() for a in args], [a.copy() for a in args]
        hi[which][i] += eps
        lo[which][i] -= eps
        grad[i] = np.sum(weights * (SPEC.reference(*hi) - SPEC.reference(*lo))) / (2 * eps)
    return grad


@pytest.mark.parametrize("shape", [(2, 5), (3, 1, 4), (1, 1)], ids=str)
@pytest.mark.parametrize("which", [0, 1, 2], ids=["dx", "dgamma", "dbeta"])
def test_gradient_matches_finite_differences(rng, shape, which):
    inputs = _inputs(rng, shape, "float32")
    weights = rng.normal(size=shape).astype(np.float32)  # a non-symmetric loss

    def f(t):
        args = list(inputs)
        args[which] = t
        return tf.reduce_sum(weights * tf_ops.fused_layer_norm(*args))

    (theoretical,), (numeric,) = tf.test.compute_gradient(f, [inputs[which]], delta=1e-2)
    np.testing.assert_allclose(theoretical, numeric, atol=5e-3, rtol=5e-3)
    expected = _fd_reference(*inputs, which, weights).reshape(1, -1)
    np.testing.assert_allclose(theoretical, expected, atol=1e-4, rtol=1e-4)


def test_gradient_in_a_function_and_float16(rng):
    x, gamma, beta = _inputs(rng, (2, 3, 6), "float16")
    weights = rng.normal(size=x.shape).astype(np.float16)

    @tf.function
    def grads(x, gamma, beta):
        with tf.GradientTape() as tape:
            tape.watch([x, gamma, beta])
            loss = tf.reduce_sum(tf.cast(weights * tf_ops.fused_layer_norm(x, gamma, beta), tf.float32))
        return tape.gradient(loss, [x, gamma, beta])

    got = grads(tf.constant(x), tf.constant(gamma), tf.constant(beta))
    for which, g in enumerate(got):
        assert g.dtype == tf.float16
        expected = _fd_reference(x, gamma, beta, which, weights.astype(np.float64))
        np.testing.assert_allclose(g.numpy().astype(np.float64), expected, atol=2e-2, rtol=2e-2)


def test_second_order_gradient_matches_composite(rng):
    x, gamma, beta = (tf.constant(t) for t in _inputs(rng, (3, 5), "float32"))

    def hessian_row(fn):
        with tf.GradientTape() as outer:
            outer.watch(x)
            with tf.GradientTape() as inner:
                inner.watch(x)
                loss = tf.reduce_sum(fn(x, gamma, beta) ** 3)
            g = inner.gradient(loss, x)
            s = tf.reduce_sum(g * tf.range(1.0, 6.0))
        return outer.gradient(s, x).numpy()

    got, expected = hessian_row(tf_ops.fused_layer_norm), hessian_row(tf_ops.composite.fused_layer_norm)
    assert np.any(expected != 0)
    np.testing.assert_allclose(got, expected, atol=1e-3, rtol=1e-3)


# -- shape function ---------------------------------------------------------------

def _trace(x_shape, gamma_shape, beta_shape, fn=None):
    fn = fn or tf_ops.fused_layer_norm
    specs_ = [tf.TensorSpec(s, tf.float32) for s in (x_shape, gamma_shape, beta_shape)]
    return tf.function(fn).get_concrete_function(*specs_).structured_outputs


@pytest.mark.parametrize("x_shape,gamma_shape", [
    ((2, 3, 8), (8,)), ((None, 8), (8,)), ((None, None), (8,)), ((4, None), (None,)), (None, (8,)),
    (None, None), ((5,), (5,)), ((0, 3), (3,)),
])
def test_shape_inference_static_and_unknown_dims(x_shape, gamma_shape):
    out = _trace(x_shape, gamma_shape, gamma_shape)
    expected = SPEC.infer_shapes([x_shape, gamma_shape, gamma_shape])[0]
    if expected is None:
        assert out.shape.rank is None
    else:
        assert out.shape.as_list() == list(expected)
    if x_shape is not None and None not in x_shape:
        assert out.shape.is_fully_defined()


@pytest.mark.parametrize("x_shape,gamma_shape,beta_shape,arg", [
    ((None, 8), (7,), (8,), "gamma"),
    ((2, 8), (8,), (9,), "beta"),
    ((2, 8), (1, 8), (8,), "gamma"),
    ((None, 8), (8,), (), "beta"),
    ((), (1,), (1,), "x"),
])
def test_shape_mismatch_raises_at_trace_time_like_the_spec(x_shape, gamma_shape, beta_shape, arg):
    with pytest.raises(specs.OpError) as spec_error:
        SPEC.infer_shapes([x_shape, gamma_shape, beta_shape])
    assert spec_error.value.arg == arg
    with pytest.raises(ValueError) as e:
        _trace(x_shape, gamma_shape, beta_shape)
    # The kernel's shape function words the error as the spec does.
    assert str(spec_error.value) in str(e.value)


# -- the fused gradient op (FusedLayerNormGrad) ---------------------------------------

@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("example,dtype", TABLE + [pytest.param(None, d, id=f"65x1024-{d}") for d in ("float32", "float16")])
def test_gradient_op_matches_reference_backward(rng, example, dtype, mode):
    """dx, dgamma, dbeta of the fused op against the float64 formula (itself checked
    against finite differences in test_cuda.py); bounds as for the CUDA backward.
    The case table, and 65 rows (three blocks of the dgamma/dbeta sums)."""
    from bridge.ops.fused_layer_norm import BACKWARD_SCALE
    from bridge.ops.fused_layer_norm import reference_backward
    from bridge.ops.fused_layer_norm.tf_op import gradient
    if example is None:
        (x, gamma, _), epsilon = _inputs(rng, (65, 1024), dtype), 1e-5
    else:
        (x, gamma, _), epsilon = example.cast(dtype), SPEC.resolve(example.attrs)["epsilon"]
    dy = rng.normal(size=x.shape).astype(dtype)
    got = _run(gradient, mode, dy, x, gamma, epsilon=epsilon)
    want = reference_backward(dy, x, gamma, epsilon=epsilon)
    for g, w, what in zip(got, want, ("dx", "dgamma", "dbeta")):
        assert g.dtype == tf.as_dtype(dtype), what
        assert SPEC.tolerance[dtype].excess(g.numpy(), w) <= BACKWARD_SCALE[dtype], what


def test_gradient_op_is_deterministic_and_leaves_dy_alone(rng):
    from bridge.ops.fused_layer_norm.tf_op import gradient
    x, gamma, _ = _inputs(rng, (300, 768), "float32")
    dy = rng.normal(size=x.shape).astype(np.float32)
    dy_t = tf.constant(dy)
    first = [t.numpy() for t in gradient(dy_t, x, gamma)]
    again = [t.numpy() for t in gradient(dy_t, x, gamma)]
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    np.testing.assert_array_equal(dy_t.numpy(), dy)  # dy still used here: not overwritten by dx


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_gradient_op_refuses_bad_shapes_naming_op_and_argument(mode):
    from bridge.ops.fused_layer_norm.tf_op import gradient
    x, gamma = np.ones((4, 8), np.float32), np.ones(8, np.float32)
    errors = (ValueError, tf.errors.InvalidArgumentError)
    with pytest.raises(errors, match=r"FusedLayerNormGrad: argument 'dy': must have the shape of x \[4,8\], got \[2,8\]"):
        _run(gradient, mode, np.ones((2, 8), np.float32), x, gamma)
    with pytest.raises(errors, match=r"FusedLayerNormGrad: argument 'gamma': must have shape \[H\]=\[8\]"):
        _run(gradient, mode, x, x, np.ones(5, np.float32))
