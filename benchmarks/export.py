"""Export time: `bridge export` (fused, com.bridge nodes) against plain tf2onnx of
the unfused Keras model, side by side in one run.

    python benchmarks/export.py [--model yolov3] [--input-size 416] [--config width=1.0]
                                [--repeat 1] [--opset 18] [--json]

Both contenders go from the same Keras model in memory to a checked .onnx file:
  bridge   fuse -> trace -> tf2onnx with the com.bridge handlers -> functions ->
           full checker -> atomic write (export_onnx.export with bridge.parity.verify; its verification
           run is timed apart as `bridge verify`: plain tf2onnx has none)
  tf2onnx  trace -> tf2onnx.convert.from_function (opset, dynamic batch) -> write
Ratio = tf2onnx time / bridge time (> 1: bridge exports faster). Rounds alternate
between the two (who goes first alternates) so that drift on a shared machine\nhits both alike; medians.
Facts (facts.md): plain tf2onnx of YOLOv3-416 took ~78 s, mostly on the weights.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from _common import parse_config_or_exit, machine_line  # noqa: E402


def plain_tf2onnx(model, source, path, opset):
    """The baseline a user without bridge has: the unfused model straight through tf2onnx."""
    import onnx
    import tf2onnx
    t0 = time.perf_counter()
    fn = source.function(model)
    sig = source.signature()
    for name in ("tf2onnx",):
        logging.getLogger(name).setLevel(logging.ERROR)
    proto, _ = tf2onnx.convert.from_function(fn, input_signature=sig, opset=opset)
    onnx.save(proto, path)
    seconds = time.perf_counter() - t0
    return seconds, len(proto.graph.node), os.path.getsize(path)


def bridge_export(source, path, opset):
    """bridge's export with its verification; the export time excludes the
    verification stage, which is reported on its own."""
    from bridge.converters import export_onnx
    from bridge.exporting import Progress
    from bridge.parity import verify
    progress = Progress(enabled=False)
    t0 = time.perf_counter()
    result = verify.export(export_onnx, source, path, opset=opset, progress=progress)
    total = time.perf_counter() - t0
    verify_s = result.seconds.get("verifying", 0.0)
    return total - verify_s, result, verify_s, result.checks


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="yolov3")
    p.add_argument("--input-size", type=int, default=416)
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--opset", type=int, default=18)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)

    from bridge import modelsource
    from bridge.table import render
    config = parse_config_or_exit(p, args.config)
    config["input_size"] = args.input_size
    t0 = time.perf_counter()
    source = modelsource.resolve(args.model, seed=0, config=config)
    build_s = time.perf_counter() - t0
    params = int(sum(int(w.numpy().size) for w in source.model.weights))

    plain, ours, verify = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeat):
            for contender in (("plain", "bridge") if i % 2 == 0 else ("bridge", "plain")):
                if contender == "plain":
                    s, nodes_plain, size_plain = plain_tf2onnx(source.model, source, os.path.join(tmp, "plain.onnx"),
                                                               args.opset)
                    plain.append(s)
                else:
                    s, result, vs, checks = bridge_export(source, os.path.join(tmp, "bridge.onnx"), args.opset)
                    ours.append(s)
                    verify.append(vs)
        size_ours = os.path.getsize(os.path.join(tmp, "bridge.onnx"))
    tp, tb = statistics.median(plain), statistics.median(ours)
    stages = {k: round(v, 2) for k, v in result.seconds.items()}
    rows = [
        ["tf2onnx (unfused)", f"{tp:.1f}", nodes_plain, f"{size_plain / 1e6:.1f}", "1.00x"],
        ["bridge export (fused, custom)", f"{tb:.1f}", result.details["nodes"], f"{size_ours / 1e6:.1f}",
         f"{tp / tb:.2f}x"],
    ]
    data = {"model": args.model, "input_size": args.input_size, "config": config, "params": params,
            "opset": args.opset, "repeat": args.repeat, "build_s": build_s,
            "tf2onnx_s": plain, "bridge_s": ours, "speedup": tp / tb, "bridge_stages_s": stages,
            "bridge_verify_s": verify, "nodes": {"tf2onnx": nodes_plain, "bridge": result.details["nodes"]},
            "bytes": {"tf2onnx": size_plain, "bridge": size_ours},
            "max_abs_error_vs_tf": {c.output: c.max_abs_error for c in checks},
            "verified": all(c.passed for c in checks)}
    if args.json:
        print(json.dumps(data, indent=1))
        return 0
    print(f"{args.model} at {args.input_size} ({params / 1e6:.1f} M parameters), opset {args.opset}, "
          f"median of {args.repeat}")
    print(machine_line())
    print(render(["export", "seconds", "nodes", "MB", "speed vs tf2onnx"], rows))
    print("bridge stages: " + ", ".join(f"{k} {v:.1f} s" for k, v in stages.items()))
    print(f"bridge verify (TF vs onnxruntime native kernels): {statistics.median(verify):.1f} s, max abs error "
          + ", ".join(f"{c.output} {c.max_abs_error:.2e}" for c in checks) + (" ok" if data["verified"] else " FAILED"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
