"""How long `bridge parity` takes: every runtime on one model, outputs only and
with --per-layer, side by side in one process (the ONNX export is made once per
run and shared by the ort* runtimes). Target: YOLOv3-416, all runtimes, under a
minute, per-layer mode too.

    python benchmarks/parity.py                      # yolov3 at 416
    python benchmarks/parity.py --model yolov3-tiny --config input_size=96 --json
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="yolov3")
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--runtimes", help="comma-separated (default: all available)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    from bridge.parity import open_source, run_parity
    from bridge.table import render
    config = {}
    for item in args.config:
        k, _, v = item.partition("=")
        try:
            config[k] = json.loads(v)
        except ValueError:
            config[k] = v
    runtimes = args.runtimes.split(",") if args.runtimes else None
    rows, out = [], {"model": args.model, "config": config, "runs": {}}
    for per_layer in (False, True):
        t0 = time.perf_counter()
        source = open_source(args.model, config=config)  # each mode pays its own build and export
        build_s = time.perf_counter() - t0
        try:
            report = run_parity(None, source=source, runtimes=runtimes, per_layer=per_layer)
        finally:
            source.close()
        total = time.perf_counter() - t0
        mode = "per-layer" if per_layer else "outputs"
        out["runs"][mode] = {"total_s": total, "build_s": build_s, "passed": report.passed,
                             "runtimes": {r.name: {"status": r.status, "prepare_s": r.prepare_s, "run_s": r.run_s,
                                                   "layers": r.layers.compared if r.layers else None}
                                          for r in report.runtimes}}
        for r in report.runtimes:
            rows.append([mode, r.name, r.status, r.prepare_s, r.run_s,
                         r.layers.compared if r.layers else "-"])
        rows.append([mode, "(total, model build included)", "pass" if report.passed else "FAIL", build_s, total, ""])
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print(render(["mode", "runtime", "status", "prepare s", "run s", "layers"], rows, align="lllrrr"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
