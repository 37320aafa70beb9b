"""A team op's own fusion pattern (examples/custom_op: FusedBiasGelu's
`fusion=`): a plain Keras model that nobody wrote for bridge (Dense with the
exact GELU, Dense -> Activation('gelu'), a keras_hub TransformerEncoder) is
rewritten onto the team's op by the same rewriter as bridge's own patterns,
with near misses named, and `bridge export` takes it from there.

Judged against numpy float64 computed from the original Keras weights. Like
tests/test_team_ops.py, everything that registers the team op runs in a
subprocess, so this process's registry keeps exactly bridge's own ops."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from bridge import ops
from test_team_ops import EXAMPLE, SPEC_FILE, _bridge, _gelu, _team

# A plain Keras MLP, its weights random and non-zero; `approx` only where the
# process can load it back (its GELU is a function registered in that process).
MODEL = """
import json, sys
import numpy as np, keras
L = keras.layers

@keras.saving.register_keras_serializable(package="team_test")
def gelu_approximate(x):  # as keras_hub names its tanh GELU
    return keras.activations.gelu(x, approximate=True)

def mlp(approx):
    x = inp = keras.Input((None, 32), name="tokens")
    x = L.Dense(48, activation="gelu", name="up")(x)                       # dense_gelu
    x = L.Dense(40, name="mid")(x)
    x = L.Activation("gelu", name="mid_gelu")(x)                           # dense_then_gelu
    if approx:
        x = L.Dense(24, activation=gelu_approximate, name="approx")(x)
    x = L.Dense(21, activation="gelu", use_bias=False, name="no_bias")(x)  # a near miss: no bias to fuse
    x = L.Dense(17, activation="relu", name="relu")(x)
    x = L.Activation("gelu", name="relu_gelu")(x)                          # a near miss: relu before the GELU
    x = L.Dense(8, name="out")(x)
    m = keras.Model(inp, x, name="mlp")
    rng = np.random.default_rng(7)
    for w in m.weights:
        w.assign((rng.standard_normal(w.shape) * 0.4).astype("float32"))
    return m

def weights(m):
    return {f"{l.name}.{w.name}": w.numpy() for l in m.layers for w in l.weights}
"""


def _run(script: str, *args, timeout=600):
    done = subprocess.run([sys.executable, "-c", script, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env={**__import__("os").environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(next(line for line in done.stdout.splitlines() if line.startswith("{")))


def _reference(w, x, approx):
    """The MLP in numpy float64 from the original layers' weights."""
    x = np.asarray(x, np.float64)
    dense = lambda h, name: h @ w[f"{name}.kernel"] + w.get(f"{name}.bias", 0.0)  # noqa: E731
    h = _gelu(dense(x, "up"))
    h = _gelu(dense(h, "mid"))
    if approx:
        z = dense(h, "approx")
        h = 0.5 * z * (1 + np.tanh(np.sqrt(2 / np.pi) * (z + 0.044715 * z ** 3)))
    h = _gelu(dense(h, "no_bias"))
    h = _gelu(np.maximum(dense(h, "relu"), 0))
    return dense(h, "out")


