"""`bridge export --to tflite` and the `tflite` parity runtimes.

Judges: the numpy float64 references of bridge.ops (each op lowered alone), and
the unfused Keras model in TensorFlow (whole models). The files themselves are
read back with bridge.tflite_inspect (flatbuffer schema + FlexBuffer), whose own
tests are in tests/test_inspect.py."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import tensorflow as tf

from bridge import modelsource, ops, tf_ops
from bridge.cli import main
from bridge.converters import export_tflite as ex
from bridge.parity import verify
from bridge.parity.runtimes.tflite import run_tflite
from bridge.converters.fuse_layers import FusedConvBnLeaky, FusedLayerNormalization, FusedYoloDecode
from bridge.exporting import OptionError
from bridge.tflite_inspect import inspect_tflite
from case_rows import example_params, is_empty, outputs
from conftest import rule_excess, unfused_outputs

FLOAT32 = 1e-4  # bridge parity's float32 default (atol = rtol), per element
YOLO_ARGS = dict(input_shapes=["?,96,96,3"], config={"width": 0.25, "decode": True}, seed=3)
BERT_ARGS = dict(input_shapes=["token_ids:?,16"], seed=3,
                 config={"layers": 2, "hidden": 64, "heads": 4, "intermediate": 128, "vocab_size": 500})


def _rand(rng, shape, low=0.0):
    """Random non-zero values (normal, pushed away from 0, or uniform above `low`)."""
    if low:
        return rng.uniform(low, low + 1.0, shape).astype(np.float32)
    x = rng.standard_normal(shape).astype(np.float32)
    return np.where(np.abs(x) < 1e-3, np.float32(0.5), x)


def _spec(name, shape):
    return tf.TensorSpec(shape, tf.float32, name=name)


def _export_op(fn, specs_, names, mode="lowered"):
    data = ex.convert(fn, specs_, names, mode=mode)
    return data, inspect_tflite(data)


# -- each op lowered alone, against the numpy reference ------------------------------
def test_fused_layer_norm_lowered(rng, close):
    spec = ops.get("FusedLayerNorm")
    h = 7
    gamma, beta = _rand(rng, [h]), _rand(rng, [h])
    data, info = _export_op(lambda x: tf_ops.fused_layer_norm(x, gamma, beta, epsilon=1e-5),
                            [_spec("x", [None, None, h])], ["y"])
    assert not info.custom and "MEAN" in info.ops and "RSQRT" in info.ops, dict(info.ops)
    for shape in [(2, 5, h), (1, 1, h), (3, 4, h), (0, 3, h)]:
        x = _rand(rng, shape) * 3 + 1
        got = run_tflite(data, {"x": x})["y"]
        close("FusedLayerNorm", got, spec.reference(x, gamma, beta, epsilon=1e-5), what=str(shape))


@pytest.mark.parametrize("attrs", [
    dict(strides=[1, 2, 2, 1], padding="SAME"),
    dict(padding="VALID", dilations=[1, 2, 2, 1], epsilon=1e-3, alpha=0.2),
    dict(padding="EXPLICIT", explicit_paddings=[0, 0, 1, 2, 0, 1, 0, 0], strides=[1, 1, 2, 1]),
], ids=["same-s2", "valid-d2", "explicit"])
def test_yolo_conv_bn_leaky_lowered(rng, close, attrs):
    spec = ops.get("YoloConvBnLeaky")
    cin, cout = 3, 5
    params = [_rand(rng, [3, 3, cin, cout]), _rand(rng, [cout]), _rand(rng, [cout]), _rand(rng, [cout]),
              _rand(rng, [cout]), _rand(rng, [cout], low=0.5)]
    data, info = _export_op(lambda x: tf_ops.yolo_conv_bn_leaky(x, *params, **attrs),
                            [_spec("x", [None, None, None, cin])], ["y"])
    # the BN fold happened at conversion: one convolution with folded weights, no arithmetic left
    assert not info.custom and info.ops["CONV_2D"] == 1 and info.ops["LEAKY_RELU"] == 1, dict(info.ops)
    assert not {"SQRT", "RSQRT", "DIV"} & set(info.ops), dict(info.ops)
    for shape in [(1, 7, 9, cin), (2, 11, 10, cin), (1, 5, 5, cin), (0, 7, 9, cin)]:
        x = _rand(rng, shape)
        # An empty batch through PAD (EXPLICIT) fails in the XNNPack delegate ("BytesRequired
        # number of elements overflowed"), a runtime bug; TFLite's builtin kernels take it.
        got = run_tflite(data, {"x": x}, delegates=shape[0] > 0)["y"]
        close("YoloConvBnLeaky", got, spec.reference(x, *params, **attrs), what=str(shape))


def test_yolo_decode_lowered(rng, close):
    spec = ops.get("YoloDecode")
    attrs = dict(anchors=[10.0, 13.0, 33.0, 23.0], num_classes=3, stride=8, scale_x_y=1.05)
    names = [o.name for o in spec.outputs]
    data, info = _export_op(lambda raw: tf_ops.yolo_decode(raw, **attrs), [_spec("raw", [None, None, None, 16])],
                            names)
    assert not info.custom and {"LOGISTIC", "EXP"} <= set(info.ops), dict(info.ops)
    for shape in [(2, 3, 5, 16), (1, 1, 1, 16), (0, 2, 2, 16)]:
        raw = _rand(rng, shape)
        got = run_tflite(data, {"raw": raw})
        for name, ref in zip(names, spec.reference(raw, **attrs)):
            close("YoloDecode", got[name], ref, what=f"{name} {shape}")



@pytest.mark.parametrize("spec,example", example_params(per_op=5, seed="tflite"))
def test_every_op_lowered_passes_its_case_table(spec, example, close):
    """Each built-in op's shared case table (bridge/ops/cases.py), lowered alone
    (the first input fed with its batch dynamic, the others constants): builtins
    only, against the numpy float64 reference of the float32 values fed. A
    seeded 5 rows per op (the first, an empty one): a conversion costs ~0.3 s."""
    first, *rest = example.cast("float32")
    fn_op, name = getattr(tf_ops, spec.module), spec.inputs[0].name
    shape = [None, *first.shape[1:]] if first.ndim > 1 else list(first.shape)
    data, info = _export_op(lambda x: fn_op(x, *rest, **example.attrs), [_spec(name, shape)],
                            [o.name for o in spec.outputs])
    assert not info.custom, dict(info.ops)
    # XNNPack refuses some empty batches (see test_yolo_conv_bn_leaky_lowered): TFLite's own kernels there
    got = run_tflite(data, {name: first}, delegates=not is_empty(example))
    for out, ref in zip(spec.outputs, outputs(spec.reference(first, *rest, **example.attrs))):
        close(spec.name, got[out.name], ref, what=f"{example.id} {out.name}")

def test_custom_mode_keeps_op_with_attributes(rng):
    gamma, beta = _rand(rng, [6]), _rand(rng, [6])
    _, info = _export_op(lambda x: tf_ops.fused_layer_norm(x, gamma, beta, epsilon=3e-4),
                         [_spec("x", [None, 6])], ["y"], mode="custom")
    assert info.custom_codes == Counter({"FusedLayerNorm": 1}) and not info.builtin_ops, dict(info.ops)
    attrs = info.custom[0].attrs
    assert attrs["epsilon"] == pytest.approx(3e-4, rel=1e-7)
    assert attrs["T"] == 0  # TFLite's TensorType FLOAT32


# -- whole models: YOLOv3-tiny and BERT, small ---------------------------------------
@pytest.fixture(scope="module")
def yolo():
    return modelsource.resolve("yolov3-tiny", **YOLO_ARGS)


@pytest.fixture(scope="module")
def bert():
    return modelsource.resolve("bert", **BERT_ARGS)


def _recheck(result, source, bound):
    """The written file, run here on the exporter's inputs (seed 0), against the
    unfused Keras model called eagerly, under docs/ops.md's rule with atol = rtol =
    `bound` per element, computed here: {output: max abs error}. Never the
    exporter's own `checks[].passed`."""
    feeds = source.sample_inputs(seed=0)
    with open(result.output, "rb") as f:
        got = run_tflite(f.read(), feeds)
    ref = unfused_outputs(source, feeds)
    assert sorted(got) == sorted(ref)
    for name in ref:
        excess = rule_excess(got[name], ref[name], bound, bound)
        assert excess <= 1, f"{result.output} {name}: {excess:.3g}x the bound {bound:g} * max(1, |ref|)"
    return {name: float(np.max(np.abs(got[name] - ref[name]))) for name in ref}


