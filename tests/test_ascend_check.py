"""`bridge ascend check`: each problem ATC would reject, on a model built to have it."""
from __future__ import annotations

import json

import onnx
import pytest
from onnx import TensorProto, helper

from bridge.ascend import opp, to_legacy
from bridge.ascend.origins import registered_in_source
from bridge.ascend.preflight import check, parse_input_shapes
from bridge.cli import main
from ascend_models import CASES, one_op_model

PLUGINS = set().union(*(registered_in_source(t) for p, t in opp.package_files().items() if p.endswith(".cc")))


def _std_model(op_type, opset, inputs=1, shape=(1, 4), **attrs):
    ins = [helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, shape) for i in range(inputs)]
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    node = helper.make_node(op_type, [f"x{i}" for i in range(inputs)], ["y"], name="n", **attrs)
    return helper.make_model(helper.make_graph([node], "g", ins, [out]), opset_imports=[helper.make_opsetid("", opset)])


def _codes(findings):
    return [f.code for f in findings]


def test_clean_models_are_clean():
    assert check(_std_model("Relu", 11)) == []
    for name, cases in CASES.items():
        assert check(one_op_model(name, *cases[0], opset=11), plugins=PLUGINS) == []
        assert check(to_legacy(one_op_model(name, *cases[0], opset=13)), plugins=PLUGINS, cann=5) == []


def test_unregistered_standard_op():
    found = check(_std_model("LayerNormalization", 13, inputs=2))
    assert _codes(found) == ["unregistered-op"]
    assert "ai.onnx::13::LayerNormalization" in found[0].problem and "opsets 17-18" in found[0].problem
    assert check(_std_model("LayerNormalization", 17, inputs=2)) == []
    assert _codes(check(_std_model("DFT", 17))) == ["unregistered-op"]


def test_older_cann_narrows_opsets_to_9_13():
    model = _std_model("Relu", 15)
    assert check(model, cann=8) == []
    found = check(model, cann=5)
    assert _codes(found) == ["unregistered-op"] and "CANN 5" in found[0].problem
    assert _codes(check(_std_model("LayerNormalization", 17, inputs=2), cann=6)) == ["unregistered-op"]


def test_custom_op_without_plugin_and_with_the_wrong_origin():
    model = one_op_model("FusedLayerNorm", *CASES["FusedLayerNorm"][0], opset=11)
    found = check(model)
    assert _codes(found) == ["no-plugin"] and "com.bridge::1::FusedLayerNorm" in found[0].problem
    legacy = to_legacy(one_op_model("FusedLayerNorm", *CASES["FusedLayerNorm"][0], opset=11))
    found = check(legacy, plugins={"ai.onnx::13::FusedLayerNorm"})
    assert _codes(found) == ["unregistered-op"] and found[0].origin_type == "ai.onnx::11::FusedLayerNorm"


def test_domain_missing_from_opset_import():
    model = one_op_model("YoloDecode", *CASES["YoloDecode"][1], opset=11)
    del model.opset_import[1:]
    found = check(model, plugins=PLUGINS)
    assert _codes(found) == ["missing-domain"] and "'com.bridge' is not in the model's opset_import" in found[0].problem


def test_mixed_domains_under_the_legacy_parser_only():
    model = one_op_model("YoloDecode", *CASES["YoloDecode"][1], opset=11)
    model.graph.node.append(helper.make_node("Identity", ["boxes"], ["boxes2"], name="id"))
    assert check(model, plugins=PLUGINS, parser="new") == []
    found = check(model, plugins=PLUGINS, parser="legacy")
    assert _codes(found) == ["mixed-domains"] and "E16005" in found[0].problem
    assert _codes(check(model, plugins=PLUGINS, cann=6)) == ["mixed-domains"]  # 5/6 imply legacy


def test_model_local_function():
    model = one_op_model("FusedLayerNorm", *CASES["FusedLayerNorm"][0], opset=11)
    model.functions.append(helper.make_function("com.bridge", "FusedLayerNorm", ["x", "gamma", "beta"], ["y"],
                                                [helper.make_node("Identity", ["x"], ["y"])],
                                                [helper.make_opsetid("", 11)]))
    found = check(model, plugins=PLUGINS)
    assert _codes(found) == ["local-function"] and "com.bridge::FusedLayerNorm" in found[0].problem


def test_dynamic_shape_needs_input_shape():
    model = _std_model("Relu", 11, shape=("N", 4))
    found = check(model)
    assert _codes(found) == ["dynamic-shape"] and "[N,4]" in found[0].problem and "--input-shape x0:" in found[0].problem
    assert check(model, input_shapes={"x0": [1, 4]}) == []


def test_parse_input_shapes():
    assert parse_input_shapes("x:1,3,416,416;y:1,128") == {"x": [1, 3, 416, 416], "y": [1, 128]}
    with pytest.raises(ValueError, match="'x' is not NAME:d0,d1"):
        parse_input_shapes("x")
    with pytest.raises(ValueError, match="must be positive"):
        parse_input_shapes("x:1,-1")
    with pytest.raises(ValueError, match="must be integers"):
        parse_input_shapes("x:1,a")


def test_cli_exit_codes_table_and_json(tmp_path, capsys):
    bad = tmp_path / "bad.onnx"
    onnx.save(_std_model("DFT", 17, shape=("N", 4)), str(bad))
    assert main(["ascend", "check", str(bad)]) == 1
    out = capsys.readouterr().out
    assert "unregistered-op" in out and "dynamic-shape" in out and "2 problem(s)" in out
    assert main(["ascend", "check", str(bad), "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["clean"] is False and sorted(_f["code"] for _f in data["findings"]) == ["dynamic-shape", "unregistered-op"]

    good = tmp_path / "good.onnx"
    onnx.save(one_op_model("YoloDecode", *CASES["YoloDecode"][0], opset=11), str(good))
    plugins = tmp_path / "plugins"  # not "opp" beside the model: that is a GE bundle's own, used without --plugins
    (plugins / "src").mkdir(parents=True)
    (plugins / "src" / "p.cc").write_text(opp.package_files()[opp.plugin_file(__import__("bridge.ops").ops.get("YoloDecode"))])
    assert main(["ascend", "check", str(good)]) == 1
    capsys.readouterr()
    assert main(["ascend", "check", str(good), "--plugins", str(plugins)]) == 0
    assert "clean" in capsys.readouterr().out


def test_cli_usage_errors(tmp_path, capsys):
    assert main(["ascend", "check", str(tmp_path / "missing.onnx")]) == 2
    assert "no such file" in capsys.readouterr().err
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"not a model")
    assert main(["ascend", "check", str(junk)]) == 2
    assert "is not an ONNX model" in capsys.readouterr().err
    good = tmp_path / "m.onnx"
    onnx.save(_std_model("Relu", 11), str(good))
    assert main(["ascend", "check", str(good), "--input-shape", "x0"]) == 2
    assert "--input-shape part 'x0'" in capsys.readouterr().err
    assert main(["ascend", "check", str(good), "--plugins", str(tmp_path / "nope")]) == 2
    assert "not a folder" in capsys.readouterr().err
