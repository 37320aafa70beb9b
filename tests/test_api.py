"""The Python API (bridge.export, parity, fuse, inspect, ops, register_op)
through `import bridge` alone, its numbers judged independently: the exported
files run on plain onnxruntime (function bodies, no bridge kernels) against the
Keras model or numpy float64, and every documented error with the CLI's line."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import bridge
from conftest import rule_excess, tf_conv_breaks_on_empty_batches

# YoloConvBnLeaky's float32 bound (docs/ops.md), which the chain here stays within
ATOL = 1e-4
TINY = {"input_size": 64, "width": 0.25}


def _ort(path, feeds):
    """The file on onnxruntime as shipped: no bridge kernels (com.bridge nodes run their function bodies)."""
    import onnxruntime as ort
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds)))


@pytest.fixture(scope="module")
def keras_model():
    """Conv (no bias) + BatchNorm + LeakyReLU + LayerNorm at odd sizes, with
    non-trivial weights and BatchNorm statistics (a folding mistake shows)."""
    import keras
    rng = np.random.default_rng(7)
    image = keras.Input((9, 7, 3), name="image")
    x = keras.layers.Conv2D(5, 3, padding="same", use_bias=False)(image)
    x = keras.layers.BatchNormalization(epsilon=1e-3)(x)
    x = keras.layers.LeakyReLU(0.1)(x)
    model = keras.Model(image, keras.layers.LayerNormalization(epsilon=1e-3)(x), name="user")
    for layer in model.layers:
        layer.set_weights([rng.uniform(0.5, 1.5, w.shape).astype("float32") if "variance" in w.path or "gamma" in
                           w.path else rng.uniform(-0.5, 0.5, w.shape).astype("float32") for w in layer.weights])
    return model


def _keras_reference(model, x):
    """The Keras model on x; an empty batch where TensorFlow's fused Conv2D
    mishandles one (conftest.tf_conv_breaks_on_empty_batches): its shape, empty."""
    if len(x) == 0 and tf_conv_breaks_on_empty_batches():
        return np.asarray(model(np.ones((1, *x.shape[1:]), x.dtype), training=False))[:0]
    return np.asarray(model(x, training=False))


def _feeds(batch, seed=0):
    return {"image": np.random.default_rng(seed).uniform(0.05, 1.0, (batch, 9, 7, 3)).astype("float32")}


def test_import_bridge_loads_nothing_heavy_and_lists_its_names():
    code = ("import sys, bridge\n"
            "heavy = [m for m in ('tensorflow', 'numpy', 'onnx', 'keras') if m in sys.modules]\n"
            "assert not heavy, heavy\n"
            "assert issubclass(bridge.ModelSourceError, bridge.BridgeError)\n"
            "assert callable(bridge.ops) and callable(bridge.parity) and bridge.ops.SPECS\n"
            "assert 'tensorflow' not in sys.modules\n"
            "print(' '.join(bridge.__all__))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    names = r.stdout.split()
    assert {"export", "parity", "fuse", "inspect", "ops", "register_op", "BridgeError"} <= set(names)
    for name in names:  # every listed name resolves, and each error is a BridgeError
        value = getattr(bridge, name)
        if name.endswith("Error"):
            assert issubclass(value, bridge.BridgeError), name
        assert value.__doc__, f"bridge.{name} has no docstring"


def test_export_of_a_live_keras_model_runs_on_plain_onnxruntime_as_keras_does(tmp_path, keras_model, capsys):
    lines = []
    result = bridge.export(keras_model, to="onnx", output=tmp_path / "user.onnx", progress=lines.append)
    assert capsys.readouterr() == ("", "")  # nothing printed: the lines went to the callable
    assert any(l.startswith("bridge export [") and "converting done" in l for l in lines), lines
    assert result.ok and result.files == [str(tmp_path / "user.onnx")]
    assert result.fused_ops == {"conv_bn_leaky": 1, "layer_norm": 1}
    assert {"fusing", "converting", "verifying"} <= set(result.timings)
    assert sorted(n.op_type for n in result.proto.graph.node if n.domain == "com.bridge") == \
        ["FusedLayerNorm", "YoloConvBnLeaky"]
    (row,) = result.verification
    assert row["verdict"] == "pass" and 0 <= row["max_error"] <= row["bound"]
    assert json.loads(json.dumps(result.to_json(), default=str))["ok"] is True
    lowered = bridge.export(keras_model, to="onnx", output=tmp_path / "lowered.onnx", mode="lowered", verify=False)
    assert lowered.verification == [] and "not verified (--no-verify)" in lowered.render()
    assert not any(n.domain == "com.bridge" for n in lowered.proto.graph.node)
    for batch in (1, 3, 0):  # the batch stays dynamic; 0: an empty batch
        feeds = _feeds(batch, seed=batch)
        ref = _keras_reference(keras_model, feeds["image"])  # the unfused Keras layers
        for path in (result.output, lowered.output):
            (value,) = _ort(path, feeds).values()
            assert value.shape == ref.shape
            assert rule_excess(value, ref, ATOL) <= 1, f"{path} batch {batch}"


def test_fuse_keeps_what_the_model_computes(keras_model):
    fused, report = bridge.fuse(keras_model)
    assert isinstance(report, bridge.FusionReport)
    assert report.fused("conv_bn_leaky") == 1 and report.fused("layer_norm") == 1
    x = _feeds(2, seed=5)["image"]
    assert rule_excess(np.asarray(fused(x)), np.asarray(keras_model(x, training=False)), ATOL) <= 1


def test_parity_reports_the_error_it_was_planted_and_where(tmp_path, keras_model):
    """A lowered export with one weight scaled: bridge.parity must report the
    same max error as onnxruntime and Keras give here, and the first layer."""
    import onnx
    from onnx import numpy_helper
    bridge.export(keras_model, to="onnx", output=tmp_path / "lowered.onnx", mode="lowered", verify=False)
    altered = onnx.load(str(tmp_path / "lowered.onnx"))
    weight = max(altered.graph.initializer, key=lambda t: np.prod(t.dims))  # the convolution's filter
    weight.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(weight) * 1.5, weight.name))
    onnx.save(altered, str(tmp_path / "altered.onnx"))
    feeds = _feeds(2, seed=9)
    ref = np.asarray(keras_model(feeds["image"], training=False), np.float64)
    (got,) = _ort(tmp_path / "altered.onnx", feeds).values()
    planted = float(np.max(np.abs(got - ref)))
    assert planted > 1e-2

    report = bridge.parity(keras_model, runtimes=["ort-lowered"], inputs=feeds, per_layer=True,
                           onnx=str(tmp_path / "altered.onnx"))
    assert not report.passed
    (row,) = [r for r in report.rows if r["runtime"] == "ort-lowered"]
    assert row["verdict"] == "FAIL" and not row["passed"]
    assert row["max_abs_error"] == pytest.approx(planted, rel=1e-3)
    assert set(report.first_divergence) == {"ort-lowered"} and report.first_divergence["ort-lowered"]
    assert report.layers["ort-lowered"].failed >= 1
    assert "FAIL" in report.table(colour=False) and report.to_json()["passed"] is False

    clean = bridge.parity(keras_model, runtimes=["ort-lowered"], inputs=feeds, per_layer=True)
    (row,) = [r for r in clean.rows if r["runtime"] == "ort-lowered"]
    assert clean.passed and row["verdict"] == "pass" and clean.first_divergence == {}
    (mine,) = _ort(tmp_path / "lowered.onnx", feeds).values()
    assert rule_excess(mine, ref, ATOL) <= 1 and row["max_abs_error"] <= row["bound"]
    assert "PASS" in clean.table(colour=False)


def test_builtin_export_and_parity_agree_with_tensorflow(tmp_path):
    result = bridge.export("yolov3-tiny", to="onnx", output=tmp_path / "tiny.onnx", config=TINY)
    assert result.ok and result.fused_ops.get("conv_bn_leaky", 0) >= 10
    model = bridge.models.build("yolov3-tiny", seed=0, **TINY)  # the same weights: seed 0 is export's default
    x = np.random.default_rng(3).uniform(0.05, 1.0, (2, 64, 64, 3)).astype("float32")
    ref = dict(zip(model.output_names, model(x, training=False)))
    got = _ort(result.output, {result.proto.graph.input[0].name: x})
    assert sorted(got) == sorted(ref)
    for name in ref:  # eleven fused blocks chained: the bound grows with depth (docs/ops.md), 10x covers it
        assert rule_excess(got[name], np.asarray(ref[name]), 10 * ATOL) <= 1, name

    report = bridge.parity("yolov3-tiny", runtimes="ort-functions", config=TINY)
    assert report.passed and report.reference == "tf"
    rows = [r for r in report.rows if r["runtime"] == "ort-functions"]
    assert sorted(r["output"] for r in rows) == sorted(ref) and all(r["verdict"] == "pass" for r in rows)


def test_a_tf_function_with_an_input_signature_is_a_model(tmp_path):
    import tensorflow as tf
    w = np.random.default_rng(2).uniform(-1, 1, (5, 3)).astype("float32")

    @tf.function(input_signature=[tf.TensorSpec([None, 5], tf.float32, name="x")])
    def dense(x):
        return {"y": tf.nn.relu(tf.matmul(x, w))}

    result = bridge.export(dense, to="onnx", output=tmp_path / "f.onnx")
    assert result.ok and result.fused_ops == {}
    x = np.random.default_rng(4).uniform(-1, 1, (7, 5)).astype("float32")
    got = _ort(result.output, {"x": x})["y"]
    assert rule_excess(got, np.maximum(x.astype(np.float64) @ w, 0), 1e-5) <= 1  # numpy float64
    with pytest.raises(bridge.ModelSourceError, match="has no input signature"):
        bridge.export(tf.function(lambda x: x), to="onnx", output=tmp_path / "g.onnx")


def test_inspect_and_ops_are_what_the_cli_prints(tmp_path, capsys, keras_model):
    from bridge.cli import main
    path = str(tmp_path / "m.onnx")
    bridge.export(keras_model, to="onnx", output=path, verify=False)
    summary = bridge.inspect(path)
    assert main(["inspect", path, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(json.dumps(summary.to_json()))
    table = bridge.ops()
    assert main(["ops", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == table
    assert set(table["ops"]) >= {"FusedLayerNorm", "YoloConvBnLeaky", "YoloDecode"}


def test_parity_to_pandas(keras_model):
    pandas = pytest.importorskip("pandas")
    report = bridge.parity(keras_model, runtimes=["ort-lowered"], inputs=_feeds(1))
    frame = report.to_pandas()
    assert isinstance(frame, pandas.DataFrame) and list(frame["runtime"]) == [r["runtime"] for r in report.rows]


# -- every documented error, with the CLI's line -----------------------------------
def test_each_documented_error(tmp_path, keras_model, capsys):
    import tensorflow as tf
    from bridge.cli import main
    out = tmp_path / "x.onnx"
    cases = [
        (bridge.ModelSourceError, "unknown model 'no-such-model'", lambda: bridge.export("no-such-model", output=out)),
        (bridge.ModelSourceError, "unknown runtime 'nope'", lambda: bridge.parity(keras_model, runtimes=["nope"])),
        (bridge.OptionError, "--opset 7: supported opsets are 13..18", lambda: bridge.export(keras_model, output=out,
                                                                                           opset=7)),
        (bridge.OptionError, "--mode fast: --to onnx has modes custom, lowered",
         lambda: bridge.export(keras_model, output=out, mode="fast")),
        (bridge.OptionError, "--quantize int3: --to tflite takes none",
         lambda: bridge.export(keras_model, to="tflite", output=tmp_path / "x.tflite", quantize="int3")),
        (bridge.OptionError, "unknown option 'quantise' for --to tflite",
         lambda: bridge.export(keras_model, to="tflite", output=tmp_path / "x.tflite", quantise="float16")),
        (bridge.SpecError, "field 'file': no such file", lambda: bridge.register_op(tmp_path / "nope.py")),
        (bridge.LibraryError, "--ort-library", lambda: bridge.export(keras_model, output=out,
                                                                     ort_library=[tmp_path / "nope.so"])),
        (bridge.InspectError, "no such file", lambda: bridge.inspect(tmp_path / "none.onnx")),
    ]
    for error, message, call in cases:
        with pytest.raises(error) as caught:
            call()
        assert isinstance(caught.value, bridge.BridgeError) and message in str(caught.value), (message, caught.value)
        assert "\n" not in str(caught.value)
    assert not out.exists()
    # the CLI prints the same lines
    assert main(["export", "no-such-model", "--to", "onnx", "-o", str(out)]) == 2
    assert "error: unknown model 'no-such-model'" in capsys.readouterr().err

    class NoHandler(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
        def __call__(self, x):
            return {"y": tf.math.lgamma(x)}  # tf2onnx has no handler for it

    with pytest.raises(bridge.ExportError, match="Lgamma"):
        bridge.export(NoHandler(), to="onnx", output=out)
    assert not out.exists()


def test_a_build_error_inside_a_keras_call_comes_out_as_itself(tmp_path):
    """Keras wraps what a layer's call raises; the API hands back bridge's own
    BuildError, whose message names the cause and the fix."""
    import keras

    class NeedsALibrary(keras.layers.Layer):
        armed = False

        def call(self, x):
            if NeedsALibrary.armed:
                raise bridge.BuildError("the op library did not build: planted; run `bridge build --force`")
            return x

    x = keras.Input((3,), name="x")
    model = keras.Model(x, NeedsALibrary()(keras.layers.Dense(2)(x)))
    NeedsALibrary.armed = True
    with pytest.raises(bridge.BuildError) as caught:
        bridge.export(model, to="onnx", output=tmp_path / "b.onnx")
    assert str(caught.value) == "the op library did not build: planted; run `bridge build --force`"
    assert caught.value.exit_code == 1


def test_fuse_takes_a_graph_too():
    """A tf.function's layer norm (moments, rsqrt) is matched at graph level; the
    fused graph computes the numpy float64 layer norm."""
    import tensorflow as tf
    rng = np.random.default_rng(6)
    gamma, beta = rng.uniform(0.5, 1.5, 7).astype("float32"), rng.uniform(-0.5, 0.5, 7).astype("float32")

    @tf.function(input_signature=[tf.TensorSpec([None, 3, 7], tf.float32, name="x")])
    def layer_norm(x):
        mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
        return {"y": (x - mean) * tf.math.rsqrt(var + 1e-3) * gamma + beta}

    fused, report = bridge.fuse(layer_norm)
    assert report.fused("layer_norm") == 1, report
    assert fused.op_counts().get("FusedLayerNorm") == 1
    x = rng.uniform(-2, 2, (5, 3, 7)).astype("float32")
    x64 = x.astype(np.float64)
    ref = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-3) * gamma + beta
    (got,) = fused.function()(tf.constant(x)).values()
    assert rule_excess(np.asarray(got), ref, 1e-4) <= 1


def test_imports_are_what_the_import_flag_does(tmp_path, keras_model):
    """`imports=` runs the team's file before the model loads (as --import), and
    a module that cannot be imported is the flag's one-line error."""
    team = tmp_path / "team_marker.py"
    team.write_text("import os\nos.environ['BRIDGE_API_TEST_IMPORTED'] = __name__\n")
    result = bridge.export(keras_model, to="onnx", output=tmp_path / "m.onnx", verify=False, imports=[team])
    assert result.files and __import__("os").environ.pop("BRIDGE_API_TEST_IMPORTED")
    with pytest.raises(bridge.BridgeError, match="no_such_team_module") as caught:
        bridge.parity(keras_model, runtimes=["ort"], imports=["no_such_team_module"])
    assert "\n" not in str(caught.value)