def _expected_custom(source):
    """(op, attrs) of every fused layer of the fused model: what custom mode must keep."""
    from bridge.converters import fuse
    fused, _ = fuse(source.model)
    out = []
    for layer in fused.layers:
        if isinstance(layer, FusedConvBnLeaky):
            out.append(("YoloConvBnLeaky", layer.op_attrs))
        elif isinstance(layer, FusedLayerNormalization):
            out.append(("FusedLayerNorm", {"epsilon": layer.epsilon}))
        elif isinstance(layer, FusedYoloDecode):
            out.append(("YoloDecode", layer.op_attrs))
    return out


def _canonical(op, attrs):
    """Resolved attributes, floats at float32 (what the FlexBuffer holds)."""
    attrs = ops.get(op).resolve({k: v for k, v in attrs.items() if k != "T"})
    f32 = lambda v: float(np.float32(v))  # noqa: E731
    return op, tuple(sorted((k, tuple(f32(x) if isinstance(x, float) else x for x in v) if isinstance(v, tuple)
                             else f32(v) if isinstance(v, float) else v) for k, v in attrs.items()))


@pytest.mark.parametrize("name", ["yolo", "bert"])
def test_model_lowered_builtins_only_and_matches_tf(request, tmp_path, name):
    source = request.getfixturevalue(name)
    result = verify.export(ex, source, str(tmp_path / f"{name}.tflite"), mode="lowered")
    info = inspect_tflite(result.output)
    assert not info.custom and info.ops, dict(info.ops)
    if name == "yolo":
        n_conv = sum(op == "YoloConvBnLeaky" for op, _ in _expected_custom(source))
        assert info.ops["LEAKY_RELU"] == n_conv and info.ops["CONV_2D"] >= n_conv, dict(info.ops)
    assert [c.output for c in result.checks] == source.output_names
    errors = _recheck(result, source, FLOAT32)
    for c in result.checks:  # the exporter's own verdict agrees with the recomputed one
        assert c.passed and c.max_abs_error == pytest.approx(errors[c.output], rel=0.01, abs=1e-6), (c, errors)


