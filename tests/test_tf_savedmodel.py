"""A SavedModel that uses all three ops reloads in a fresh process once
`bridge.tf_ops` is imported, and gives the same outputs; without the import,
TensorFlow says the op type is not registered."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from bridge import ops as specs
from bridge import tf_ops

ANCHORS = (10.0, 13.0, 16.0, 30.0)
CLASSES = 2
CHANNELS = len(ANCHORS) // 2 * (5 + CLASSES)


class Head(tf.Module):
    """LayerNorm over channels, a Conv-BN-Leaky block, then the YOLO decode."""

    def __init__(self, rng, cin=4):
        super().__init__()
        var = lambda *shape, lo=-1.0, hi=1.0: tf.Variable(rng.uniform(lo, hi, shape).astype(np.float32))
        self.gamma, self.beta = var(cin, lo=0.5, hi=1.5), var(cin)
        self.filter = var(3, 3, cin, CHANNELS, lo=-0.3, hi=0.3)
        self.conv_bias, self.bn_gamma, self.bn_beta = var(CHANNELS), var(CHANNELS, lo=0.5), var(CHANNELS)
        self.bn_mean, self.bn_variance = var(CHANNELS), var(CHANNELS, lo=0.5, hi=2.0)

    @tf.function(input_signature=[tf.TensorSpec([None, None, None, 4], tf.float32)])
    def __call__(self, x):
        y = tf_ops.fused_layer_norm(x, self.gamma, self.beta)
        y = tf_ops.yolo_conv_bn_leaky(y, self.filter, self.conv_bias, self.bn_gamma, self.bn_beta, self.bn_mean,
                                      self.bn_variance, strides=[1, 2, 2, 1], padding="SAME")
        return tf_ops.yolo_decode(y, anchors=ANCHORS, num_classes=CLASSES, stride=16)

    def reference(self, x):
        p = {k: getattr(self, k).numpy() for k in ("gamma", "beta", "filter", "conv_bias", "bn_gamma", "bn_beta",
                                                   "bn_mean", "bn_variance")}
        y = specs.get("FusedLayerNorm").reference(x, p["gamma"], p["beta"])
        y = specs.get("YoloConvBnLeaky").reference(y, p["filter"], p["conv_bias"], p["bn_gamma"], p["bn_beta"],
                                                   p["bn_mean"], p["bn_variance"], strides=(1, 2, 2, 1),
                                                   padding="SAME")
        return specs.get("YoloDecode").reference(y, anchors=ANCHORS, num_classes=CLASSES, stride=16)


RELOAD = textwrap.dedent("""
    import sys
    import numpy as np
    import tensorflow as tf
    if sys.argv[1] == "import":
        import bridge.tf_ops
    try:
        model = tf.saved_model.load(sys.argv[2])
        outs = model(tf.constant(np.load(sys.argv[3])))
    except Exception as e:
        print(f"{type(e).__name__}: {e}")
        sys.exit(3)
    np.savez(sys.argv[4], *[o.numpy() for o in outs])
""")


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    rng = np.random.default_rng(7)
    folder = tmp_path_factory.mktemp("savedmodel")
    model = Head(rng)
    # even H and W, stride 2: a total SAME padding of 1, the odd pixel at the bottom and the right
    x = rng.normal(size=(2, 8, 6, 4)).astype(np.float32)
    np.save(folder / "x.npy", x)
    tf.saved_model.save(model, str(folder / "model"))
    return folder, x, [o.numpy() for o in model(x)], model.reference(x)


def _reload(folder, mode):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.run([sys.executable, "-c", RELOAD, mode, str(folder / "model"), str(folder / "x.npy"),
                           str(folder / f"out-{mode}.npz")], capture_output=True, text=True, env=env, timeout=300)


def test_outputs_before_saving_match_the_reference(saved, close):
    _, _, outs, ref = saved
    for got, r in zip(outs, ref):
        assert np.count_nonzero(r)
        close("YoloDecode", got, r, scale=10, what="FusedLayerNorm -> YoloConvBnLeaky -> YoloDecode")


def test_reloads_in_a_fresh_process_after_import(saved):
    folder, _, outs, _ = saved
    run = _reload(folder, "import")
    assert run.returncode == 0, run.stdout + run.stderr[-2000:]
    reloaded = np.load(folder / "out-import.npz")
    assert len(reloaded.files) == 3
    for i, expected in enumerate(outs):
        np.testing.assert_array_equal(reloaded[f"arr_{i}"], expected)


def test_without_the_import_tensorflow_reports_the_unregistered_op(saved):
    folder, _, _, _ = saved
    run = _reload(folder, "plain")
    assert run.returncode == 3, run.stdout + run.stderr[-2000:]
    assert "Op type not registered" in run.stdout
    assert any(spec.name in run.stdout for spec in specs.all_specs())
