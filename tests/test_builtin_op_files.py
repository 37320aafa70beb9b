"""A fourth built-in op needs only its spec (with its `body`) for the ONNX
function, the lowered export, the reference kernel and the whole GE road: nothing
of onnx_plugins/ is per op, and its GE InferShape is its spec's shape rule (here a
scratch op registered as bridge's own; tests/test_fourth_op_folder.py runs a whole
op folder on TF, onnxruntime and LiteRT)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import onnxruntime as ort
import pytest
from onnx.reference import ReferenceEvaluator

from bridge import ops
from bridge.ascend import builtin, expand_builtin
from bridge.ascend.opp import op_proto_source, package_files, plugin_file
from ascend_models import one_op_model


@pytest.fixture
def scratch(monkeypatch):
    spec = replace(ops.get("FusedLayerNorm"), name="ScratchNorm", module="scratch_norm")
    monkeypatch.setitem(ops.SPECS, spec.name, spec)
    monkeypatch.setitem(ops.ORIGINS, spec.name, "bridge")
    builtin.decomposition.cache_clear()
    yield spec
    builtin.decomposition.cache_clear()


def test_a_builtin_op_with_only_its_spec_file(scratch, rng):
    from bridge import onnx_plugins
    from bridge.onnx_plugins.functions import function_proto

    assert ops.is_builtin(scratch)
    f = function_proto(scratch, 18)
    assert [n.op_type for n in f.node].count("LayerNormalization") == 1
    assert ops.part(scratch, "bench") is None and onnx_plugins.FASTEST.get(scratch.name, "function") == "function"
    x = (rng.standard_normal((3, 5)) * 4 + 2).astype(np.float32)
    gamma, beta = rng.standard_normal(5).astype(np.float32), rng.standard_normal(5).astype(np.float32)
    ref = scratch.reference_onnx(x, gamma, beta)
    model = one_op_model("ScratchNorm", [x.shape, gamma.shape, beta.shape], {}, 13)
    got = ReferenceEvaluator(model, new_ops=onnx_plugins.reference_ops()).run(None, {"x": x, "gamma": gamma,
                                                                                      "beta": beta})[0]
    assert scratch.tolerance["float32"].excess(got, ref) <= 1
    ge = expand_builtin(model)
    got = ort.InferenceSession(ge.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x, "gamma": gamma, "beta": beta})[0]
    assert scratch.tolerance["float32"].excess(got, ref) <= 1
    assert "ParseOpToGraphScratchNorm" in package_files()[plugin_file(scratch)]
    assert "no shape function of its own" not in op_proto_source(scratch)   # the spec's shape_rule
    assert "no shape function of its own" in op_proto_source(replace(scratch, shape_rule=(), _infer=lambda x, g, b, **a: (x,)))


def test_a_builtin_op_without_a_tf_side_leaves_the_others_working_and_shows_its_hole():
    """tf_ops imports every built-in's TensorFlow side (tf_op.py or its core): one that has none (a spec-only
    op) must not take the other ops' TensorFlow layer down, and `bridge ops`
    names its hole (a subprocess: tf_ops reads the registry once per process)."""
    import json
    import subprocess
    import sys
    code = r'''
import json
from dataclasses import replace
from bridge import ops
spec = replace(ops.get("FusedLayerNorm"), name="ScratchNorm", module="scratch_norm")
ops.SPECS[spec.name] = spec
ops.ORIGINS[spec.name] = "bridge"
import numpy as np
from bridge import backends, tf_ops
x = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
y = tf_ops.fused_layer_norm(x, np.ones(5, np.float32), np.zeros(5, np.float32)).numpy()
ref = ops.get("FusedLayerNorm").reference(x, np.ones(5), np.zeros(5))
t = backends.table()
print(json.dumps({"err": float(np.abs(y - ref).max()), "scratch": t["ScratchNorm"]["tf_cpu"],
                  "norm": t["FusedLayerNorm"]["tf_cpu"], "holes": backends.holes(t)}))
'''
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["err"] < 1e-5 and got["norm"] == "yes", got
    assert "no kernel core (bridge/ops/scratch_norm/kernel.h) or tf_op.py" in got["scratch"], got
    assert any(h.startswith("TF CPU") and "['ScratchNorm'] do not" in h for h in got["holes"]), got
    assert all(h.endswith("['ScratchNorm'] do not") for h in got["holes"]), got  # only the scratch op lacks


def test_a_builtin_op_without_a_converters_file_gets_the_spec_handler(scratch):
    from tf2onnx.handler import tf_op
    from bridge.converters import tf2onnx_common
    status = tf2onnx_common.register_all()
    assert status["ScratchNorm"] == "yes" and status["FusedLayerNorm"] == "yes"
    handlers = {name for opset in tf_op.get_opsets()[scratch.domain] for name in opset}
    assert "ScratchNorm" in handlers and "FusedLayerNorm" in handlers
