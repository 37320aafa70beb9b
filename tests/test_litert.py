"""bridge's LiteRT kernels (litert/): the `--mode custom` TFLite export run
on LiteRT's CompiledModel with the custom ops registered through LiteRT's C API.

Judges: the numpy float64 references of bridge.ops (each op exported alone in
custom mode), and TensorFlow on the whole models (`bridge parity` with the
tflite-custom runtime). Files with bad attributes are made by hand
(bridge.litert.one_op) and run in a subprocess, so that a crash would be seen as
one. The missing-symbol case builds against a stub libLiteRt.so."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections import Counter

import numpy as np
import pytest

pytest.importorskip("ai_edge_litert")
tf = pytest.importorskip("tensorflow")

from bridge import native, ops, tf_ops  # noqa: E402
from bridge.converters import export_tflite as ex  # noqa: E402
from bridge.parity.runtimes.tflite import run_tflite  # noqa: E402
from bridge.litert import runtime  # noqa: E402
from bridge.litert.one_op import flexbuffer, one_op_model  # noqa: E402
from bridge.tflite_inspect import inspect_tflite  # noqa: E402
from case_rows import example_params, outputs  # noqa: E402


def _rand(rng, shape, low=0.0):
    if low:
        return rng.uniform(low, low + 1.0, shape).astype(np.float32)
    x = rng.standard_normal(shape).astype(np.float32)
    return np.where(np.abs(x) < 1e-3, np.float32(0.5), x)


def _custom(fn, specs_, names, op):
    data = ex.convert(fn, specs_, names, mode="custom")
    info = inspect_tflite(data)
    assert info.custom_codes == Counter({op: 1}) and not info.builtin_ops, dict(info.ops)
    return data


def _spec(name, shape):
    return tf.TensorSpec(shape, tf.float32, name=name)


def _run_shapes(litert_lib, data, feeds_list):
    """Outputs per feed on one compiled model (resized per shape). An empty
    batch is refused by LiteRT's CompiledModel itself (ResizeInputTensor wants
    positive dimensions): a clear error is expected there, and None returned."""
    m = runtime.Model(data, lib=litert_lib)
    out = []
    try:
        for feeds in feeds_list:
            if any(0 in np.shape(v) for v in feeds.values()):
                with pytest.raises(runtime.LiteRTError, match=r"has an empty dimension, which LiteRT's "
                                                              r"CompiledModel does not take"):
                    m.run(feeds)
                out.append(None)
            else:
                out.append(m.run(feeds))
        return out
    finally:
        m.close()


# -- each op in --mode custom on LiteRT, against the numpy reference -------------------
@pytest.mark.parametrize("epsilon", [1e-6, 1e-3])
def test_fused_layer_norm_custom(litert_lib, rng, close, epsilon):
    spec = ops.get("FusedLayerNorm")
    h = 7
    gamma, beta = _rand(rng, [h]), _rand(rng, [h])
    data = _custom(lambda x: tf_ops.fused_layer_norm(x, gamma, beta, epsilon=epsilon),
                   [_spec("x", [None, None, h])], ["y"], "FusedLayerNorm")
    shapes = [(2, 5, h), (1, 1, h), (3, 33, h), (0, 3, h)]
    xs = [_rand(rng, s) * 3 + 1 for s in shapes]
    xs[2] = xs[2] + np.float32(3e4)  # a large mean next to the spread (docs/ops.md)
    for x, got in zip(xs, _run_shapes(litert_lib, data, [{"x": x} for x in xs])):
        if got is not None:
            close("FusedLayerNorm", got["y"], spec.reference(x, gamma, beta, epsilon=epsilon), what=str(x.shape))


@pytest.mark.parametrize("attrs", [
    dict(strides=[1, 1, 1, 1], padding="SAME"),
    dict(strides=[1, 2, 2, 1], padding="SAME", alpha=0.3),
    dict(strides=[1, 1, 1, 1], padding="VALID", dilations=[1, 2, 2, 1], epsilon=1e-3, alpha=0.2),
    dict(strides=[1, 1, 2, 1], padding="EXPLICIT", explicit_paddings=[0, 0, 1, 2, 0, 1, 0, 0]),
], ids=["same", "same-s2", "valid-d2", "explicit"])
def test_yolo_conv_bn_leaky_custom(litert_lib, rng, close, attrs):
    spec = ops.get("YoloConvBnLeaky")
    cin, cout = 3, 5
    params = [_rand(rng, [3, 3, cin, cout]), _rand(rng, [cout]), _rand(rng, [cout]), _rand(rng, [cout]),
              _rand(rng, [cout]), _rand(rng, [cout], low=0.5)]
    data = _custom(lambda x: tf_ops.yolo_conv_bn_leaky(x, *params, **attrs),
                   [_spec("x", [None, None, None, cin])], ["y"], "YoloConvBnLeaky")
    xs = [_rand(rng, s) for s in [(1, 7, 9, cin), (2, 11, 10, cin), (1, 5, 5, cin), (0, 7, 9, cin)]]
    for x, got in zip(xs, _run_shapes(litert_lib, data, [{"x": x} for x in xs])):
        if got is not None:
            close("YoloConvBnLeaky", got["y"], spec.reference(x, *params, **attrs), what=str(x.shape))


def test_yolo_conv_bn_leaky_custom_winograd_layer(litert_lib, rng, close):
    """A 3x3 stride-1 layer with Cin >= 128: the Winograd road of conv_core.h."""
    spec = ops.get("YoloConvBnLeaky")
    cin, cout = 128, 64
    params = [_rand(rng, [3, 3, cin, cout]) * 0.1, _rand(rng, [cout]), _rand(rng, [cout]), _rand(rng, [cout]),
              _rand(rng, [cout]), _rand(rng, [cout], low=0.5)]
    attrs = dict(strides=[1, 1, 1, 1], padding="SAME")
    data = _custom(lambda x: tf_ops.yolo_conv_bn_leaky(x, *params, **attrs),
                   [_spec("x", [None, 13, 13, cin])], ["y"], "YoloConvBnLeaky")
    x = _rand(rng, (1, 13, 13, cin))
    got = _run_shapes(litert_lib, data, [{"x": x}])[0]["y"]
    close("YoloConvBnLeaky", got, spec.reference(x, *params, **attrs))


@pytest.mark.parametrize("attrs", [
    dict(anchors=[10.0, 13.0, 33.0, 23.0], num_classes=3, stride=8, scale_x_y=1.05),
    dict(anchors=[116.0, 90.0], num_classes=1, stride=32, scale_x_y=1.0),
], ids=["two-anchors", "one-anchor"])
def test_yolo_decode_custom(litert_lib, rng, close, attrs):
    spec = ops.get("YoloDecode")
    ch = len(attrs["anchors"]) // 2 * (5 + attrs["num_classes"])
    names = [o.name for o in spec.outputs]
    data = _custom(lambda raw: tf_ops.yolo_decode(raw, **attrs), [_spec("raw", [None, None, None, ch])], names,
                   "YoloDecode")
    raws = [_rand(rng, s) for s in [(2, 3, 5, ch), (1, 1, 1, ch), (1, 13, 7, ch), (0, 2, 2, ch)]]
    for raw, got in zip(raws, _run_shapes(litert_lib, data, [{"raw": r} for r in raws])):
        for name, ref in zip(names, spec.reference(raw, **attrs) if got is not None else []):
            close("YoloDecode", got[name], ref, what=f"{name} {raw.shape}")


# -- whole models through bridge parity -------------------------------------------------
@pytest.mark.parametrize("name,config", [
    ("yolov3-tiny", {"input_size": 64, "decode": True}),
    ("bert", {"layers": 2, "hidden": 64, "heads": 4, "intermediate": 128, "vocab_size": 500}),
], ids=["yolov3-tiny", "bert"])
def test_model_custom_mode_passes_parity(litert_lib, name, config):
    from bridge.parity import open_source, run_parity
    source = open_source(name, config=config)
    try:
        report = run_parity(None, source=source, runtimes=["tf", "tflite-custom"], seed=1)
    finally:
        source.close()
    row = report.runtimes[1]
    assert row.name == "tflite-custom" and row.status == "ok", (row.status, row.reason)
    assert report.passed, report.to_json()
    for c in row.outputs.values():
        assert 0 < c.max_abs_error and c.excess <= 1


# -- bad attributes in hand-made files: the op and argument named, never a crash ----------
GOOD_DECODE = {"T": 0, "anchors": [10.0, 13.0], "num_classes": 2, "stride": 8, "scale_x_y": 1.0}


def _decode_file(options):
    return one_op_model("YoloDecode", [("raw", [1, 2, 2, 7])], ["boxes", "objectness", "class_probs"], options)


def _run_in_subprocess(tmp_path, data: bytes, feeds_shape):
    path = tmp_path / "bad.tflite"
    path.write_bytes(data)
    code = textwrap.dedent(f"""
        import numpy as np, sys
        from bridge.litert import runtime
        try:
            m = runtime.Model({str(path)!r})
            m.run({{m.inputs[0]: np.ones({feeds_shape!r}, np.float32)}})
        except runtime.LiteRTError as e:
            print("ERROR:", e)
            sys.exit(3)
        print("RAN")
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout


