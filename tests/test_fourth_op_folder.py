"""A fourth built-in op is its op folder and nothing else (issue 27): a scratch
ScaledSoftsign (y = scale * x / (1 + |x|)) written here as a folder of three
files (__init__.py with its spec, body.py, kernel.h) in a tree outside the
package, found by bridge's registry as one of its own ops (the folder's parent
on bridge.ops.__path__ before the registry loads), and run through the generic
hosts: TensorFlow (REGISTER_OP and the kernel from the core, the generic
wrapper), onnxruntime (the native kernel through native/host.cc) and LiteRT
(the custom op converted from TF, served by the LiteRT host), each against the
numpy float64 reference on odd, size-1 and empty shapes, and a negative scale
refused by the kernel core in the same words on all three.

The scratch tree has a fixed place and fixed contents, so its three libraries
(bridge's own, with the scratch core added: minutes on 2 cores the first time)
come from the build cache (BRIDGE_CACHE) on later runs."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

SPEC = '''
"""ScaledSoftsign, a scratch op folder: y = scale * x / (1 + |x|)."""
import numpy as np

from bridge.ops.shape_rules import OutSame, Rank, Require
from bridge.ops.spec import Arg, Attr, OpSpec, Tolerance

from .body import body


def reference(x, *, scale):
    return scale * x / (1.0 + np.abs(x))


SPEC = OpSpec(
    name="ScaledSoftsign", module="scaled_softsign", doc="y = scale * x / (1 + |x|), elementwise.",
    inputs=(Arg("x", "[...], rank >= 1"),), outputs=(Arg("y", "same shape as x"),),
    attrs=(Attr("scale", "float", 1.0),), onnx_attrs=(Attr("scale", "float", 1.0),),
    dtypes=("float32",), tolerance={"float32": Tolerance(1e-6)}, _reference=reference,
    shape_rule=(Require("x", Rank(0).ne(0), "must have rank >= 1, got a scalar (shape [])"), OutSame(0, 0)),
    _to_onnx=lambda _shapes=None, **a: dict(a), _from_onnx=lambda **a: dict(a), body=body)
'''

BODY = '''
def body(b, x, *, outputs):
    (y,) = outputs
    soft = b.op("Div", x, b.op("Add", b.op("Abs", x), b.like(b.const(1.0, "float32"), x)))
    b.op("Mul", soft, b.like(b.attr_const("scale"), x), out=y)
'''

KERNEL = r'''
// ScaledSoftsign's kernel core (a scratch op folder of tests/test_fourth_op_folder.py).
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/abi.h"
#include "spec/scaled_softsign.h"

namespace bridge {
namespace core {

struct ScaledSoftsign {
  using Spec = spec::ScaledSoftsign;
  struct Params { float scale = 1.0f; };
  static constexpr int kInplaceInput = 0;

  template <typename A>
  static abi::Status Read(const A& a, Params* p) {
    p->scale = a.scale;
    if (!(p->scale > 0.0f)) return abi::Bad("scale", "must be positive, got " + abi::Num(p->scale));
    return abi::Ok();
  }

  static abi::Status Shapes(const Params&, const std::vector<abi::Shape>& in, std::vector<abi::Shape>* out) {
    if (in[0].known && in[0].rank() == 0) return abi::Bad("x", "must have rank >= 1, got a scalar (shape [])");
    *out = {in[0]};
    return abi::Ok();
  }

  static void Compute(const Params& p, const std::vector<abi::In>& in, const std::vector<abi::Out>& out,
                      const abi::ParallelFor& parallel_for) {
    const int64_t n = in[0].size();
    const float* x = in[0].as<float>();
    float* y = out[0].as<float>();
    const float scale = p.scale;
    parallel_for(n, 4, [=](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) y[i] = SIGN scale * x[i] / (1.0f + std::fabs(x[i]));
    });
  }
};

}  // namespace core
}  // namespace bridge
'''

# x shapes: odd, size 1, rank 1..4, empty; LiteRT's CompiledModel takes no empty tensor
SHAPES = [(7,), (1,), (1, 1), (3, 33), (2, 5, 17), (2, 1, 1, 9)]
EMPTY = [(0,), (4, 0), (3, 0, 5)]
SCALES = [1.0, 0.37]
BAD = "ScaledSoftsign: argument 'scale': must be positive, got -0.5"

CHILD = r'''
import importlib.util, json, sys
import numpy as np

# the scratch folder's parent on the package path before bridge.ops (its registry) runs
found = importlib.util.find_spec("bridge.ops")
package = importlib.util.module_from_spec(found)
package.__path__.append(sys.argv[1])
sys.modules["bridge.ops"] = package
found.loader.exec_module(package)

from bridge import ops
spec = ops.get("ScaledSoftsign")
shapes, empty, scales = (json.loads(a) for a in sys.argv[2:5])
rng = np.random.default_rng(0)
out = {"builtin": ops.is_builtin(spec), "worst": {}, "errors": {}}


def score(road, got, x, scale):
    ref = spec.reference(x.astype(np.float64), scale=scale)
    assert got.shape == x.shape and got.dtype == np.float32, (road, got.shape, x.shape, got.dtype)
    out["worst"][road] = max(out["worst"].get(road, 0.0), spec.tolerance["float32"].excess(got, ref))


def feeds(shape):
    return (rng.standard_normal(shape) * 4).astype(np.float32)


import tensorflow as tf
from bridge import tf_ops
for scale in scales:
    for shape in shapes + empty:
        x = feeds(shape)
        score("tf", tf_ops.scaled_softsign(x, scale=scale).numpy(), x, scale)
x = np.ones((3,), np.float32)
for road, call in (("tf_wrapper", lambda: tf_ops.scaled_softsign(x, scale=-0.5)),
                   ("tf_kernel", lambda: tf_ops.load().scaled_softsign(x, scale=-0.5))):
    try:
        call()
    except (ValueError, tf.errors.InvalidArgumentError) as e:
        out["errors"][road] = getattr(e, "message", str(e))

from bridge import onnx_plugins
from bridge.onnx_plugins.one_op import one_op_model
assert "ScaledSoftsign" in onnx_plugins.library_ops(), onnx_plugins.library_ops()   # the built library serves it
calls = onnx_plugins.kernel_calls("ScaledSoftsign")
for scale in scales:
    for shape in shapes + empty:
        x = feeds(shape)
        sess = onnx_plugins.session(one_op_model("ScaledSoftsign", [x], {"scale": scale}), kernels=["ScaledSoftsign"])
        score("ort", sess.run(None, {"x": x})[0], x, scale)
out["ort_kernel_calls"] = onnx_plugins.kernel_calls("ScaledSoftsign") - calls   # the native kernel, not the function
model = one_op_model("ScaledSoftsign", [x], {"scale": -0.5})
try:
    onnx_plugins.session(model, kernels=["ScaledSoftsign"]).run(None, {"x": x})
except Exception as e:
    out["errors"]["ort"] = str(e)

from bridge.converters import export_tflite
from bridge.litert import runtime
def lite(rank, scale):
    return tf.function(lambda t: {"y": tf_ops.scaled_softsign(t, scale=scale)},
                       input_signature=[tf.TensorSpec([None] * rank, tf.float32, name="x")])


for i, shape in enumerate(shapes):
    scale = scales[i % len(scales)]
    fn = lite(len(shape), scale)
    model = runtime.Model(export_tflite.convert_function(fn, mode="custom"), lib=runtime.library())
    try:
        x = feeds(shape)
        score("litert", model.run({"x": x})["y"], x, scale)
    finally:
        model.close()
from bridge.litert.one_op import one_op_model as lite_model
try:   # a model whose node holds a bad scale (the core refuses it when TF traces one)
    model = runtime.Model(lite_model("ScaledSoftsign", [("x", [3])], ["y"], {"T": 0, "scale": -0.5}), lib=runtime.library())
    try:
        model.run({"x": x})
    finally:
        model.close()
except runtime.LiteRTError as e:
    out["errors"]["litert"] = str(e)
print(json.dumps(out))
'''


def _scratch_tree(sign: str = "") -> Path:
    """The op folder at a fixed place (per user and kernel text), so the builds' keys repeat."""
    kernel = KERNEL.replace("SIGN ", sign)
    digest = hashlib.sha256(kernel.encode()).hexdigest()[:12]
    root = Path(tempfile.gettempdir()) / f"bridge-fourth-op-{os.getuid()}-{digest}"
    folder = root / "scaled_softsign"
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in (("__init__.py", SPEC), ("body.py", BODY), ("kernel.h", kernel)):
        path = folder / name
        text = textwrap.dedent(text).lstrip()
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)
    return root


def run_child(sign: str = "") -> dict:
    root = _scratch_tree(sign)
    done = subprocess.run([sys.executable, "-c", CHILD, str(root), json.dumps(SHAPES), json.dumps(EMPTY),
                           json.dumps(SCALES)], capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_scratch_op_folder_runs_on_tf_onnxruntime_and_litert():
    pytest.importorskip("ai_edge_litert", reason="ai-edge-litert is not installed")
    got = run_child()
    assert got["builtin"], got
    assert set(got["worst"]) == {"tf", "ort", "litert"}, got
    assert got["ort_kernel_calls"] >= len(SCALES) * len(SHAPES), got
    assert all(w <= 1 for w in got["worst"].values()), got["worst"]
    assert set(got["errors"]) == {"tf_wrapper", "tf_kernel", "ort", "litert"}, got["errors"]
    for road, message in got["errors"].items():
        assert BAD in message, (road, message)
