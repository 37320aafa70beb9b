"""Every op's GE decomposition comes from its one decomposition, the ONNX body of
its spec (ascend/from_body.py): no hand-written expansion is left, the one
ONNX -> GE table is what the numeric checks exercise, and a body op without a
mapping is named where the user meets it (the pre-flight of a GE export)."""
from __future__ import annotations

import importlib.util
from dataclasses import replace

import inspect

import numpy as np
import onnxruntime as ort
import pytest

from bridge import ops
from bridge.ascend import builtin, expand_builtin, from_body, preflight
from bridge.ascend.opp import package_files, plugin_file
from bridge.ascend.origins import registered_in_source
from ascend_models import CASES, inputs_for, one_op_model

BUILTINS = [s for s in ops.all_specs() if ops.is_builtin(s)]


def _excess(name, case, rng, opset=13):
    """Largest error / tolerance of the GE expansion against the numpy reference."""
    shapes, attrs = CASES[name][case]
    spec = ops.get(name)
    model = expand_builtin(one_op_model(name, shapes, attrs, opset))
    xs = inputs_for(name, shapes, rng)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = sess.run(None, {a.name: x for a, x in zip(spec.inputs, xs)})
    ref = spec.reference_onnx(*xs, **attrs)
    tol = spec.tolerance["float32"]
    return max(tol.excess(g, r) for g, r in zip(got, ref if isinstance(ref, tuple) else (ref,)))


@pytest.fixture
def fresh_decompositions():
    builtin.decomposition.cache_clear()
    yield
    builtin.decomposition.cache_clear()


@pytest.mark.parametrize("spec", BUILTINS, ids=lambda s: s.name)
def test_builtin_decompositions_come_from_the_body(spec, fresh_decompositions, monkeypatch):
    assert spec.body is not None
    # no hand-written expansion beside the body: no per-op module under builtin/
    assert importlib.util.find_spec(f"bridge.ascend.builtin.{spec.module}") is None
    assert not hasattr(builtin, "build")
    calls = []

    def counted(b, *args, outputs):
        calls.append(type(b).__name__)
        return spec.body(b, *args, outputs=outputs)
    monkeypatch.setitem(ops.SPECS, spec.name, replace(spec, body=counted))
    g = builtin.decomposition(spec.name)
    assert calls == ["GeBody"]
    assert g.step_ids() == from_body.decomposition_from_body(spec).step_ids()


# (Sub -> Add would pass FusedLayerNorm: LayerNorm does not see a shift of the row)
@pytest.mark.parametrize("onnx_op,kind,name", [("Sigmoid", "Tanh", "YoloDecode"),
                                               ("Sub", "Add", "YoloConvBnLeaky"),
                                               ("Sub", "Mul", "FusedLayerNorm")])
def test_a_wrong_ge_mapping_fails_the_numeric_check(onnx_op, kind, name, rng, fresh_decompositions, monkeypatch):
    assert _excess(name, 0, rng) <= 1
    monkeypatch.setitem(from_body.ONNX_TO_GE, onnx_op, from_body.Mapping(kind))
    builtin.decomposition.cache_clear()
    assert _excess(name, 0, rng) > 1


def _unmapped_spec():
    spec = ops.get("FusedLayerNorm")

    def body(b, x, gamma, beta, *, outputs):
        b.op("Add", b.op("Mul", b.op("Softsign", x), gamma), beta, out=outputs[0])
    return replace(spec, body=body)


def test_a_body_op_without_ge_mapping_is_named_by_the_preflight(fresh_decompositions, monkeypatch):
    spec = _unmapped_spec()
    monkeypatch.setitem(ops.SPECS, spec.name, spec)
    with pytest.raises(from_body.UnmappedOp, match="FusedLayerNorm: its decomposition uses the ONNX op Softsign"):
        from_body.decomposition_from_body(spec)
    files = package_files()
    assert plugin_file(spec) not in files  # no plugin for it, and the pre-flight says why
    plugins = set().union(*(registered_in_source(t) for p, t in files.items() if p.endswith(".cc")))
    shapes, attrs = CASES["FusedLayerNorm"][0]
    for domain, parser in ((None, "new"), ("", "legacy")):
        model = one_op_model("FusedLayerNorm", shapes, attrs, 13, domain=domain)
        found = preflight.check(model, plugins=plugins, parser=parser, cann=6 if parser == "legacy" else 8)
        text = "\n".join(f.problem for f in found)
        assert "FusedLayerNorm: its decomposition uses the ONNX op Softsign" in text, text


