"""YOLOv3 on onnxruntime layer by layer: each convolution shape's time in bridge's
export (YoloConvBnLeaky on its native kernel) against the anchor (plain tf2onnx,
whose Conv+BatchNorm+LeakyRelu onnxruntime fuses into its NCHWc Conv), from
onnxruntime's own profiles, with the rates beside this CPU's GEMM rate and the
bound they put on the whole model's ratio.

    python benchmarks/onnx_layers.py [--size 416] [--width 1.0] [--threads 2] [--runs 10] [--json]

Both files are exported as benchmarks/onnx_models.py exports them; both sessions
run one call, then --runs calls alternating (the profiles leave out the first,
which packs filters), with profiling on. Conv nodes are grouped by shape
(kernel, stride, input and output channels rounded up to onnxruntime's NCHWc block
of 16, output size), so the rows match although the graphs differ; a row's GFLOP
are 2 x multiply-adds of the direct convolution at the true channels (Winograd
does fewer multiplies, so its rate can pass the GEMM's). road: what the kernel's
rule (bridge/kernels/conv_core.h, WinoEligible) picks for the shape, checked
against the kernel's own count of Winograd calls.
gemm = onnxruntime's MatMul (MLAS sgemm) [2048,2048]x[2048,2048] on the same
threads: what a convolution lowered to one large GEMM could reach here.
need for 1.3x: the conv rate that would make bridge's step the anchor's / 1.3
with every other op at its measured time.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections import defaultdict

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from _common import alternating_medians, machine_line  # noqa: E402
from bridge.table import render  # noqa: E402

TARGET = 1.3
BLOCK = 16  # onnxruntime's NCHWc channel block on AVX-512
CONV_OPS = ("YoloConvBnLeaky", "Conv", "FusedConv")


def _up(c: int) -> int:
    return -(-c // BLOCK) * BLOCK


def wino_eligible(kh, kw, stride, cin, cout, oh, ow) -> bool:
    """bridge/kernels/conv_core.h's WinoEligible (the benchmark checks it against the kernel's count)."""
    return kh == kw == 3 and stride == 1 and cin >= 128 and cout >= 64 and oh * ow >= 100


def conv_layer(event: dict):
    """(shape key, GFLOP, road, label) of a Conv-class node's profile event, or None.
    bridge's node is NHWC with an HWIO filter; onnxruntime's (NCHWc) Conv is NCHW
    with an OIHW one."""
    args = event.get("args", {})
    op = args.get("op_name")
    if op not in CONV_OPS:
        return None
    shapes = [next(iter(s.values())) for s in args.get("input_type_shape", [])]
    out = next(iter(args.get("output_type_shape", [{}])[0].values()), None)
    if len(shapes) < 2 or out is None or len(out) != 4:
        return None
    x, w = shapes[0], shapes[1]
    if op == "YoloConvBnLeaky":
        kh, kw, cin, cout = w
        ih, oh, ow = x[1], out[1], out[2]
    else:
        cout, cin, kh, kw = w
        ih, oh, ow = x[2], out[2], out[3]
    stride = max(1, round(ih / oh))
    gflop = 2.0 * oh * ow * cout * cin * kh * kw / 1e9
    key = (kh, kw, stride, _up(cin), _up(cout), oh, ow)
    label = f"{oh}x{ow} {cin}->{cout} {kh}x{kw}" + (f" s{stride}" if stride > 1 else "")
    return key, gflop, ("winograd" if wino_eligible(kh, kw, stride, cin, cout, oh, ow) else "direct"), label


def profile_layers(path: str, skip: int = 1) -> dict:
    """{"runs": model runs, "layers": {key: [µs per run, layers, GFLOP, road, label]}, "other_us": µs
    per run outside convs}, leaving out the first `skip` runs (the first packs
    filters and creates oneDNN's primitives)."""
    with open(path) as f:
        events = json.load(f)
    model_runs = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                        if e.get("cat") == "Session" and e.get("name") == "model_run")
    start = model_runs[skip - 1][1] if 0 < skip <= len(model_runs) else 0
    runs = max(1, len(model_runs) - skip)
    layers: dict = {}
    other = 0.0
    for e in events:
        if e.get("cat") != "Node" or not e.get("name", "").endswith("_kernel_time") or e["ts"] < start:
            continue
        found = conv_layer(e)
        if found is None:
            other += e["dur"]
            continue
        key, gflop, road, label = found
        row = layers.setdefault(key, [0.0, 0, gflop, road, label])
        row[0] += e["dur"]
        row[1] += 1
    # each node ran once per run: a row's count is its layers per run
    return {"runs": runs, "other_us": other / runs,
            "layers": {k: [us / runs, n // runs, g, road, label] for k, (us, n, g, road, label) in layers.items()}}


def gemm_rate(threads: int, n: int = 2048) -> float:
    """GFLOP/s of onnxruntime's MatMul [n,n]x[n,n] (MLAS sgemm), median of 9."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper
    b = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["y"])], "gemm",
                              [helper.make_tensor_value_info("a", TensorProto.FLOAT, [n, n])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, n])],
                              [onnx.numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    a = np.random.default_rng(1).standard_normal((n, n)).astype(np.float32)
    times, _ = alternating_medians({"mm": lambda: sess.run(None, {"a": a})}, 9, warmup=2)
    return 2.0 * n ** 3 / times["mm"] / 1e9


def run(args) -> dict:
    import onnxruntime as ort
    import onnx_models as om
    from bridge import models, onnx_plugins
    from bridge.converters import fuse
    config = om.model_config("yolov3", args.width, 0)
    with tempfile.TemporaryDirectory() as tmp:
        anchor = os.path.join(tmp, "tf2onnx.onnx")
        plain, why = om.plain_export_in_child("yolov3", args.size, config, anchor, args.plain_max_gb)
        if plain is None:
            raise SystemExit(f"yolov3-{args.size}: {why}")
        unfused = models.build("yolov3", args.size, **config)
        fused, _ = fuse(unfused)
        ours = om.bridge_exports(fused, tmp)
        x = models.sample_inputs(unfused, batch=1)
        sessions = {}
        for name, path, kernels in (("bridge", ours["custom"], "fastest"), ("tf2onnx", anchor, "none")):
            so = ort.SessionOptions()
            so.add_session_config_entry("session.intra_op.allow_spinning", "0")
            so.enable_profiling = True
            so.profile_file_prefix = os.path.join(tmp, name)
            sessions[name] = onnx_plugins.session(path, kernels=kernels, threads=args.threads, options=so)
        calls = {k: (lambda s=s: s.run(None, {s.get_inputs()[0].name: x})) for k, s in sessions.items()}
        library = onnx_plugins.ort_library_path(build=False)
        wino_before = onnx_plugins.conv_road_calls(library)["onednn-winograd"] if library else 0
        times, rounds = alternating_medians(calls, args.runs, warmup=1)
        wino_per_run = ((onnx_plugins.conv_road_calls(library)["onednn-winograd"] - wino_before) / (rounds + 1)
                        if library else None)
        profiles = {k: profile_layers(s.end_profiling()) for k, s in sessions.items()}
        del sessions
    gemm = gemm_rate(args.threads)
    return summarize(profiles, times, rounds, gemm, wino_per_run, args)


def summarize(profiles, times, rounds, gemm, wino_per_run, args) -> dict:
    ours, theirs = profiles["bridge"], profiles["tf2onnx"]
    rows = []
    for key in sorted(set(ours["layers"]) | set(theirs["layers"]), key=lambda k: (-k[5], k[0], k[3], k[4])):
        o = ours["layers"].get(key)
        t = theirs["layers"].get(key)
        count = (o or t)[1]
        gflop = (o or t)[2] * count
        # bridge's side names the true channels (onnxruntime's NCHWc pads them)
        rows.append({"shape": (o or t)[4],
                     "count": count, "gflop": gflop, "road": (o or t)[3],
                     "bridge_ms": o[0] / 1e3 if o else None, "tf2onnx_ms": t[0] / 1e3 if t else None})
    conv = {k: sum(p["layers"][s][0] for s in p["layers"]) / 1e3 for k, p in profiles.items()}
    other = {k: p["other_us"] / 1e3 for k, p in profiles.items()}
    gflop = sum(r["gflop"] for r in rows if r["bridge_ms"] is not None)
    need_step = times["tf2onnx"] * 1e3 / TARGET
    # the profiled node times add to a little less than a step (the session's own work)
    overhead = times["bridge"] * 1e3 - conv["bridge"] - other["bridge"]
    need_conv_ms = need_step - other["bridge"] - max(0.0, overhead)
    wino_rows = sum(r["count"] for r in rows if r["road"] == "winograd" and r["bridge_ms"] is not None)
    by_road = {}
    for road in ("direct", "winograd"):
        both = [r for r in rows if r["road"] == road and r["bridge_ms"] is not None and r["tf2onnx_ms"] is not None]
        by_road[road] = {"gflop": sum(r["gflop"] for r in both), "bridge_ms": sum(r["bridge_ms"] for r in both),
                         "tf2onnx_ms": sum(r["tf2onnx_ms"] for r in both)}
    # what the Winograd layers would need if the direct ones ran at the anchor's speed
    wino_need_ms = need_conv_ms - by_road["direct"]["tf2onnx_ms"]
    return {"size": args.size, "width": args.width, "threads": args.threads, "rounds": rounds,
            "ms": {k: v * 1e3 for k, v in times.items()}, "ratio": times["tf2onnx"] / times["bridge"],
            "conv_ms": conv, "other_ms": other, "gflop": gflop, "gemm_gflops": gemm,
            "conv_gflops": {k: gflop / (v * 1e-3) for k, v in conv.items()},
            "need_conv_ms": need_conv_ms, "need_conv_gflops": gflop / (need_conv_ms * 1e-3) if need_conv_ms > 0 else None,
            "by_road": by_road, "winograd_need_ms": wino_need_ms,
            "winograd_rows": wino_rows, "winograd_calls_per_run": wino_per_run, "rows": rows}


def print_result(r: dict) -> None:
    table = []
    for row in r["rows"]:
        b, t = row["bridge_ms"], row["tf2onnx_ms"]
        table.append((row["shape"], row["count"], f"{row['gflop']:.2f}", row["road"],
                      "-" if b is None else f"{b:.2f}", "-" if t is None else f"{t:.2f}",
                      "-" if not (b and t) else f"{t / b:.2f}x",
                      "-" if not b else f"{row['gflop'] / b * 1e3:.0f}",
                      "-" if not t else f"{row['gflop'] / t * 1e3:.0f}"))
    print(render(("conv shape (out, channels, kernel)", "layers", "GFLOP", "road", "bridge ms", "tf2onnx ms",
                  "ratio", "bridge GFLOP/s", "tf2onnx GFLOP/s"), table))
    print(f"yolov3-{r['size']}" + (f" width {r['width']:g}" if r["width"] != 1 else "") +
          f": bridge {r['ms']['bridge']:.1f} ms, tf2onnx {r['ms']['tf2onnx']:.1f} ms, {r['ratio']:.2f}x "
          f"({r['rounds']} rounds, {r['threads']} threads, profiling on)")
    print(f"convolutions: bridge {r['conv_ms']['bridge']:.1f} ms at {r['conv_gflops']['bridge']:.0f} GFLOP/s, "
          f"tf2onnx {r['conv_ms']['tf2onnx']:.1f} ms at {r['conv_gflops']['tf2onnx']:.0f} GFLOP/s "
          f"({r['gflop']:.1f} GFLOP); other ops {r['other_ms']['bridge']:.1f} / {r['other_ms']['tf2onnx']:.1f} ms")
    print(f"gemm: onnxruntime MatMul [2048,2048]^2 at {r['gemm_gflops']:.0f} GFLOP/s on {r['threads']} threads")
    if r["need_conv_gflops"]:
        print(f"need for {TARGET}x: the convolutions in {r['need_conv_ms']:.1f} ms, {r['need_conv_gflops']:.0f} "
              f"GFLOP/s: {r['need_conv_gflops'] / r['gemm_gflops']:.2f}x the GEMM's rate "
              f"(bridge's convolutions are at {r['conv_gflops']['bridge'] / r['gemm_gflops']:.2f}x it)")
    for road, v in r["by_road"].items():
        if v["bridge_ms"]:
            print(f"  {road} layers: {v['gflop']:.1f} GFLOP, bridge {v['bridge_ms']:.1f} ms "
                  f"({v['gflop'] / v['bridge_ms'] * 1e3:.0f} GFLOP/s), tf2onnx {v['tf2onnx_ms']:.1f} ms "
                  f"({v['gflop'] / v['tf2onnx_ms'] * 1e3:.0f} GFLOP/s), {v['tf2onnx_ms'] / v['bridge_ms']:.2f}x")
    w = r["by_road"]["winograd"]
    if r["need_conv_gflops"] and w["bridge_ms"] and r["winograd_need_ms"] > 0:
        print(f"  with the direct layers at tf2onnx's speed, {TARGET}x needs the Winograd layers in "
              f"{r['winograd_need_ms']:.1f} ms ({w['gflop'] / r['winograd_need_ms'] * 1e3:.0f} GFLOP/s, "
              f"{w['bridge_ms'] / r['winograd_need_ms']:.2f}x faster than now)")
    calls = r["winograd_calls_per_run"]
    if calls is not None and round(calls) != r["winograd_rows"]:
        print(f"note: the kernel ran Winograd {calls:.1f} times per run, the rule says {r['winograd_rows']}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", type=int, default=416)
    p.add_argument("--width", type=float, default=1.0, help="YOLOv3 channel multiplier (1.0: the real model)")
    p.add_argument("--threads", type=int, default=2, help="onnxruntime intra_op_num_threads")
    p.add_argument("--runs", type=int, default=10, help="profiled runs per session, alternating")
    p.add_argument("--plain-max-gb", type=float, default=21.0, help="memory the anchor's export may take")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    args = p.parse_args(argv)
    result = run(args)
    if args.json:
        print(json.dumps({"machine": machine_line(), **result}, indent=1))
        return 0
    print(machine_line())
    print_result(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
