"""`bridge export --to ge` on thin YOLOv3 and a small BERT, both parser modes:
ATC-clean, every origin type registered, both plugin routes match TensorFlow."""
from __future__ import annotations

import os

import numpy as np
import onnx
import pytest

from bridge import ops
from bridge.ascend import atc_support, opp
from bridge.ascend.origins import model_opsets, node_origin, registered_in_dir
from bridge.cli import main
from bridge.exporting import OptionError
from conftest import rule_excess, unfused_outputs

MODELS = {
    "yolov3": dict(config=dict(width=0.0625, num_classes=2, decode=True), shapes=["image:1,64,64,3"]),
    "bert": dict(config=dict(layers=1, hidden=32, heads=2, intermediate=64, vocab_size=50, max_position=16, input_size=8),
                 shapes=None),
}
CASES = [("yolov3", "new", 11), ("yolov3", "legacy", 13), ("bert", "new", 13), ("bert", "legacy", 12)]


def _source(name):
    from bridge import modelsource
    cfg = MODELS[name]
    return modelsource.resolve(name, input_shapes=cfg["shapes"], batch=1, config=cfg["config"])


@pytest.fixture(scope="module", params=CASES, ids=lambda c: f"{c[0]}-{c[1]}-opset{c[2]}")
def exported(request, tmp_path_factory):
    from bridge.converters import export_ge
    from bridge.parity import verify
    name, parser, opset = request.param
    out = str(tmp_path_factory.mktemp("ge") / f"{name}_ge")
    source = _source(name)
    return name, parser, opset, out, verify.export(export_ge, source, out, opset=opset, parser=parser, seed=1), source


def test_both_routes_match_tensorflow(exported):
    """Recomputed here, not read from the exporter's checks: the written
    model.onnx on both routes, fed the written inputs, against the unfused Keras
    model called eagerly, under docs/ops.md's rule (float32 parity default, per
    element)."""
    from bridge.parity.verify import ge_routes
    _, _, _, out, result, source = exported
    feeds = dict(np.load(os.path.join(out, "inputs", "inputs.npz")))
    ref = unfused_outputs(source, feeds)
    routes = ge_routes(onnx.load(os.path.join(out, "model.onnx")), feeds)
    assert set(routes) == {"custom", "builtin"}
    own = {c.output: c for c in result.checks}
    for route, got in routes.items():
        assert sorted(got) == sorted(ref), route
        for output, r in ref.items():
            excess = rule_excess(got[output], r, 1e-4, 1e-4)
            assert excess <= 1, f"{route} {output}: {excess:.3g}x the float32 bound"
            # the exporter's verifier and this test both judge against the unfused model
            check = own[f"{output} [{route}]"]
            assert check.passed and 0 < check.max_abs_error < np.inf, check


def test_model_is_laid_out_for_atc(exported):
    name, parser, opset, out, _, _ = exported
    model = onnx.load(os.path.join(out, "model.onnx"))
    assert len(model.functions) == 0
    opsets = model_opsets(model)
    assert opsets["ai.onnx"] == opset
    for inp in model.graph.input:
        assert all(d.dim_value > 0 for d in inp.type.tensor_type.shape.dim), inp
    custom = [n for n in model.graph.node if n.op_type in ops.SPECS]
    assert custom, "the fused ops should be in the model"
    if parser == "legacy":
        assert list(opsets) == ["ai.onnx"] and all(n.domain == "" for n in custom)
    else:
        assert opsets.get(ops.DOMAIN) == 1 and all(n.domain == ops.DOMAIN for n in custom)
    # every node's origin type is registered: the CSV for standard ops (every CANN for
    # opsets 11-13), the generated plugin sources for ours
    registered = registered_in_dir(os.path.join(out, "opp"))
    for n in model.graph.node:
        origin = node_origin(n, opsets)
        if n.op_type in ops.SPECS:
            assert origin in registered, origin
        else:
            assert atc_support.is_registered(n.op_type, opset, 5 if opset <= 13 else 8), origin


def test_files_and_atc_check(exported, capsys):
    name, parser, opset, out, result, _ = exported
    for rel in ("model.onnx", "atc.sh", "README.md", "opp/install.sh", "opp/CMakeLists.txt",
                "opp/framework/tensorflow/npu_supported_ops.json", "inputs/inputs.npz"):
        assert os.path.join(out, rel) in result.files and os.path.isfile(os.path.join(out, rel)), rel
    assert os.access(os.path.join(out, "atc.sh"), os.X_OK) and os.access(os.path.join(out, "opp/install.sh"), os.X_OK)
    assert sorted(os.listdir(os.path.join(out, "opp"))) == sorted({p.split("/")[0] for p in opp.package_files()})
    atc = open(os.path.join(out, "atc.sh")).read()
    model = onnx.load(os.path.join(out, "model.onnx"))
    shape_arg = ";".join(f"{i.name}:" + ",".join(str(d.dim_value) for d in i.type.tensor_type.shape.dim)
                         for i in model.graph.input)
    assert f"input_shape='{shape_arg}'" in atc and '--input_shape="$input_shape"' in atc
    assert "--framework=5" in atc and "ASCEND_CUSTOM_OPP_PATH" in atc
    readme = open(os.path.join(out, "README.md")).read()
    assert "install.sh" in readme and "atc.sh" in readme and "msame" in readme and "--load-outputs ge=" in readme
    cann = ["--cann", "6"] if parser == "legacy" else []
    assert main(["ascend", "check", os.path.join(out, "model.onnx"), "--plugins", os.path.join(out, "opp"), *cann]) == 0
    assert "clean" in capsys.readouterr().out


@pytest.mark.parametrize("kwargs,message", [(dict(opset=16), r"--opset 16: --to ge writes opsets 11..15"),
                                            (dict(parser="old"), r"--parser old")])
def test_bad_options(tmp_path, kwargs, message):
    from bridge.converters import export_ge
    from bridge.parity import verify
    with pytest.raises(OptionError, match=message):
        verify.export(export_ge, _source("yolov3"), str(tmp_path / "x"), **kwargs)
    assert not os.path.exists(tmp_path / "x")