@pytest.mark.parametrize("name", ["yolo", "bert"])
def test_model_custom_keeps_exactly_the_fused_ops(request, tmp_path, name):
    source = request.getfixturevalue(name)
    result = verify.export(ex, source, str(tmp_path / f"{name}.tflite"), mode="custom")
    info = inspect_tflite(result.output)
    expected = _expected_custom(source)
    assert expected, "the fusion found nothing to fuse"
    assert info.custom_codes == Counter(op for op, _ in expected)
    assert sorted(_canonical(c.code, c.attrs) for c in info.custom) == sorted(_canonical(*e) for e in expected)
    assert "custom ops the runtime must provide" in "\n".join(result.summary)
    # run here on bridge's LiteRT kernels; each verdict agrees with the one recomputed here
    assert [c.output for c in result.checks] == source.output_names and not result.not_verified
    from bridge.litert import runtime
    feeds = source.sample_inputs(seed=0)
    got = runtime.run_tflite_custom(result.output, feeds)
    ref = unfused_outputs(source, feeds)
    for c in result.checks:
        assert c.passed and rule_excess(got[c.output], ref[c.output], FLOAT32, FLOAT32) <= 1, c


def _conv_rule():
    from bridge import ops
    return ops.part(ops.get("YoloConvBnLeaky"), "bench").litert_prefers_builtins


def test_the_litert_conv_rule_follows_the_cpu():
    """bench.py's rule: pointwise convolutions to builtins everywhere; without AVX-512
    every one with 8 or more input channels too; the 3-channel first layer stays custom."""
    rule = _conv_rule()
    avx512, avx2 = True, False
    x = (1, 52, 52, 256)
    for filt, on_avx512, on_avx2 in [((1, 1, 256, 128), True, True), ((3, 3, 256, 512), False, True),
                                     ((3, 3, 3, 32), False, False), ((3, 3, 8, 16), False, True)]:
        assert rule([x, filt], {}, avx512) == on_avx512 and rule([x, filt], {}, avx2) == on_avx2, filt
    assert rule([x], {}, avx2) is False


