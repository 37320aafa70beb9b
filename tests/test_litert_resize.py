"""A .tflite converted with a dynamic dimension, run on bridge's LiteRT harness at
other lengths (litert/runtime.py, shape_guard.py, native/harness.cc).

An output whose shape a SHAPE op computes (tf.shape -> fill) is sized by LiteRT's
CompiledModel for the file's shapes; at other lengths the run wrote past its
buffer (a wrong shape, then heap corruption). It is refused before the run, naming
the output and the shapes; an output that follows the resize through Prepare (a
matmul over the sequence) still runs, judged by numpy float64. Every run is in a
subprocess, so a crash is seen as one."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytest.importorskip("ai_edge_litert")
tf = pytest.importorskip("tensorflow")

from bridge.litert import runtime  # noqa: E402

W = np.linspace(-1.0, 1.0, 8 * 5).reshape(8, 5).astype(np.float32)


def _convert(fn) -> bytes:
    class M(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([1, None, 8], tf.float32, name="x")])
        def __call__(self, x):
            return {"y": fn(x)}

    m = M()
    return tf.lite.TFLiteConverter.from_concrete_functions([m.__call__.get_concrete_function()], m).convert()


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("resize")
    shaped = _convert(lambda x: tf.fill(tf.stack([1, tf.shape(x)[1], 3]), 1.5) + tf.reduce_sum(x))
    plain = _convert(lambda x: tf.matmul(x, W) + 1.0)
    for name, data in (("shaped", shaped), ("plain", plain)):
        (d / f"{name}.tflite").write_bytes(data)
    return d


def _runs(litert_lib, path, lengths, guard=True):
    """[(length, output or error)] from one Model in a child process; its exit status.
    guard=False: without runtime.py's check, to see the harness's own."""
    code = textwrap.dedent(f"""
        import json, numpy as np, sys
        from pathlib import Path
        from bridge.litert import runtime
        m = runtime.Model({str(path)!r}, custom=False, lib=Path({str(litert_lib)!r}))
        if not {guard!r}:
            m._shape_computed = {{}}
        out = []
        for n in {list(lengths)!r}:
            x = np.random.default_rng(n).standard_normal((1, n, 8)).astype(np.float32)
            try:
                out.append([n, m.run({{"x": x}})["y"].tolist()])
            except runtime.LiteRTError as e:
                out.append([n, "ERROR: " + str(e)])
        m.close()
        print("RESULT", json.dumps(out))
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    lines = [line for line in p.stdout.splitlines() if line.startswith("RESULT ")]
    return p.returncode, (json.loads(lines[-1][7:]) if lines else p.stderr[-2000:])


def _x(n):
    return np.random.default_rng(n).standard_normal((1, n, 8)).astype(np.float32).astype(np.float64)


def test_a_shape_computed_output_at_another_length_is_refused_not_written_past(litert_lib, models):
    rc, got = _runs(litert_lib, models / "shaped.tflite", [32, 1, 3])
    assert rc == 0, (rc, got)  # no crash (it was heap corruption: signal 6/11)
    (n32, e32), (n1, y1), (n3, e3) = got
    for n, e in ((32, e32), (3, e3)):
        assert e == (f"ERROR: output 'y': its shape is computed while the model runs (it depends on SHAPE op "
                     f"output 'Shape'), and LiteRT's CompiledModel sizes output buffers before running, for the "
                     f"file's input shapes: input 'x' at [1,{n},8] instead of the file's [1,1,8] would be written "
                     f"past its buffer. Convert the model at these input shapes"), e
    ref = np.full((1, 1, 3), 1.5) + _x(1).sum()  # at the file's own shape it runs
    assert np.asarray(y1).shape == ref.shape and np.allclose(y1, ref, rtol=1e-5, atol=1e-5), (y1, ref)


def test_an_output_that_follows_the_resize_runs_at_every_length(litert_lib, models):
    lengths = [32, 1, 3, 17]
    rc, got = _runs(litert_lib, models / "plain.tflite", lengths)
    assert rc == 0, (rc, got)
    for (n, y), want_n in zip(got, lengths):
        assert n == want_n and not isinstance(y, str), y
        ref = _x(n) @ W.astype(np.float64) + 1.0
        y = np.asarray(y)
        assert y.shape == ref.shape == (1, n, 5), (y.shape, ref.shape)
        assert np.isfinite(y).all() and np.allclose(y, ref, rtol=1e-5, atol=1e-5), np.abs(y - ref).max()


def test_the_harness_refuses_an_output_the_run_resized(litert_lib, models):
    """The harness's own check after each run, for what runtime.py cannot see
    beforehand: at length 2 the real output (24 bytes) still fits the 64-byte
    buffer the harness allocates at least, so nothing is written out of bounds
    here, but the shape LiteRT sized before the run ([1,1,3]) is not the output's."""
    rc, got = _runs(litert_lib, models / "shaped.tflite", [2, 1], guard=False)
    assert rc == 0, (rc, got)
    first = ("ERROR: output y: LiteRT's CompiledModel sized it [1,1,3] before the run, which made it [1,2,3] "
             "(its shape is computed while running); convert the model at these input shapes")
    assert got == [[2, first], [1, first + " (an earlier run; open the model again)"]], got