def test_unmapped_attributes_and_casts_are_named(fresh_decompositions):
    spec = ops.get("YoloConvBnLeaky")
    cases = {
        "ONNX Conv with attribute 'group'": lambda b, x: b.op("Conv", x, x, x, group=2),
        "ONNX LayerNormalization with axis=1": lambda b, x: b.op("LayerNormalization", x, x, x, axis=1),
        "ONNX Transpose without attribute 'perm'": lambda b, x: b.op("Transpose", x),
        "ONNX Cast to 10": lambda b, x: b.op("Cast", x, to=10),
        "neither an int nor size_of": lambda b, x: b.split(x, [1, b.const([2])], axis=0),
    }
    for words, emit in cases.items():
        def body(b, x, *rest, outputs):
            b.op("Identity", emit(b, x), out=outputs[0])
        with pytest.raises(from_body.UnmappedOp, match="YoloConvBnLeaky: .*" + words):
            from_body.decomposition_from_body(replace(spec, body=body))


def test_cast_to_float32_of_a_float32_value_is_no_operator():
    g = from_body.decomposition_from_body(ops.get("YoloConvBnLeaky"))
    assert "Cast" not in [k for _, k in g.step_ids()]   # like(eps, x): eps is float32 already
    g = from_body.decomposition_from_body(ops.get("YoloDecode"))
    casts = [k for _, k in g.step_ids()].count("Cast")
    assert casts == 3   # the two int64 grids and the int stride; the float attributes need none


def test_every_builtin_expansion_matches_the_reference_at_opset_18(rng):
    for spec in BUILTINS:   # ReduceMean takes its axes as an input from opset 18
        for case in range(len(CASES[spec.name])):
            assert _excess(spec.name, case, rng, opset=18) <= 1, (spec.name, case)


def _rows():
    return [(s.name, e.id) for s in BUILTINS for e in s.examples() if "float32" in e.dtypes and not e.large]


@pytest.mark.parametrize("opset", [11, 17])
@pytest.mark.parametrize("name,row", _rows())
def test_ge_expansion_matches_the_reference_on_the_specs_case_table(name, row, opset):
    # the large-mean rows included: the expansion the body replaced (no mean shift)
    # was 200x over FusedLayerNorm's tolerance at a mean of 3e4
    spec = ops.get(name)
    ex = next(e for e in spec.examples() if e.id == row)
    xs = ex.cast(np.float32)
    model = expand_builtin(one_op_model(name, ex.shapes, ex.onnx_attrs, opset))
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = sess.run(None, {a.name: x for a, x in zip(spec.inputs, xs)})
    ref = spec.reference_onnx(*xs, **ex.onnx_attrs)
    for out, g, r in zip(spec.outputs, got, ref if isinstance(ref, tuple) else (ref,)):
        assert spec.tolerance["float32"].excess(g, r) <= 1, (name, row, out.name, opset)


def _explicit_norm(b, x, gamma, beta, *, outputs):
    """FusedLayerNorm spelled out with the other Body helpers (unsqueeze, a fresh
    name, a float32 attribute cast like x, the opset-18 ReduceMean)."""
    m = b.reduce_mean(x, [-1])
    d = b.op("Sub", x, m)
    var = b.op("ReduceMean", b.op("Pow", d, b.const(2.0, "float32")), axes=[-1], keepdims=1)
    std = b.op("Sqrt", b.op("Add", var, b.like(b.attr_const("epsilon"), x)))
    scaled = b.op("Mul", b.op("Div", d, std), b.unsqueeze(gamma, [0]), out=b.fresh("scaled"))
    b.op("Add", scaled, beta, out=outputs[0])


@pytest.mark.parametrize("opset", [11, 13, 18])
def test_a_body_with_every_helper_maps_and_matches(opset, rng, fresh_decompositions, monkeypatch):
    spec = replace(ops.get("FusedLayerNorm"), body=_explicit_norm)
    monkeypatch.setitem(ops.SPECS, spec.name, spec)
    kinds = [k for _, k in builtin.decomposition(spec.name).step_ids()]
    assert kinds.count("ReduceMean") == 2 and "Unsqueeze" in kinds and "Cast" not in kinds
    assert "b.Make(\"s" in package_files()[plugin_file(spec)]
    for case in range(len(CASES[spec.name])):
        assert _excess(spec.name, case, rng, opset=opset) <= 1, case


def test_every_mapped_kind_has_a_ge_operator_and_an_onnx_rendering():
    """ONNX_TO_GE's kinds are what both renderers must take: the C++ plugin's GE
    operator table and the ONNX expansion (a kind missing from either is a hole)."""
    from bridge.ascend import render_onnx
    from bridge.ascend.from_body import ONNX_TO_GE
    from bridge.ascend.render_cpp import GE_OPS
    kinds = {m.kind for m in ONNX_TO_GE.values()}
    assert kinds - set(GE_OPS) == set()
    source = inspect.getsource(render_onnx._emit)
    unrendered = [k for k in kinds - set(render_onnx.SAME_KIND) if f'k == "{k}"' not in source]
    assert unrendered == []