@pytest.mark.parametrize("options,arg,message", [
    ({k: v for k, v in GOOD_DECODE.items() if k != "num_classes"}, "num_classes", "is missing"),
    ({**GOOD_DECODE, "stride": "eight"}, "stride", "must be an int, got string"),
    ({**GOOD_DECODE, "anchors": [10.0, 13.0, 33.0]}, "anchors", "needs 2*A values [w0,h0,w1,h1,...], got 3"),
    ({**GOOD_DECODE, "anchors": [10.0, -13.0]}, "anchors", "must all be positive"),
], ids=["missing-key", "wrong-type", "odd-anchors", "negative-anchor"])
def test_bad_decode_attributes_name_op_and_argument(litert_lib, tmp_path, options, arg, message):
    rc, out = _run_in_subprocess(tmp_path, _decode_file(options), [1, 2, 2, 7])
    assert rc == 3, (rc, out)  # a clean error, not a crash (negative) nor a run
    assert f"YoloDecode: argument '{arg}': {message}" in out, out


@pytest.mark.parametrize("options,arg,message", [
    ({"T": 0, "padding": "SAME", "strides": [1, 1, 1]}, "strides", "needs 4 values [1,sh,sw,1], got [1, 1, 1]"),
    ({"T": 0, "padding": "HALF", "strides": [1, 1, 1, 1]}, "padding", "'HALF' is not one of"),
    ({"T": 0, "padding": "EXPLICIT", "strides": [1, 1, 1, 1], "explicit_paddings": [0, 0, 1, 1]},
     "explicit_paddings", "EXPLICIT padding needs 8 values"),
    ({"T": 0, "padding": 1, "strides": [1, 1, 1, 1]}, "padding", "must be a string"),
    ({"T": 1, "padding": "SAME", "strides": [1, 1, 1, 1]}, "T", "this LiteRT kernel runs float32 (TensorType 0) only"),
], ids=["short-strides", "bad-padding", "short-explicit", "padding-not-a-string", "float16"])
def test_bad_conv_attributes_name_op_and_argument(litert_lib, tmp_path, rng, options, arg, message):
    consts = [("filter", _rand(rng, [1, 1, 2, 3]))] + [(n, _rand(rng, [3], low=0.5)) for n in
                                                       ("conv_bias", "bn_gamma", "bn_beta", "bn_mean", "bn_variance")]
    data = one_op_model("YoloConvBnLeaky", [("x", [1, 4, 4, 2]), *consts], ["y"], options)
    rc, out = _run_in_subprocess(tmp_path, data, [1, 4, 4, 2])
    assert rc == 3, (rc, out)
    assert f"YoloConvBnLeaky: argument '{arg}': {message}" in out, out