def test_fastest_mode_lowers_the_convs_bench_names_and_keeps_the_rest_custom(yolo, tmp_path):
    """--mode fastest: each YoloConvBnLeaky bench.py's litert_prefers_builtins names for
    this CPU becomes builtins (XNNPack is faster there: pointwise ones, and on a CPU
    without AVX-512 all but the first), every other fused op stays custom; the file runs
    on bridge's LiteRT kernels within float32 of the unfused model."""
    from bridge import cpu_flags
    from bridge.converters import fuse
    fused, _ = fuse(yolo.model)
    convs = [tuple(layer.kernel.shape) for layer in fused.layers if isinstance(layer, FusedConvBnLeaky)]
    lowered = sum(bool(_conv_rule()([None, k], {}, cpu_flags.has_avx512_core())) for k in convs)
    assert 0 < lowered < len(convs), convs  # the check below could not tell the modes apart otherwise
    result = verify.export(ex, yolo, str(tmp_path / "f.tflite"), mode="fastest")
    info = inspect_tflite(result.output)
    kept = Counter(op for op, _ in _expected_custom(yolo))
    kept["YoloConvBnLeaky"] -= lowered
    assert info.custom_codes == +kept, (dict(info.custom_codes), convs)
    assert info.ops["LEAKY_RELU"] == lowered and info.ops["CONV_2D"] >= lowered, dict(info.ops)
    assert not result.not_verified and all(c.passed for c in result.checks), result.checks
    from bridge.litert import runtime
    feeds = yolo.sample_inputs(seed=1)
    got = runtime.run_tflite_custom(result.output, feeds)
    ref = unfused_outputs(yolo, feeds)
    for name in yolo.output_names:
        assert rule_excess(got[name], ref[name], FLOAT32, FLOAT32) <= 1, name


@pytest.mark.parametrize("quantize", ["float16", "dynamic"])
def test_quantized_export_within_stated_bound(bert, tmp_path, quantize):
    plain = verify.export(ex, bert, str(tmp_path / "plain.tflite"))
    quant = verify.export(ex, bert, str(tmp_path / f"{quantize}.tflite"), quantize=quantize)
    weights = inspect_tflite(quant.output).weights
    assert ("float16" if quantize == "float16" else "int8") in weights, weights
    assert quant.details["size"] < plain.details["size"]
    plain_err = _recheck(plain, bert, FLOAT32)
    quant_err = _recheck(quant, bert, ex.QUANTIZE_BOUND[quantize])
    for p, q in zip(plain.checks, quant.checks):
        assert q.passed and q.max_abs_error == pytest.approx(quant_err[q.output], rel=0.01), (q, quant_err)
        assert quant_err[q.output] > 10 * plain_err[p.output], (quant_err, plain_err)  # quantisation did something


@pytest.mark.parametrize("quantize", ["float16", "dynamic"])
def test_quantised_bound_is_per_element(quantize):
    """The exporter's check and the parity runtime hold a 2.4 px box to 2.4 px
    times the bound, not to the 600 px box beside it (docs/ops.md's rule)."""
    from bridge.parity.verify import compare_outputs
    from bridge.parity import compare as cmp
    from bridge.parity.runtimes import discover
    bound = ex.QUANTIZE_BOUND[quantize]
    ref = np.array([[600.0, 2.4, 0.5, 0.25]], np.float32)
    allowed = bound * np.maximum(1.0, ref)
    runtime = cmp.Tolerance(*discover()[0][f"tflite-{quantize}"].tolerance)
    for i in range(ref.size):
        for factor, passes in ((0.9, True), (1.1, False)):
            got = ref.astype(np.float64)
            got[0, i] += factor * allowed[0, i]
            [check] = compare_outputs({"y": got}, {"y": ref}, bound=bound)
            assert check.passed == passes and cmp.compare(got, ref, runtime).passed == passes, (i, factor, check)


def test_parity_runtimes_resize_and_report_quantisation(yolo):
    from bridge.parity.runner import run_parity
    report = run_parity(yolo.model, runtimes=["tflite", "tflite-float16", "tflite-dynamic"], batch=2)
    rows = {r.name: r for r in report.runtimes}
    for name in ("tflite", "tflite-float16", "tflite-dynamic"):
        assert rows[name].status == "ok", rows[name].reason
        assert set(rows[name].outputs) == set(yolo.output_names)
        for out, c in rows[name].outputs.items():
            assert c.passed and c.shape[0] == 2, (name, out, c)  # batch 2 through a file exported at batch ?
    boxes = {n: rows[n].outputs["boxes"].max_abs_error for n in rows if n.startswith("tflite")}
    assert boxes["tflite"] < boxes["tflite-float16"] and boxes["tflite"] < boxes["tflite-dynamic"], boxes
    assert report.passed


