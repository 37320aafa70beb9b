"""bridge's tf2onnx handlers for Complex / FFT2D / Real / Imag (converters/tf2onnx_fft.py):
exported models run on onnxruntime and match numpy's float64 FFT."""
import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
ort = pytest.importorskip("onnxruntime")

from bridge.converters.export_onnx import ExportError, OpsetTooLow, at_lowest_opset, convert_raw  # noqa: E402

SHAPES = [(2, 5, 3), (1, 1, 1), (3, 4, 8), (1, 7, 1), (2, 1, 6)]


def _run(fn, shape, *inputs, opset=18):
    sig = [tf.TensorSpec([None] + list(shape[1:]), tf.float32) for _ in inputs]
    model, _ = convert_raw(fn, sig, opset=opset)
    sess = ort.InferenceSession(model.SerializeToString())
    return sess.run(None, {i.name: x for i, x in zip(sess.get_inputs(), inputs)})


def _close(got, want, n):
    got = np.asarray(got, np.float64)
    assert got.shape == want.shape
    assert np.all(np.isfinite(got))
    # float32 DFT of n points: error grows with the sum of |x|, about sqrt(n) * max|x|
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-6 * n * (np.abs(want).max() + 1))


@pytest.mark.parametrize("opset", [18, 11])  # ONNX DFT; below 17 MatMuls by cos / sin
@pytest.mark.parametrize("shape", SHAPES)
def test_fft2d_of_complex_matches_numpy(shape, opset):
    @tf.function
    def f(x, y):
        c = tf.signal.fft2d(tf.complex(x, y))
        return tf.math.real(c), tf.math.imag(c)

    rng = np.random.default_rng(sum(shape))
    x, y = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))
    real, imag = _run(f, shape, x, y, opset=opset)
    want = np.fft.fft2(x.astype(np.float64) + 1j * y.astype(np.float64))
    n = shape[-1] * shape[-2]
    _close(real, want.real, n)
    _close(imag, want.imag, n)


@pytest.mark.parametrize("shape", [(5, 3), (1, 1), (3, 2, 4, 5)])
def test_fft2d_of_cast_any_rank(shape):
    # tf.cast(real, complex64) and keras.ops.fft2 (FNet's token mixing) on rank 2 and rank 4
    import keras

    @tf.function
    def f(x):
        return tf.math.real(tf.signal.fft2d(tf.cast(x, tf.complex64)))

    @tf.function
    def g(x):
        return keras.ops.fft2((x, keras.ops.zeros_like(x)))[0]

    x = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
    want = np.fft.fft2(x.astype(np.float64)).real
    sig = [tf.TensorSpec(shape, tf.float32)]
    for fn, opset in ((f, 18), (g, 18), (f, 13)):
        model, _ = convert_raw(fn, sig, opset=opset)
        sess = ort.InferenceSession(model.SerializeToString())
        (got,) = sess.run(None, {sess.get_inputs()[0].name: x})
        _close(got, want, shape[-1] * shape[-2])


def test_fft2d_of_dynamic_sizes_needs_opset_17():
    @tf.function
    def f(x):
        return tf.math.real(tf.signal.fft2d(tf.complex(x, x)))

    sig = [tf.TensorSpec([None, None], tf.float32)]  # no constant DFT matrices to make
    with pytest.raises(OpsetTooLow, match="requires opset 17"):
        convert_raw(f, sig, opset=16)
    _, opset, note = at_lowest_opset(lambda o: convert_raw(f, sig, opset=o), [15, 16, 17, 18])
    assert opset == 17 and "FFT2D" in note


def test_complex_into_another_op_is_refused():
    @tf.function
    def f(x):
        return tf.abs(tf.signal.fft2d(tf.complex(x, x)))

    with pytest.raises(ExportError, match="feeds ComplexAbs"):
        convert_raw(f, [tf.TensorSpec([2, 3], tf.float32)], opset=18)