def test_bad_input_shape_is_named_at_prepare(litert_lib, tmp_path, rng):
    gamma = _rand(rng, [4])
    data = one_op_model("FusedLayerNorm", [("x", [1, 5]), ("gamma", gamma), ("beta", gamma)], ["y"],
                        {"T": 0, "epsilon": 1e-5})
    rc, out = _run_in_subprocess(tmp_path, data, [1, 5])
    assert rc == 3, (rc, out)
    assert "FusedLayerNorm: argument 'gamma': must have shape [H]=[5] (the last dim of x [1,5]), got [4]" in out, out


@pytest.mark.parametrize("cut", [1, 5, 17])
def test_truncated_attribute_buffer_is_an_error_not_a_crash(litert_lib, tmp_path, cut):
    raw = flexbuffer(GOOD_DECODE)
    rc, out = _run_in_subprocess(tmp_path, _decode_file(raw[cut:]), [1, 2, 2, 7])
    assert rc == 3, (rc, out)
    assert out.startswith("ERROR: YoloDecode: "), out


def test_good_hand_made_file_runs(litert_lib, rng, close):
    """The bad-attribute files differ from this one only in the attribute named."""
    raw = _rand(rng, (1, 2, 2, 7))
    got = runtime.Model(_decode_file(GOOD_DECODE), lib=litert_lib).run({"raw": raw})
    attrs = {k: v for k, v in GOOD_DECODE.items() if k != "T"}
    for name, ref in zip(["boxes", "objectness", "class_probs"], ops.get("YoloDecode").reference(raw, **attrs)):
        close("YoloDecode", got[name], ref, what=name)