# -- what TFLite cannot take -----------------------------------------------------------
def _saved_model(path, fn, width=4):
    class M(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, width], tf.float32, name="x")])
        def __call__(self, x):
            return {"y": fn(x)}
    m = M()
    tf.saved_model.save(m, str(path), signatures=m.__call__)
    return str(path)


@pytest.fixture(scope="module")
def igamma_model(tmp_path_factory):
    return _saved_model(tmp_path_factory.mktemp("igamma") / "sm", lambda x: tf.math.igamma(x * x + 1.0, x * x + 2.0))


@pytest.mark.parametrize("mode", ["lowered", "custom"])
def test_unsupported_op_fails_with_name_and_reason(tmp_path, capsys, igamma_model, mode):
    out = tmp_path / "bad.tflite"
    rc = main(["export", igamma_model, "--to", "tflite", "--mode", mode, "-o", str(out), "--no-fuse"])
    _, err = capsys.readouterr()
    assert rc == 1
    assert "TFLite cannot take op Igamma" in err and "Traceback" not in err, err[-2000:]
    if mode == "lowered":
        assert "neither a custom op nor a flex op" in err
    else:
        assert "only bridge's fused ops" in err
    assert not out.exists() and not list(tmp_path.iterdir())  # no file, not even a temporary one


def test_fused_op_in_savedmodel_lowers_to_its_composite_or_stays_custom(tmp_path):
    """A SavedModel that already holds FusedLayerNorm: lowered, the op becomes
    its body's composite (builtins only, against the numpy float64 reference);
    custom keeps it as the CUSTOM op."""
    g, b = np.linspace(0.5, 1.5, 4, dtype=np.float32), np.linspace(-1, 1, 4, dtype=np.float32)
    path = _saved_model(tmp_path / "sm", lambda x: tf_ops.fused_layer_norm(x, g, b))
    source = modelsource.resolve(path)
    out_file = tmp_path / "x.tflite"
    verify.export(ex, source, str(out_file), mode="lowered", fuse=False)
    info = inspect_tflite(str(out_file))
    assert not info.custom and info.builtin_ops, dict(info.ops)
    x = np.random.default_rng(3).standard_normal((3, 4)).astype("float32") * 2 + 0.5
    got = next(iter(run_tflite(out_file.read_bytes(), {"x": x}).values()))
    spec = ops.get("FusedLayerNorm")
    assert spec.tolerance["float32"].excess(got, spec.reference(x, g, b, epsilon=1e-6)) <= 1
    result = verify.export(ex, source, str(tmp_path / "c.tflite"), mode="custom", fuse=False)
    assert set(result.details["custom_ops"]) == {"FusedLayerNorm"}


def test_fastest_mode_lowers_a_savedmodels_pointwise_conv_node_only(tmp_path):
    """A SavedModel holding two YoloConvBnLeaky nodes, 3x3 then 1x1: graph-level
    `fastest` lowers the 1x1 node to builtins and keeps the 3x3 one custom; the file
    runs on bridge's LiteRT kernels against the numpy float64 reference."""
    rng = np.random.default_rng(5)
    spec = ops.get("YoloConvBnLeaky")
    params = {k: [_rand(rng, [k, k, c, n]) * 0.2, _rand(rng, [n]), _rand(rng, [n]), _rand(rng, [n]), _rand(rng, [n]),
                  _rand(rng, [n], low=0.5)] for k, c, n in [(3, 5, 6), (1, 6, 7)]}

    def fn(x):
        h = tf_ops.yolo_conv_bn_leaky(x, *params[3], strides=[1, 1, 1, 1], padding="SAME")
        return tf_ops.yolo_conv_bn_leaky(h, *params[1], strides=[1, 1, 1, 1], padding="VALID")

    class M(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 9, 7, 5], tf.float32, name="x")])
        def __call__(self, x):
            return {"y": fn(x)}
    m = M()
    tf.saved_model.save(m, str(tmp_path / "sm"), signatures=m.__call__)
    result = verify.export(ex, modelsource.resolve(str(tmp_path / "sm")), str(tmp_path / "f.tflite"),
                           mode="fastest", fuse=False)
    info = inspect_tflite(result.output)
    assert info.custom_codes == Counter({"YoloConvBnLeaky": 1}) and info.ops["LEAKY_RELU"] == 1, dict(info.ops)
    assert info.custom[0].attrs["padding"] == "SAME", info.custom[0].attrs  # the 3x3 node is the one kept
    from bridge.litert import runtime
    for shape in [(1, 9, 7, 5), (2, 9, 7, 5)]:
        x = _rand(rng, shape)
        got = next(iter(runtime.run_tflite_custom(result.output, {"x": x}).values()))
        h = spec.reference(x, *params[3], strides=[1, 1, 1, 1], padding="SAME")
        want = spec.reference(h, *params[1], strides=[1, 1, 1, 1], padding="VALID")
        assert spec.tolerance["float32"].excess(got, want) <= 1, shape


