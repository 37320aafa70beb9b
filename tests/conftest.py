"""Shared test helpers. Every numeric check compares against the numpy float64
reference of bridge.ops (or another independent library), never a backend
against itself alone."""
from __future__ import annotations

import os
from contextlib import contextmanager

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from bridge import ops as specs  # noqa: E402
from bridge.ops import nonfinite  # noqa: E402


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def assert_close(op: str, got, ref, dtype="float32", scale: float = 1.0, what: str = ""):
    """Asserts docs/ops.md's tolerance for `op` at `dtype` (times `scale`): element by
    element |got - ref| <= atol * max(1, |ref|). A NaN or Inf on either side fails
    unless both sides hold the same one at that place (bridge.ops.nonfinite)."""
    spec = specs.get(op)
    tol = spec.tolerance[np.dtype(dtype).name]
    got = np.asarray(got)
    ref = np.asarray(ref)
    assert got.shape == ref.shape, f"{op} {what}: shape {got.shape} != reference {ref.shape}"
    g, r = got.astype(np.float64), ref.astype(np.float64)
    bad = nonfinite.check(g, r)
    assert bad is None or not bad.failed, f"{op} {what} ({dtype}): {bad.describe()}"
    excess = tol.excess(got, ref) / scale
    if excess > 1:
        with np.errstate(invalid="ignore"):
            ratio = np.abs(g - r) / np.maximum(1.0, np.abs(r))
        if bad is not None:
            ratio = np.where(bad.matched, 0.0, ratio)
        i = np.unravel_index(np.argmax(ratio), ratio.shape)
        raise AssertionError(f"{op} {what} ({dtype}): error {abs(g[i] - r[i]):.3g} at {i} (got {got[i]!r}, "
                             f"ref {ref[i]!r}) exceeds {tol.atol * scale:g} * max(1, |ref|) by {excess:.2f}x")


@pytest.fixture
def close():
    return assert_close


def rule_excess(got, ref, atol: float, rtol: float = 0.0) -> float:
    """docs/ops.md's rule written out here, independent of bridge.parity.compare (which
    an exporter's own checks use): max over elements of |got - ref| /
    max(atol * max(1, |ref|), rtol * |ref|); inf for a NaN or Inf anywhere (the
    whole models of these tests have none)."""
    g = np.asarray(got, np.float64)
    r = np.asarray(ref, np.float64)
    assert g.shape == r.shape, f"shape {g.shape} != reference {r.shape}"
    if not (np.isfinite(g).all() and np.isfinite(r).all()):
        return float("inf")
    if g.size == 0:
        return 0.0
    return float(np.max(np.abs(g - r) / np.maximum(atol * np.maximum(1.0, np.abs(r)), rtol * np.abs(r))))


def unfused_outputs(source, feeds) -> dict:
    """The model as given (unfused) on `feeds`, called eagerly through Keras, not
    through the exporters' traced functions: {output name: float64 array}.
    `source`: a bridge.modelsource or a bridge.parity source of a Keras model."""
    from bridge.modelsource import keras_call_args
    model = source.keras_model() if hasattr(source, "keras_model") else source.model
    out = model(keras_call_args(model, [feeds[i.name] for i in source.inputs]), training=False)
    if not isinstance(out, dict):
        out = dict(zip(source.output_names, out if isinstance(out, (list, tuple)) else [out]))
    return {k: np.asarray(out[k], np.float64) for k in source.output_names}


@contextmanager
def parity_arrays():
    """While it is open, the arrays each runtime returns in `run_parity` are kept
    ({runtime: {output: array}}), so a test can judge them itself instead of
    trusting the report's verdict."""
    from bridge.parity import runner
    seen = {}
    real = runner._compare_outputs

    def keep(outputs, reference, atol, rtol, res, *args, **kwargs):
        seen[res.name] = {k: np.asarray(v) for k, v in outputs.items()}
        return real(outputs, reference, atol, rtol, res, *args, **kwargs)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(runner, "_compare_outputs", keep)
        yield seen


def run_cli(capsys, *argv):
    """`bridge ARGV` in this process: (exit code, stdout, stderr)."""
    from bridge.cli import main
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


_TF_EMPTY_BATCH = None


def tf_conv_breaks_on_empty_batches() -> bool:
    """Whether this TensorFlow's fused Conv2D (Conv2D + BiasAdd + activation as
    grappler's remapper fuses them, on oneDNN) mishandles an empty batch: TF 2.21 on
    an AVX-512 CPU (AMD Zen 5) hands the *input* on, so the next convolution sees
    the wrong channel count ("input depth must be evenly divisible by filter
    depth"), and a too-short Conv1D input reads garbage instead of failing. A
    TensorFlow bug: where a test's reference is TensorFlow itself, an empty
    batch's reference is then the shape of a batch of one, emptied."""
    global _TF_EMPTY_BATCH
    if _TF_EMPTY_BATCH is None:
        import tensorflow as tf
        w1, b1 = tf.ones((3, 3, 3, 5)), tf.ones(5)
        w2, b2 = tf.ones((3, 3, 5, 4)), tf.ones(4)

        @tf.function(autograph=False)
        def two_convs(x):
            h = tf.nn.leaky_relu(tf.nn.bias_add(tf.nn.conv2d(x, w1, 1, "SAME"), b1), 0.1)
            return tf.nn.leaky_relu(tf.nn.bias_add(tf.nn.conv2d(h, w2, 1, "SAME"), b2), 0.1)
        try:
            _TF_EMPTY_BATCH = tuple(two_convs(tf.zeros((0, 9, 7, 3))).shape) != (0, 9, 7, 4)
        except Exception:  # noqa: BLE001 - the bug shows as TensorFlow's own error
            _TF_EMPTY_BATCH = True
    return _TF_EMPTY_BATCH


def onednn_has_f32_brgemm() -> bool:
    """oneDNN 3.2 (the PyPI 2023.2 build) has its brgemm matmul, Winograd's batched GEMMs, only on AVX-512 cores
    (avx512_core); on an AVX2 CPU (AMD Zen 2) bridge's Winograd plan finds none and takes the direct convolution."""
    from bridge import cpu_flags
    return cpu_flags.has_avx512_core()


@pytest.fixture(scope="module")
def litert_lib():
    """bridge's LiteRT kernel library, built (or read from the cache) once per test module."""
    from bridge import native
    from bridge.litert import runtime
    try:
        return runtime.library()
    except native.BuildError as e:
        pytest.fail(f"the LiteRT kernels do not build here: {e}")


@pytest.fixture(scope="session")
def op_new_scaffold(tmp_path_factory):
    """`bridge op new FusedBiasRelu`'s folder, made once for tests/test_op_new_ort.py and
    tests/test_op_new_litert.py (each made its own, identical one, and its own SavedModel
    from it). Read only: a test that changes a kernel copies the folder apart first."""
    from test_op_new_ort import _scaffold
    folder, stdout = _scaffold(tmp_path_factory.mktemp("op_new") / "fused_bias_relu", with_stdout=True)
    assert f"--litert-library {folder / 'litert'}" in stdout, stdout
    return folder


@pytest.fixture(scope="session")
def op_new_savedmodel(op_new_scaffold, tmp_path_factory):
    """A SavedModel holding the scaffolded op (its TensorFlow build), for both modules above."""
    from test_op_new_ort import make_savedmodel
    return make_savedmodel(op_new_scaffold, tmp_path_factory.mktemp("op_new_sm") / "sm")