# -- a LiteRT without a symbol bridge declares ------------------------------------------
def test_litert_without_a_symbol_is_a_clear_build_error_and_lowered_still_runs(tmp_path, monkeypatch, rng, close):
    header = native._package_dir("bridge.litert") / "native" / "litert_c_api.h"
    declared = native.litert_declared(header)
    assert "LiteRtAddCustomOpKernelOption" in declared and len(declared) >= 20
    stub = tmp_path / "stub.c"
    stub.write_text("".join(f"void {n}(void) {{}}\n" for n in declared if n != "LiteRtAddCustomOpKernelOption"))
    so = tmp_path / "libLiteRt.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(so), str(stub)], check=True)
    monkeypatch.setenv("BRIDGE_LITERT_LIB", str(so))
    with pytest.raises(native.BuildError, match=r"ai-edge-litert \S+'s libLiteRt.so .* does not export "
                                                r"LiteRtAddCustomOpKernelOption.*--mode lowered runs on any LiteRT"):
        native.litert_build()
    done = subprocess.run([sys.executable, "-m", "bridge", "build", "tflite"], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, BRIDGE_LITERT_LIB=str(so)))
    assert done.returncode == 1 and "does not export LiteRtAddCustomOpKernelOption" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    from bridge.parity.runtimes.tflite_custom import TFLiteCustom
    from bridge.parity.runtime import Unavailable
    with pytest.raises(Unavailable, match="does not export LiteRtAddCustomOpKernelOption"):
        TFLiteCustom().prepare(object())
    from bridge.backends import table
    assert table()["YoloDecode"]["tflite"].startswith("lowered only"), table()["YoloDecode"]
    # the lowered road does not need the kernels
    gamma, beta = _rand(rng, [6]), _rand(rng, [6])
    data = ex.convert(lambda x: tf_ops.fused_layer_norm(x, gamma, beta, epsilon=1e-5), [_spec("x", [None, 6])],
                      ["y"], mode="lowered")
    x = _rand(rng, (3, 6))
    close("FusedLayerNorm", run_tflite(data, {"x": x})["y"],
          ops.get("FusedLayerNorm").reference(x, gamma, beta, epsilon=1e-5))


def test_every_declared_function_is_exported_by_the_installed_litert():
    header = native._package_dir("bridge.litert") / "native" / "litert_c_api.h"
    assert native.litert_missing_symbols(native.litert_library(), native.litert_declared(header)) == []


def test_bridge_ops_says_the_tflite_kernels_are_real(litert_lib):
    from bridge.backends import table
    assert {op: row["tflite"] for op, row in table().items()} == {s.name: "yes" for s in ops.all_specs()}


@pytest.mark.parametrize("spec,example", example_params(empty=False))
def test_every_op_passes_its_case_table_on_litert(litert_lib, close, spec, example):
    """The op's shared case table (bridge/ops/cases.py: odd sizes, size 1, large
    means, SAME with an odd total padding, dilation 2, attribute edges), each row
    exported in --mode custom (the first input fed, the others constants) and run
    on bridge's LiteRT kernels against the numpy float64 reference. Empty rows
    are LiteRT's own refusal (tested above)."""
    first, *rest = example.cast("float32")
    fn_op = getattr(tf_ops, spec.module)
    data = _custom(lambda x: fn_op(x, *rest, **example.attrs), [_spec(spec.inputs[0].name, first.shape)],
                   [o.name for o in spec.outputs], spec.name)
    got = _run_shapes(litert_lib, data, [{spec.inputs[0].name: first}])[0]
    ref = spec.reference(first, *rest, **example.attrs)  # of the float32 values the kernel sees
    for out, r in zip(spec.outputs, outputs(ref)):
        close(spec.name, got[out.name], r, what=f"{example.id} {out.name}")