def test_custom_mode_is_verified_on_bridges_litert_kernels_and_lists_its_custom_ops(tmp_path, capsys, monkeypatch):
    """Verification on: the custom-mode file runs here on bridge's LiteRT kernels
    (judged here too, against the numpy reference); the report lists each custom
    op with its custom_code, version and FlexBuffer keys. Without the kernels
    the file is reported as not run, and why; --no-verify says so."""
    from bridge import ops
    g, b = np.linspace(0.5, 1.5, 4, dtype=np.float32), np.linspace(-1, 1, 4, dtype=np.float32)
    path = _saved_model(tmp_path / "sm", lambda x: tf_ops.fused_layer_norm(x, g, b))
    out_file = tmp_path / "x.tflite"
    argv = ["export", path, "--to", "tflite", "--mode", "custom", "-o", str(out_file)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "custom_code 'FusedLayerNorm' version 1: FlexBuffer keys" in out and "epsilon" in out, out
    assert "not verified" not in out, out
    from bridge.litert import runtime
    x = np.random.default_rng(0).standard_normal((2, 4))
    got = next(iter(runtime.run_tflite_custom(str(out_file), {"x": x.astype("float32")}).values()))
    ref = ops.get("FusedLayerNorm").reference(x, g, b, epsilon=1e-6)
    assert ops.get("FusedLayerNorm").tolerance["float32"].excess(got, ref) <= 1
    monkeypatch.setattr(ex, "_kernels_serve", lambda codes: False)
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "not verified (custom ops: bridge's LiteRT kernels do not serve them" in out, out
    assert main(argv + ["--no-verify"]) == 0
    out = capsys.readouterr().out
    assert "not verified (--no-verify)" in out, out
    assert main(argv + ["--json"]) == 0
    import json
    result = json.loads(capsys.readouterr().out)
    assert result["checks"] == [] and result["not_verified"] == ex.NO_CUSTOM_KERNELS


def test_parity_reports_unsupported_op_as_unavailable(igamma_model):
    from bridge.parity.runner import run_parity
    report = run_parity(igamma_model, runtimes=["tflite"])
    row = next(r for r in report.runtimes if r.name == "tflite")
    assert row.status == "unavailable" and "Igamma" in row.reason, (row.status, row.reason)


def test_bad_options(tmp_path, capsys, yolo):
    with pytest.raises(OptionError, match="--quantize int4"):
        ex.check_options("lowered", "int4")
    with pytest.raises(OptionError, match="--mode flex"):
        ex.check_options("flex", "none")
    with pytest.raises(OptionError, match="--opset"):
        verify.export(ex, yolo, str(tmp_path / "x.tflite"), opset=13)
    assert main(["export", "yolov3-tiny", "--to", "tflite", "--mode", "flex", "-o", str(tmp_path / "x")]) == 2
    assert "--mode flex" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_tflite_column_is_read_from_the_litert_kernels(monkeypatch):
    """`bridge ops`' TFLite cell is "yes" only for ops the built LiteRT library
    serves; an op it lacks is said to be lowered only."""
    from bridge import litert
    from bridge.litert import runtime
    served = {op for op, why in runtime.served_ops().items() if why is None}
    for spec in ops.all_specs():
        assert (litert.backend_status(spec)["tflite"] == "yes") == (spec.name in served), spec.name
    monkeypatch.setattr(runtime, "served_ops", lambda lib=None: {"FusedLayerNorm": None})
    assert litert.backend_status(ops.get("YoloDecode"))["tflite"] != "yes"
