"""Op-level onnxruntime speeds: each com.bridge op's native kernel against the
roads onnxruntime takes without it, side by side in one run.

    python benchmarks/onnx_ops.py [--threads 2] [--repeat 30] [--json] [--quick]

Roads:
  native    the library's kernel (session(kernels=[op]))
  builtin   onnxruntime's own LayerNormalization node (opset 17), FusedLayerNorm only
  function  the model-local function, inlined and optimised by onnxruntime
            (session(kernels="none")); FusedLayerNorm at opset 16, i.e. the
            decomposition onnxruntime fuses back into its LayerNormalization kernel;
            YoloConvBnLeaky: its fused NCHWc Conv+LeakyRelu between Transposes.
Weights are initializers (as in an exported model); no session's threads spin
(session.intra_op.allow_spinning=0). Rounds alternate between
the roads so that drift on a shared machine hits all of them alike; the table
shows medians and each road's time relative to native (>1: native is faster).
"""
from __future__ import annotations

import argparse
import json
import sys

import numpy as np
import onnx
from onnx import helper

from _common import alternating_medians, machine_line
from bridge import onnx_plugins
from bridge.onnx_plugins.one_op import one_op_model
from bridge.table import render


def _layer_norm_cases(rng, quick):
    shapes = [(4, 128, 768)] + ([] if quick else [(32, 512, 1024)])
    for shape in shapes:
        h = shape[-1]
        x = rng.standard_normal(shape).astype(np.float32)
        g, b = rng.standard_normal(h).astype(np.float32), rng.standard_normal(h).astype(np.float32)
        attrs = {"epsilon": 1e-6}
        native = one_op_model("FusedLayerNorm", [x, g, b], attrs, opset=17, constants=("gamma", "beta"))
        function = one_op_model("FusedLayerNorm", [x, g, b], attrs, opset=16, constants=("gamma", "beta"))
        builtin = onnx.ModelProto()
        builtin.CopyFrom(native)
        node = builtin.graph.node[0]
        node.domain, node.op_type = "", "LayerNormalization"
        node.attribute.extend([helper.make_attribute("axis", -1)])
        del builtin.functions[:]
        yield ("FusedLayerNorm", "x".join(map(str, shape)), {"x": x},
               {"native": (native, ["FusedLayerNorm"]), "builtin": (builtin, "none"), "function": (function, "none")})


def _conv_cases(rng, quick):
    cases = [((1, 416, 416, 32), 64, 3, [2, 2], [1, 1, 0, 0]),
             ((1, 104, 104, 128), 128, 3, [1, 1], [1, 1, 1, 1]),
             ((1, 13, 13, 512), 1024, 3, [1, 1], [1, 1, 1, 1]),
             ((1, 52, 52, 256), 128, 1, [1, 1], [0, 0, 0, 0])]
    for shape, cout, k, strides, pads in cases[:2] if quick else cases:
        cin = shape[-1]
        x = rng.standard_normal(shape).astype(np.float32)
        w = (rng.standard_normal((k, k, cin, cout)) / np.sqrt(k * k * cin)).astype(np.float32)
        params = [rng.standard_normal(cout).astype(np.float32) * 0.1 for _ in range(4)] + \
                 [rng.uniform(0.5, 2.0, cout).astype(np.float32)]
        attrs = {"strides": strides, "pads": pads, "dilations": [1, 1], "epsilon": 1e-5, "alpha": 0.1}
        consts = ("filter", "conv_bias", "bn_gamma", "bn_beta", "bn_mean", "bn_variance")
        model = one_op_model("YoloConvBnLeaky", [x, w, *params], attrs, opset=17, constants=consts)
        label = f"{'x'.join(map(str, shape))}->{cout} {k}x{k}" + (f" s{strides[0]}" if strides[0] > 1 else "")
        yield ("YoloConvBnLeaky", label, {"x": x},
               {"native": (model, ["YoloConvBnLeaky"]), "function": (model, "none")})


def _decode_cases(rng, quick):
    anchors = [116.0, 90.0, 156.0, 198.0, 373.0, 326.0]
    for hw in [13] + ([] if quick else [52]):
        raw = rng.standard_normal((1, hw, hw, 255)).astype(np.float32)
        model = one_op_model("YoloDecode", [raw], {"anchors": anchors, "num_classes": 80, "stride": 416 // hw},
                             opset=17)
        yield ("YoloDecode", f"1x{hw}x{hw}x255", {"raw": raw},
               {"native": (model, ["YoloDecode"]), "function": (model, "none")})


def _no_spinning():
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.add_session_config_entry(onnx_plugins.SPINNING_KEY, "0")
    return so


def measure(roads, feeds, threads, repeat, warmup=3):
    # No session spins: one spinning after its run took the cores of the next road's
    # (the oneDNN convolution's OpenMP threads: 1x1 52x52 ran 9x slower after the function road).
    sessions = {name: onnx_plugins.session(model, kernels=k, threads=threads, options=_no_spinning())
                for name, (model, k) in roads.items()}
    seconds, _ = alternating_medians({name: (lambda s=s: s.run(None, feeds)) for name, s in sessions.items()},
                                     repeat, warmup=warmup)
    return {name: t * 1e3 for name, t in seconds.items()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeat", type=int, default=30)
    p.add_argument("--quick", action="store_true", help="the smaller shapes only")
    p.add_argument("--json", action="store_true", help="one JSON document instead of the table")
    p.add_argument("--ops", nargs="*", default=None, help="only these op types")
    args = p.parse_args(argv)
    rng = np.random.default_rng(0)
    results = []
    for gen in (_layer_norm_cases, _conv_cases, _decode_cases):
        for op, shape, feeds, roads in gen(rng, args.quick):
            if args.ops and op not in args.ops:
                continue
            ms = measure(roads, feeds, args.threads, args.repeat)
            fastest = min(ms, key=ms.get)
            for road, t in ms.items():
                results.append({"op": op, "shape": shape, "road": road, "ms": round(t, 4),
                                "vs_native": round(t / ms["native"], 3), "fastest": road == fastest})
            if not args.json:
                print(f"  measured {op} {shape}", file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps({"threads": args.threads, "repeat": args.repeat, "rows": results}, indent=1))
        return 0
    print(machine_line())
    print(render(["op", "shape", "road", "median ms", "vs native", "fastest"],
                 [[r["op"], r["shape"], r["road"], r["ms"], f"{r['vs_native']:.2f}x", "*" if r["fastest"] else ""]
                  for r in results]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