def test_an_empty_constant_is_refused_naming_the_output_and_its_shape(litert_lib):
    """An empty constant x (0 rows) makes an empty output, which LiteRT's
    CompiledModel does not allocate: the error names the output and the shape."""
    data = one_op_model("FusedLayerNorm", [("x", np.zeros((0, 4), np.float32)), ("gamma", [4]),
                                           ("beta", np.zeros(4, np.float32))], ["y"], {"epsilon": 1e-5})
    model = runtime.Model(data, lib=litert_lib)
    try:
        with pytest.raises(runtime.LiteRTError, match=r"allocating output y failed .*its shape \[0,4\] is empty"):
            model.run({"gamma": np.ones(4, np.float32)})
    finally:
        model.close()


@pytest.mark.parametrize("dtype", ["bool", "uint8", "int8", "int16", "float64"])
def test_inputs_and_outputs_of_every_element_type_are_copied(litert_lib, dtype, rng):
    """One-byte and other non-float32 tensors go in and come out as they are
    (a bool mask copied as 0 bytes once ran on whatever the buffer held:
    where(mask, x, -x) returned x)."""
    import tensorflow as tf
    tf_dtype = tf.as_dtype(dtype)

    class M(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([5], tf_dtype, name="a"), tf.TensorSpec([5], tf.float32, name="x")])
        def __call__(self, a, x):
            if dtype == "bool":
                return {"y": tf.where(a, x, -x), "back": a}
            return {"y": tf.cast(a, tf.float32) * x, "back": a}

    m = M()
    conv = tf.lite.TFLiteConverter.from_concrete_functions([m.__call__.get_concrete_function()], m)
    conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS, tf.lite.OpsSet.SELECT_TF_OPS] \
        if dtype == "float64" else [tf.lite.OpsSet.TFLITE_BUILTINS]
    try:
        data = conv.convert()
    except Exception as e:  # noqa: BLE001 - a type TFLite's converter does not take here
        pytest.skip(f"the TFLite converter does not take {dtype} here: {str(e).splitlines()[0][:120]}")
    a = (np.array([True, False, True, True, False]) if dtype == "bool"
         else rng.integers(-3 if dtype != "uint8" else 0, 4, 5).astype(dtype))
    x = rng.uniform(0.5, 1.5, 5).astype(np.float32)
    try:
        model = runtime.Model(data, custom=False, lib=litert_lib)
    except runtime.LiteRTError as e:
        if "Flex" in str(e) or "Select" in str(e):
            pytest.skip(f"LiteRT here runs no TF select ops: {str(e)[:120]}")
        raise
    try:
        got = model.run({"a": a, "x": x})
    finally:
        model.close()
    want = np.where(a, x, -x) if dtype == "bool" else a.astype(np.float64) * x
    assert got["back"].dtype == np.dtype(dtype) and np.array_equal(got["back"], a), got["back"]
    np.testing.assert_allclose(got["y"], want, rtol=1e-6, atol=0)


