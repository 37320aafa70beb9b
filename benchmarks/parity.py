"""How long `bridge parity` takes and how much memory it needs: every default
runtime on one model, outputs only and with --per-layer, each mode in its own
process (as a user runs it), with every stage timed: building the model,
fusing, each export and conversion, each runtime's prepare and run, with the
peak resident memory of each stage, and its CPU seconds (every thread; on a
shared machine the wall time stretches with the load, the CPU time much less).
Target: YOLOv3-416 (62 M parameters, 66 GFLOP) under a minute in both modes on
two cores. The TFLite conversions come from bridge's cache
(bridge.converters.tflite_cache) once converted: `--cold` runs each mode with an
empty cache of its own, as a first run does.

    python benchmarks/parity.py                      # yolov3 at 416
    python benchmarks/parity.py --model yolov3-tiny --config input_size=96 --json
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from _common import parse_config_or_exit, machine_line  # noqa: E402

MODES = {"outputs": False, "per-layer": True}


def one_run(model: str, config: dict, runtimes, per_layer: bool) -> dict:
    """One parity run in this process, every stage with its own peak memory."""
    from bridge.parity import open_source, run_parity
    from bridge.parity.stages import StageLog
    log = StageLog(per_stage_peaks=True)
    t0 = time.perf_counter()
    with log.stage("building the model"):
        source = open_source(model, config=dict(config))
    source.stages = log
    try:
        report = run_parity(None, source=source, runtimes=runtimes, per_layer=per_layer)
    finally:
        source.close()
    return {"seconds_in_process": time.perf_counter() - t0, "passed": report.passed,
            "peak_rss_mb": log.peak_mb(), "stages": log.to_json(),
            "runtimes": {r.name: {"status": r.status, "reason": r.reason, "prepare_s": r.prepare_s,
                                  "run_s": r.run_s, "layers": r.layers.compared if r.layers else None}
                         for r in report.runtimes}}


def in_child(model: str, config: dict, runtimes, per_layer: bool, cold: bool = False) -> dict:
    """`one_run` in a fresh interpreter: wall time includes importing TensorFlow,
    and no mode inherits the other's memory. `cold`: with an empty TFLite cache."""
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, BRIDGE_TFLITE_CACHE=os.path.join(tmp, "tflite")) if cold else None
        out = os.path.join(tmp, "run.json")
        cmd = [sys.executable, os.path.abspath(__file__), "--child", out, "--model", model,
               "--config-json", json.dumps(config)]
        if runtimes:
            cmd += ["--runtimes", ",".join(runtimes)]
        if per_layer:
            cmd.append("--per-layer")
        load_before = os.getloadavg()[0]
        cpu0 = _children_cpu()
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        wall = time.perf_counter() - t0
        cpu = _children_cpu() - cpu0
        if proc.returncode != 0 or not os.path.exists(out):
            tail = "\n".join(proc.stderr.strip().splitlines()[-5:])
            return {"error": f"exit {proc.returncode}: {tail}", "wall_s": wall}
        with open(out) as f:
            data = json.load(f)
    data.update(wall_s=wall, cpu_s=cpu, load_before=round(load_before, 1), load_after=round(os.getloadavg()[0], 1))
    return data


def _children_cpu() -> float:
    """User + system CPU seconds of the finished child processes (the mode's
    whole process, TensorFlow's import included)."""
    import resource
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _mb(value) -> str:
    return "-" if value is None else f"{value:,.0f}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="yolov3")
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--runtimes", help="comma-separated (default: the default runtimes)")
    p.add_argument("--modes", default=",".join(MODES), help="outputs,per-layer (default both)")
    p.add_argument("--cold", action="store_true", help="each mode with an empty TFLite cache (a first run)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--config-json", help=argparse.SUPPRESS)
    p.add_argument("--per-layer", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    runtimes = [r for r in args.runtimes.split(",") if r] if args.runtimes else None
    if args.child:
        data = one_run(args.model, json.loads(args.config_json), runtimes, args.per_layer)
        with open(args.child, "w") as f:
            json.dump(data, f)
        return 0

    from bridge.table import render
    config = parse_config_or_exit(p, args.config)
    if args.model == "yolov3" and "input_size" not in config:
        config["input_size"] = 416
    out = {"model": args.model, "config": config, "cpus": os.cpu_count(), "runs": {}}
    for mode in [m for m in args.modes.split(",") if m]:
        out["runs"][mode] = in_child(args.model, config, runtimes, MODES[mode], args.cold)
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"bridge parity {args.model} {config}, {os.cpu_count()} CPUs, one process per mode"
          + (", each with an empty TFLite cache" if args.cold else ""))
    for mode, run in out["runs"].items():
        print()
        if "error" in run:
            print(f"{mode}: failed after {run['wall_s']:.1f} s: {run['error']}")
            continue
        rows = [["  " * s["depth"] + s["stage"], s["seconds"], s.get("cpu_seconds", "-"), _mb(s["peak_rss_mb"])]
                for s in run["stages"]]
        rows.append(["(whole process: import, build, run)", run["wall_s"], run.get("cpu_s", "-"),
                     _mb(run["peak_rss_mb"])])
        print(f"{mode}: {'PASS' if run['passed'] else 'FAIL'}, {run['wall_s']:.1f} s wall, "
              f"{run.get('cpu_s', float('nan')):.1f} s CPU, peak RSS {_mb(run['peak_rss_mb'])} MB")
        print(machine_line())
        print(f"# load average at the start {run.get('load_before', '-')}, at the end {run.get('load_after', '-')}")
        print(render([f"stage ({mode})", "seconds", "CPU s", "peak RSS MB"], rows, align="lrrr"))
        skipped = [f"{n}: {r['reason']}" for n, r in run["runtimes"].items() if r["status"] != "ok" and
                   r["status"] != "reference"]
        for line in skipped:
            print(f"  not compared: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
