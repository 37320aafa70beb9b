"""The built-in (GE ParseOpToGraphFn) expansion: runs on plain onnxruntime and
matches the numpy reference; it is the same step list the C++ plugin builds."""
from __future__ import annotations

import re

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto

from bridge import ops
from bridge.ascend import atc_support, expand_builtin, legacy_to_runnable, to_legacy
from bridge.ascend.builtin import decomposition
from bridge.ascend.opp import package_files, plugin_file
from bridge.ascend.render_onnx import step_of
from ascend_cpp_steps import cpp_form, cpp_steps, onnx_steps
from ascend_models import CASES, inputs_for, one_op_model

CASE_IDS = [(n, i) for n, cases in CASES.items() for i in range(len(cases))]


def _run(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


@pytest.mark.parametrize("opset", [11, 13, 17])
@pytest.mark.parametrize("name,case", CASE_IDS)
def test_expansion_matches_reference(name, case, opset, rng, close):
    shapes, attrs = CASES[name][case]
    spec = ops.get(name)
    model = expand_builtin(one_op_model(name, shapes, attrs, opset))
    onnx.checker.check_model(model, full_check=True)
    assert all(n.domain in ("", "ai.onnx") for n in model.graph.node)
    assert [(i.domain, i.version) for i in model.opset_import] == [("", opset)]
    xs = inputs_for(name, shapes, rng)
    got = _run(model, {a.name: x for a, x in zip(spec.inputs, xs)})
    ref = spec.reference_onnx(*xs, **attrs)
    for out, g, r in zip(spec.outputs, got, ref if isinstance(ref, tuple) else (ref,)):
        close(name, g, r, what=f"builtin expansion {out.name} opset {opset}")


@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("name", list(CASES))
def test_expansion_ops_are_registered_by_atc(name, opset):
    shapes, attrs = CASES[name][0]
    model = expand_builtin(one_op_model(name, shapes, attrs, opset))
    for n in model.graph.node:
        for cann in (5, 8):
            assert atc_support.is_registered(n.op_type, opset, cann), (n.op_type, opset, cann)


@pytest.mark.parametrize("name", list(CASES))
def test_onnx_and_cpp_renderings_are_the_same_steps(name):
    shapes, attrs = CASES[name][0]
    spec = ops.get(name)
    steps = decomposition(name).step_ids()
    model = expand_builtin(one_op_model(name, shapes, attrs, 11))
    prefix = f"{name}_node"
    in_onnx = {step_of(x, prefix) for x in [n.name for n in model.graph.node] + [t.name for t in model.graph.initializer]}
    cpp = package_files()[plugin_file(spec)]
    in_cpp = {tuple(m.split("_", 1)) for m in re.findall(r'b\.(?:Make|Const)\("(s\d+_\w+)', cpp)}
    assert set(steps) == in_cpp == in_onnx - {None}
    assert len(steps) == len(in_cpp)


def _ge_attr(attr, value):
    """A node attribute as the plugin's C++ holds it (ParseParams reads floats as float)."""
    if attr.type == "float":
        return np.float32(value)
    if attr.type == "list(float)":
        return np.asarray(value, np.float32)
    return [int(v) for v in value] if attr.is_list else int(value)


def _same_form(a, b) -> bool:
    (ka, ia, pa), (kb, ib, pb) = a, b
    if ka != kb or ia != ib or sorted(pa) != sorted(pb):
        return False
    for k in pa:
        x, y = pa[k], pb[k]
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            if not (np.asarray(x).dtype == np.asarray(y).dtype and np.shape(x) == np.shape(y)
                    and np.array_equal(x, y)):
                return False
        elif x != y or type(x) is not type(y):
            return False
    return True


@pytest.mark.parametrize("name,case", CASE_IDS)
def test_cpp_and_onnx_renderings_agree_step_by_step(name, case):
    """Each step of the plugin's ParseOpToGraphFn (read back from the generated C++, its
    constants evaluated for this node's attributes) against the same step of the ONNX
    expansion: kind and GE operator, inputs (which step, which output, which port), the
    attributes in GE's spelling and order (Conv's pads, LeakyRelu's slope, Cast's dtype,
    ...), and every constant's values, shape and dtype; and the graph's outputs."""
    shapes, attrs = CASES[name][case]
    spec = ops.get(name)
    model = expand_builtin(one_op_model(name, shapes, attrs, 17))
    resolved = spec.resolve_onnx(attrs)
    env = {f"attr_{a.name}": _ge_attr(a, resolved[a.name]) for a in spec.onnx_attrs}
    steps, cpp_out = cpp_steps(package_files()[plugin_file(spec)], spec.name, env)
    onnx, onnx_out = onnx_steps(model, f"{name}_node", len(spec.inputs))
    assert sorted(steps) == sorted(onnx) == sorted(s for s, _ in decomposition(name).step_ids())
    for sid, step in steps.items():
        got = cpp_form(step)
        assert _same_form(got, onnx[sid]), f"{name} {sid}: C++ {got} != ONNX {onnx[sid]}"
    assert cpp_out == onnx_out


def test_legacy_round_trip_runs_on_plain_ort_when_expanded(rng, close):
    shapes, attrs = CASES["YoloDecode"][0]
    legacy = to_legacy(one_op_model("YoloDecode", shapes, attrs, 13))
    assert [n.domain for n in legacy.graph.node] == [""]
    assert [(i.domain, i.version) for i in legacy.opset_import] == [("", 13)]
    back = legacy_to_runnable(legacy)
    assert back.graph.node[0].domain == ops.DOMAIN and ("com.bridge", 1) in [(i.domain, i.version) for i in back.opset_import]
    xs = inputs_for("YoloDecode", shapes, rng)
    got = _run(expand_builtin(legacy), {"raw": xs[0]})
    ref = ops.get("YoloDecode").reference_onnx(*xs, **attrs)
    for g, r in zip(got, ref):
        close("YoloDecode", g, r, what="legacy expansion")


def test_float16_expansion_is_refused_with_the_op_and_input():
    shapes, attrs = CASES["FusedLayerNorm"][0]
    model = one_op_model("FusedLayerNorm", shapes, attrs, 11, dtype=TensorProto.FLOAT16)
    with pytest.raises(ops.OpError, match=r"FusedLayerNorm: argument 'x'.*float32 only.*FLOAT16"):
        expand_builtin(model)


def test_bad_attribute_is_refused_naming_op_and_attribute():
    model = one_op_model("YoloDecode", *CASES["YoloDecode"][1])
    del model.graph.node[0].attribute[:]
    with pytest.raises(ops.OpError, match=r"YoloDecode: argument 'anchors': required attribute is missing"):
        expand_builtin(model)