def test_build_check_ascend_and_check_cuda_are_what_their_commands_print(tmp_path, capsys, keras_model, monkeypatch):
    from bridge.cli import main
    (record,) = bridge.build("ort")  # cached: found, not rebuilt
    assert record["target"] == "ort" and __import__("os").path.isfile(record["library"])
    with pytest.raises(bridge.OptionError, match="unknown target 'nope'; choose from tf_ops, ort"):
        bridge.build(["nope"])
    path = str(tmp_path / "m.onnx")
    bridge.export(keras_model, to="onnx", output=path, verify=False)
    found = bridge.check_ascend(path)
    # no plugin package beside a plain ONNX file: ATC would reject each com.bridge node
    assert not found.clean and {f.op_type for f in found.findings} >= {"YoloConvBnLeaky", "FusedLayerNorm"}
    assert main(["ascend", "check", path, "--json"]) == 1
    assert json.loads(capsys.readouterr().out) == json.loads(json.dumps(found.to_json()))
    with pytest.raises(bridge.OptionError, match="no such file"):
        bridge.check_ascend(str(tmp_path / "none.onnx"))
    from bridge import cuda_check

    def no_headers(emulate):
        raise bridge.BuildError("the CUDA headers were not found (planted)")
    monkeypatch.setattr(cuda_check, "choose", no_headers)
    with pytest.raises(bridge.BuildError, match="planted"):
        bridge.check_cuda(emulate=True)


def test_new_op_writes_what_op_new_writes(tmp_path, capsys):
    from bridge.cli import main
    written = bridge.new_op("FusedApiProbe", domain="com.probe", output=tmp_path / "api")
    assert main(["op", "new", "FusedApiProbe", "--domain", "com.probe", "-o", str(tmp_path / "cli")]) == 0
    names = [p.split("/api/", 1)[1] for p in written]
    assert names and all((tmp_path / "cli" / n).read_text() == (tmp_path / "api" / n).read_text() for n in names)
    assert "com.probe" in (tmp_path / "api" / "fused_api_probe.py").read_text()
    with pytest.raises(bridge.OptionError, match="use CamelCase"):
        bridge.new_op("lower", output=tmp_path / "bad")
    assert not (tmp_path / "bad").exists()