FUSE = MODEL + f"""
from bridge import ops
ops.load_spec_file({str(SPEC_FILE)!r})
from bridge import models, tf_ops
from bridge.converters import fuse
unloaded = fuse(mlp(approx=False))[1].to_dict()  # the spec without its kernel library
tf_ops.load_op_library({str(EXAMPLE)!r})
m = mlp(approx=True)
f, report = fuse(m)
rng = np.random.default_rng(3)
xs = [rng.standard_normal(s).astype("float32") * 2 for s in [(2, 5, 32), (1, 1, 32), (3, 7, 32), (0, 4, 32)]]
f.save(sys.argv[1])
back = models.load(sys.argv[1])
out = dict(report=report.to_dict(), unloaded=unloaded, weights={{k: v.tolist() for k, v in weights(m).items()}},
           xs=[x.tolist() for x in xs], shapes=[list(x.shape) for x in xs],
           fused=[np.asarray(f(x)).tolist() for x in xs], keras=[np.asarray(m(x)).tolist() for x in xs],
           reloaded=[np.asarray(back(x)).tolist() for x in xs],
           layers=[type(l).__name__ + ":" + l.name for l in f.layers])
try:
    import keras_hub
except ImportError:
    keras_hub = None
if keras_hub is not None:  # exact GELU Dense inside a layer's Python call: fused in a copy of the layer
    x = inp = keras.Input((6, 16))
    x = keras_hub.layers.TransformerEncoder(24, 2, activation="gelu", name="enc")(x)
    hub = keras.Model(inp, x)
    for i, v in enumerate(hub.weights):
        v.assign((np.random.default_rng(i).standard_normal(v.shape) * 0.3).astype("float32"))
    hub_f, hub_r = fuse(hub)
    t = rng.standard_normal((2, 6, 16)).astype("float32")
    out["hub"] = dict(fused=hub_r.fused("dense_gelu"), diff=float(np.max(np.abs(np.asarray(hub_f(t)) - np.asarray(hub(t))))),
                      scale=float(np.max(np.abs(np.asarray(hub(t))))))
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def fused(tmp_path_factory):
    return _run(FUSE, tmp_path_factory.mktemp("team_fuse") / "mlp_fused.keras")


def test_the_team_patterns_fuse_a_plain_keras_mlp(fused):
    patterns = fused["report"]["patterns"]
    assert patterns["dense_gelu"]["op"] == patterns["dense_then_gelu"]["op"] == "FusedBiasGelu"
    assert patterns["dense_gelu"]["fused"] == 1 and patterns["dense_then_gelu"]["fused"] == 1
    assert {"pattern": "dense_then_gelu", "layer": "mid_gelu", "replaces": ["mid", "mid_gelu"]} in fused["report"]["blocks"]
    for builtin in ("conv_bn_leaky", "layer_norm", "yolo_decode"):  # bridge's own patterns sit in the same table
        assert patterns[builtin]["fused"] == 0
    assert fused["layers"].count("FusedOp:up_dense_gelu") == 1 and "Dense:up" in fused["layers"]


def test_near_misses_are_named(fused):
    patterns = fused["report"]["patterns"]
    got = {tuple(s["layers"]): s["reason"] for p in ("dense_gelu", "dense_then_gelu")
           for s in patterns[p]["skipped"]}
    assert set(got) == {("approx",), ("no_bias",), ("relu", "relu_gelu")}, got
    assert "approximate (tanh) GELU; FusedBiasGelu is the exact erf GELU" in got[("approx",)]
    assert "no bias" in got[("no_bias",)]
    assert "activation 'relu' before the GELU" in got[("relu", "relu_gelu")]


def test_without_its_library_the_layers_stay_and_the_report_says_why(fused):
    report = fused["unloaded"]
    assert not report["blocks"]
    reasons = [s["reason"] for p in ("dense_gelu", "dense_then_gelu") for s in report["patterns"][p]["skipped"]]
    assert sum("FusedBiasGelu: no TensorFlow kernel is loaded for it: give its library (--op-library" in r
               for r in reasons) == 2, reasons


def test_the_fused_mlp_computes_the_original(fused):
    w = {k: np.asarray(v, np.float64) for k, v in fused["weights"].items()}
    for shape, x, got, keras_out, back in zip(fused["shapes"], fused["xs"], fused["fused"], fused["keras"],
                                              fused["reloaded"]):
        ref = _reference(w, np.asarray(x, np.float32).reshape(shape), approx=True)
        for what, out in (("fused", got), ("original Keras", keras_out), ("reloaded .keras", back)):
            out = np.asarray(out, np.float64).reshape(ref.shape)
            assert np.all(np.abs(out - ref) <= 1e-4 * np.maximum(1, np.abs(ref))), (what, shape)


def test_a_keras_hub_encoder_with_exact_gelu_fuses_inside(fused):
    if "hub" not in fused:
        pytest.skip("keras_hub is not installed")
    assert fused["hub"]["fused"] == 1
    assert fused["hub"]["diff"] <= 1e-5 * max(1.0, fused["hub"]["scale"])


def test_bridge_export_fuses_a_plain_keras_model(tmp_path):
    saved = tmp_path / "mlp.keras"
    _run(MODEL + "\nm = mlp(approx=False); m.save(sys.argv[1])\n"
         "np.savez(sys.argv[2], **weights(m)); print('{}')", saved, tmp_path / "w.npz")
    onnx_out = tmp_path / "mlp.onnx"
    done = _bridge(*_team("export", saved, "--to", "onnx", "-o", onnx_out, "--input-shape", "tokens:2,5,32"))
    assert done.returncode == 0, done.stderr[-3000:]
    text = done.stdout + done.stderr
    table = text.split("skipped (near misses):")[0]
    rows = {line.split()[0]: line.split()[-2:] for line in table.splitlines() if line.startswith("dense_")}
    assert rows["dense_gelu"] == ["1", "1"] and rows["dense_then_gelu"] == ["1", "1"], text[-3000:]
    assert "Dense 'no_bias' has no bias" in text
    import onnx
    import onnxruntime as ort
    model = onnx.load(str(onnx_out))
    assert [(n.domain, n.op_type) for n in model.graph.node if n.domain] == [("com.example", "FusedBiasGelu")] * 2
    w = {k: v.astype(np.float64) for k, v in np.load(tmp_path / "w.npz").items()}
    x = (np.random.default_rng(4).standard_normal((2, 5, 32)) * 2).astype("float32")
    (got,) = ort.InferenceSession(str(onnx_out), providers=["CPUExecutionProvider"]).run(None, {"tokens": x})
    ref = _reference(w, x, approx=False)
    assert np.all(np.abs(got - ref) <= 1e-4 * np.maximum(1, np.abs(ref)))


BAD_PATTERNS = {
    # name: (text in the example, its replacement, the field the error names)
    "unknown_field": ('keep={"dense": _DENSE_WITHOUT_BIAS}, inputs=("dense.bias",)),\n    Pattern("dense_then',
                      'keep={"dense": _DENSE_WITHOUT_BIAS}, inputs=("dense.bias",), wen=None),\n    Pattern("dense_then',
                      "field 'fusion[0].wen': unknown field"),
    "empty_chain": ('chain=(Link("Dense", "dense", checks=(_has_bias, _exact)),),', "chain=(),",
                    "field 'fusion[0].chain': a chain of at least one Link"),
    "unknown_link_field": ('Link("Activation", "gelu", checks=(_exact,))', 'Link("Activation", "gelu", check=(_exact,))',
                           "field 'fusion[1].chain[1].check': unknown field"),
    "wrong_inputs": ('keep={"dense": _DENSE_WITHOUT_BIAS}, inputs=("dense.bias",)),\n)',
                  'keep={"dense": _DENSE_WITHOUT_BIAS}, inputs=("dense.kernel", "dense.bias")),\n)',
                  "field 'fusion[1].inputs': FusedBiasGelu takes 1 inputs after its first (bias)"),
    "bad_label": ('inputs=("dense.bias",)),\n)', 'inputs=("dens.bias",)),\n)',
                  "field 'fusion[1].inputs.bias': 'dens.bias': no layer of the chain has the label 'dens'"),
    "spec_field": ("    fusion=FUSION,\n", "    fusion=FUSION,\n    fuzion=FUSION,\n", "field 'fuzion': unknown field"),
}


@pytest.mark.parametrize("case", sorted(BAD_PATTERNS))
def test_bad_patterns_name_the_file_and_the_field(case, tmp_path):
    old, new, message = BAD_PATTERNS[case]
    good = SPEC_FILE.read_text()
    assert good.count(old) == 1, case
    path = tmp_path / f"bad_{case}.py"
    path.write_text(good.replace(old, new))
    with pytest.raises(ops.SpecError) as e:
        ops.load_spec_file(path)
    assert str(path) in str(e.value) and message in str(e.value), str(e.value)
    assert "FusedBiasGelu" not in ops.SPECS


def test_bridges_own_patterns_come_from_their_specs():
    found = {p.key: spec.name for spec in ops.all_specs() for p in spec.fusion}
    assert found == {"conv_bn_leaky": "YoloConvBnLeaky", "zero_padding": "YoloConvBnLeaky",
                     "layer_norm": "FusedLayerNorm", "yolo_decode": "YoloDecode"}
