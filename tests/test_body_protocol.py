"""One Body protocol (bridge/ops/body.py): the ONNX, GE and TF roads implement it,
share its one Ref and one UnmappedOp, and every op's TF composite is its spec's
body on TfBody (no hand-written composite beside it). The TF road's recorded
transposes: YoloConvBnLeaky's NCHW body becomes one NHWC Conv2D with no Transpose,
and its composite matches the numpy float64 reference on random inputs of awkward
shapes. Planted: a chain of permutations that drops its second fails that match.
"""
from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from bridge import ops, tf_ops
from bridge.ascend import from_body as ge_from_body
from bridge.onnx_plugins import functions
from bridge.ops import body
from bridge.tf_ops import from_body as tf_from_body

ROOT = Path(__file__).resolve().parent.parent
ROADS = (functions.Body, ge_from_body.GeBody, tf_from_body.TfBody)


@pytest.mark.parametrize("road", ROADS, ids=lambda r: r.__name__)
def test_each_road_implements_the_protocol(road):
    assert issubclass(road, body.Body)
    for name in ("op", "const", "attr_const", "like", "split"):
        assert getattr(road, name) is not getattr(body.Body, name), name
    for name in ("reduce_mean", "unsqueeze", "size_of", "split", "ref", "fresh"):
        assert callable(getattr(road, name))


def test_one_unmapped_op_and_one_ref():
    assert ge_from_body.UnmappedOp is body.UnmappedOp and tf_from_body.UnmappedOp is body.UnmappedOp
    assert functions.Ref is body.Ref and tf_from_body.Ref is body.Ref


def test_builtin_composites_come_from_their_body():
    for spec in ops.all_specs():
        if not ops.is_builtin(spec):
            continue
        fn = getattr(tf_ops.composite, spec.module)
        assert fn.__qualname__ == "composite.<locals>.call" and fn.__module__ == tf_from_body.__name__
        tree = ast.parse((ROOT / "bridge" / "ops" / spec.module / "tf_op.py").read_text())
        assert "composite" not in {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}


def _conv_inputs(rng, x_shape, k, cout):
    cin = x_shape[-1]
    return [rng.standard_normal(x_shape), rng.standard_normal((k[0], k[1], cin, cout)), rng.standard_normal(cout),
            rng.uniform(0.5, 2.0, cout), rng.standard_normal(cout), rng.standard_normal(cout),
            rng.uniform(0.5, 2.0, cout)]


AWKWARD = [((1, 7, 5, 3), (3, 3), 5, {}),
           ((2, 6, 9, 1), (2, 3), 4, dict(strides=[1, 2, 1, 1])),
           ((1, 5, 4, 2), (3, 1), 1, dict(padding="VALID", dilations=[1, 2, 1, 1])),
           ((3, 4, 4, 5), (1, 1), 7, dict(padding="EXPLICIT", explicit_paddings=[0, 0, 2, 0, 1, 3, 0, 0])),
           ((1, 1, 1, 3), (1, 1), 2, dict(alpha=0.3))]


def _excess(fn, rng, x_shape, k, cout, attrs):
    spec = ops.get("YoloConvBnLeaky")
    inputs = [a.astype(np.float32) for a in _conv_inputs(rng, x_shape, k, cout)]
    ref = spec.reference(*[a.astype(np.float64) for a in inputs], **attrs)
    return spec.tolerance["float32"].excess(fn(*inputs, **attrs).numpy(), ref)


@pytest.mark.parametrize("x_shape,k,cout,attrs", AWKWARD)
def test_conv_composite_matches_the_reference_with_no_transpose(rng, x_shape, k, cout, attrs):
    fn = tf_ops.composite.yolo_conv_bn_leaky
    assert _excess(fn, rng, x_shape, k, cout, attrs) <= 1
    inputs = _conv_inputs(rng, x_shape, k, cout)
    specs = [tf.TensorSpec(a.shape, tf.float32) for a in inputs]
    graph = tf.function(lambda *a: fn(*a, **attrs)).get_concrete_function(*specs).graph
    kinds = [op.type for op in graph.get_operations()]
    assert "Transpose" not in kinds and kinds.count("Conv2D") == 1
    conv = next(op for op in graph.get_operations() if op.type == "Conv2D")
    assert conv.get_attr("data_format") == b"NHWC"
    want = attrs.get("padding", "SAME")
    no_pads = want != "SAME" or k == (1, 1)  # SAME of a 1x1 filter pads nothing: VALID
    assert conv.get_attr("padding").decode() == ("VALID" if no_pads else "SAME")
    assert ("Pad" in kinds) == (want == "EXPLICIT")


def test_planted_wrong_permutation_is_caught(rng, monkeypatch):
    # the second permutation of a chain dropped: the Conv reads its input in the wrong layout
    monkeypatch.setattr(tf_from_body, "_compose", lambda p, q: tuple(q) if p is None else tuple(p))
    fn = tf_from_body.composite(ops.get("YoloConvBnLeaky"))
    with pytest.raises(Exception):  # a wrong layout: refused by TF, or numbers far off
        assert _excess(fn, rng, (1, 7, 5, 3), (3, 3), 5, {}) <= 1
