"""Peak memory of the ONNX conversion: tf2onnx's two paths, side by side in one run.

    python benchmarks/export_memory.py [--model ConvNeXtSmall] [--size 32] [--json]

Every `bridge export` converts on tf2onnx's large-model path and puts the
tensors back into the proto for models under 1.8 GB (export_onnx.export); the
other path is tf2onnx's default. Each path runs in a child process of its own
(a fresh heap), from the same keras.applications model (random weights): the
child reports its peak RSS before and after the conversion (Linux ru_maxrss)
and the conversion's wall time. Ratio = default path / large-model path (> 1:
bridge's path takes less). ConvNeXtLarge (0.8 GB of weights) measured 17.3 GB
against 6.7 GB this way in `bridge export` (benchmarks/RESULTS.md).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from _common import machine_line  # noqa: E402

PATHS = ("default", "large-model")


def _peak_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # kB on Linux


def child(model_name: str, size: int, path: str) -> dict:
    import keras
    from bridge import modelsource
    from bridge.converters import export_onnx
    keras.utils.set_random_seed(0)
    model = getattr(keras.applications, model_name)(weights=None, input_shape=(size, size, 3))
    source = modelsource.from_object(model)
    fn = source.function(model)
    weights_gb = sum(int(w.size) * w.dtype.itemsize for w in model.get_weights()) / 1e9
    before = _peak_gb()
    t0 = time.perf_counter()
    onnx_model, external = export_onnx.convert_raw(fn, source.signature(), opset=export_onnx.DEFAULT_OPSET,
                                                   output_names=source.output_names, large=path != "default")
    onnx_model = export_onnx.embed_external(onnx_model, external)
    size_bytes = len(onnx_model.SerializeToString())
    return {"path": path, "seconds": time.perf_counter() - t0, "peak_before_gb": before, "peak_gb": _peak_gb(),
            "weights_gb": weights_gb, "nodes": len(onnx_model.graph.node), "proto_bytes": size_bytes}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="ConvNeXtSmall", help="a keras.applications model (weights=None)")
    p.add_argument("--size", type=int, default=32, help="input size")
    p.add_argument("--json", action="store_true")
    p.add_argument("--child", choices=PATHS, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.model, args.size, args.child)))
        return 0
    rows = {}
    for path in PATHS:
        print(f"export_memory: {args.model} on the {path} path ...", file=sys.stderr, flush=True)
        done = subprocess.run([sys.executable, __file__, "--model", args.model, "--size", str(args.size),
                               "--child", path], capture_output=True, text=True)
        if done.returncode:
            tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
            print(f"export_memory: the {path} run failed (exit {done.returncode}): {tail}", file=sys.stderr)
            return 1
        rows[path] = json.loads(done.stdout.strip().splitlines()[-1])
    d, lg = rows["default"], rows["large-model"]
    ratio = {"peak": (d["peak_gb"] - d["peak_before_gb"]) / max(lg["peak_gb"] - lg["peak_before_gb"], 1e-9),
             "time": d["seconds"] / max(lg["seconds"], 1e-9)}
    if args.json:
        print(json.dumps({"model": args.model, "size": args.size, "rows": rows, "ratio": ratio,
                          "machine": machine_line()}, indent=1))
        return 0
    from bridge.table import render
    print(f"{args.model} {args.size}x{args.size}, {d['weights_gb']:.2f} GB of weights; {machine_line()}")
    table = [[path, f"{r['peak_before_gb']:.2f}", f"{r['peak_gb']:.2f}", f"{r['peak_gb'] - r['peak_before_gb']:.2f}",
              f"{r['seconds']:.1f}", r["nodes"]] for path, r in rows.items()]
    print(render(["tf2onnx path", "GB before", "GB peak", "GB added", "convert s", "nodes"], table))
    print(f"default / large-model: {ratio['peak']:.2f}x the memory added, {ratio['time']:.2f}x the time")
    return 0


if __name__ == "__main__":
    sys.exit(main())