# -- threads: XNNPack's count, and bridge's kernels on the OpenMP team ----------------
def test_host_threads_follow_omp_num_threads(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert runtime.host_threads() == 3
    monkeypatch.setenv("OMP_NUM_THREADS", "junk")
    assert runtime.host_threads() == len(os.sched_getaffinity(0))


def test_only_the_kernels_libgomp_counts_as_loaded():
    wheel = "7f00-7f01 r-xp 0 08:01 1 /venv/site-packages/scikit_learn.libs/libgomp-e985bcbb.so.1.0.0\n"
    system = "7f02-7f03 r-xp 0 08:01 2 /usr/lib/x86_64-linux-gnu/libgomp.so.1.0.0\n"
    assert not runtime._kernels_libgomp_loaded(wheel)
    assert runtime._kernels_libgomp_loaded(wheel + system)


@pytest.mark.parametrize("threads", [1, 2])
def test_lowered_and_custom_agree_on_any_thread_count(litert_lib, rng, close, threads):
    spec = ops.get("YoloConvBnLeaky")
    cin, cout = 64, 48
    params = [_rand(rng, [1, 1, cin, cout]) * 0.1, _rand(rng, [cout]), _rand(rng, [cout]), _rand(rng, [cout]),
              _rand(rng, [cout]), _rand(rng, [cout], low=0.5)]
    fn = lambda x: tf_ops.yolo_conv_bn_leaky(x, *params, strides=[1, 1, 1, 1], padding="SAME")  # noqa: E731
    x = _rand(rng, (1, 13, 11, cin))
    want = spec.reference(x, *params, strides=[1, 1, 1, 1], padding="SAME")
    for mode in ("custom", "lowered"):
        data = ex.convert(fn, [_spec("x", [1, 13, 11, cin])], ["y"], mode=mode)
        m = runtime.Model(data, custom=mode == "custom", lib=litert_lib, threads=threads)
        try:
            close("YoloConvBnLeaky", m.run({"x": x})["y"], want, what=f"{mode}, {threads} threads")
        finally:
            m.close()


def _thread_cpu_ticks():
    ticks = {}
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks[int(task)] = int(fields[11]) + int(fields[12])
    return ticks


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one CPU: no second thread to see")
def test_a_custom_conv_runs_on_more_than_the_calling_thread(litert_lib, rng):
    """The conv's oneDNN primitives are single-threaded (conv_core.h's OneThread),
    and a OneThread alive around the host's loop made LiteRT's OpenMP team one
    thread: every band ran on the calling thread. Another thread must do work."""
    import threading
    cin, cout = 256, 256
    params = [_rand(rng, [3, 3, cin, cout]) * 0.05, _rand(rng, [cout]), _rand(rng, [cout]), _rand(rng, [cout]),
              _rand(rng, [cout]), _rand(rng, [cout], low=0.5)]
    fn = lambda x: tf_ops.yolo_conv_bn_leaky(x, *params, strides=[1, 2, 2, 1], padding="SAME")  # noqa: E731
    data = ex.convert(fn, [_spec("x", [1, 104, 104, cin])], ["y"], mode="custom")
    x = _rand(rng, (1, 104, 104, cin))
    m = runtime.Model(data, lib=litert_lib)
    try:
        m.run({"x": x})
        before = _thread_cpu_ticks()
        main = threading.get_native_id()
        for _ in range(8):
            m.run({"x": x})
        after = _thread_cpu_ticks()
    finally:
        m.close()
    others = sum(t - before.get(k, 0) for k, t in after.items() if k != main)
    assert others >= 0.1 * (after[main] - before[main]) and others > 0, (before, after)


def test_a_filter_fed_as_an_input_is_followed_call_after_call(litert_lib, rng, close):
    """Constants sit in LiteRT's read-only mapping of the file and are packed once
    (litert/native/host.cc); a filter fed as a model input sits in a writable
    buffer at the same address every call: it is compared, and a new one repacked."""
    spec = ops.get("YoloConvBnLeaky")
    cin, cout = 64, 32
    rest = [_rand(rng, [cout]), _rand(rng, [cout]), _rand(rng, [cout]), _rand(rng, [cout]), _rand(rng, [cout], low=0.5)]
    fn = lambda x, f: tf_ops.yolo_conv_bn_leaky(x, f, *rest, strides=[1, 1, 1, 1], padding="SAME")  # noqa: E731
    data = ex.convert(fn, [_spec("x", [1, 12, 12, cin]), _spec("f", [3, 3, cin, cout])], ["y"], mode="custom")
    x = _rand(rng, (1, 12, 12, cin))
    filters = [_rand(rng, [3, 3, cin, cout]) * 0.1 for _ in range(2)]
    m = runtime.Model(data, lib=litert_lib)
    try:
        for step, k in enumerate([0, 0, 0, 1, 1, 0]):  # calls 2-3 pack and reuse; then a new filter, and back
            got = m.run({"x": x, "f": filters[k]})["y"]
            close("YoloConvBnLeaky", got, spec.reference(x, filters[k], *rest, strides=[1, 1, 1, 1], padding="SAME"),
                  what=f"call {step + 1}, filter {k}")
    finally:
        m.close()
