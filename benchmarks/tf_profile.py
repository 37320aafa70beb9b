"""Where a built-in model's step goes in TensorFlow, fused against unfused: the
profiler's trace of each tf.function, op time per Keras layer, and the bound that
the fused layers put on the whole model's ratio.

    python benchmarks/tf_profile.py [--only bert-128,yolov3-416] [--steps 5] [--windows 4] [--repeat 9]
                                    [--inter-op 1] [--bert-layers 4] [--width 1.0] [--top 12] [--json]

Per model: both tf.functions are timed in alternating rounds (medians, no
profiler), then traced by tf.profiler (--windows windows of --steps calls each,
alternating between the two) and their op events (on TensorFlow's executor
threads, "scope/node:OpType") summed per Keras layer:
  fused layers    the original layers that bridge.converters.fuse replaced, against
                  the fused layers that stand for them
  matmul          MatMul/BatchMatMul/Einsum/Conv op time outside them, with its rate
                  (BERT: the encoder's multiply-adds counted from the config) beside
                  a standalone tf.matmul at the feed-forward shape in the same run
  rest            every other op
bound = 1 / (1 - the fused layers' share of the unfused op time): the ratio if the
fused layers' ops cost nothing and every other op kept its time; ceiling = the
same with every op but the matmul-class ones free (what fusing more around the
matmuls could reach at most, since the matmuls run oneDNN's GEMM either way).
Both leave out the executor's own cost per op (scheduling, allocation), which no
op event holds: the fused graph runs fewer ops ("ops run"). With one inter-op thread (the
default here) ops run one at a time on all cores, so each op's time is its own;
with more, concurrent ops share the cores and their times overlap. Shares come
from the trace, times from the untraced rounds (tracing inflates a graph of many
small ops more than one of few).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import sys
import tempfile
from collections import defaultdict

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402
from tensorflow.tsl.profiler.protobuf import xplane_pb2  # noqa: E402

from _common import BERT_BASE, alternating_medians, chosen, keras_function, machine_line  # noqa: E402
from bridge import models  # noqa: E402
from bridge.converters import fuse  # noqa: E402
from bridge.table import render  # noqa: E402

CASES = {"bert-128": ("bert", 128), "yolov3-416": ("yolov3", 416)}
MATMUL = re.compile(r"MatMul|Einsum|Conv2D|Conv3D")
# an op's event on an executor thread: "scope/node:OpType" (the profiler's own
# events, "ExecutorState::Process" and the like, have no op type after one colon)
OP_EVENT = re.compile(r"^([^:]+):([A-Za-z_]\w*)$")


def trace_ops(fn, args, steps: int) -> dict:
    """{"ops": [(node, op type, µs per step)], "step_ms": traced step time,
    "op_count": nodes run per step}."""
    space = xplane_pb2.XSpace()
    with tempfile.TemporaryDirectory(prefix="bridge-tfprof-") as folder:
        tf.profiler.experimental.start(folder)
        try:
            for _ in range(steps):
                fn(*args)
        finally:
            tf.profiler.experimental.stop()
        with open(glob.glob(os.path.join(folder, "**", "*.xplane.pb"), recursive=True)[0], "rb") as f:
            space.ParseFromString(f.read())
    per_node: dict = defaultdict(float)
    types: dict = {}
    step_ps = 0
    for plane in space.planes:
        names = {k: m.name for k, m in plane.event_metadata.items()}
        for line in plane.lines:
            for e in line.events:
                name = names.get(e.metadata_id, "")
                if line.name.startswith("tf_Compute"):
                    m = OP_EVENT.match(name)
                    if m:
                        per_node[m.group(1)] += e.duration_ps
                        types[m.group(1)] = m.group(2)
                elif name.startswith("EagerLocalExecute: __inference"):  # one function call
                    step_ps += e.duration_ps
    return {"ops": [(n, types[n], ps / steps / 1e6) for n, ps in per_node.items()],
            "step_ms": step_ps / steps / 1e9, "op_count": len(per_node)}


def merge(traces: list) -> dict:
    """The mean of several traces of one function."""
    per_node: dict = defaultdict(float)
    types = {}
    for t in traces:
        for node, op, us in t["ops"]:
            per_node[node] += us / len(traces)
            types[node] = op
    return {"ops": [(n, types[n], us) for n, us in per_node.items()],
            "step_ms": sum(t["step_ms"] for t in traces) / len(traces),
            "op_count": max(t["op_count"] for t in traces)}


def scope_suffix(ops, model_name: str) -> str:
    """What Keras appended to every scope in this trace ("_1" when a call re-enters
    a name scope the model's build opened), read off the model's own scope."""
    counts: dict = defaultdict(int)
    for node, _, _ in ops:
        top = node.split("/")[0]
        if top.startswith(model_name):
            counts[top[len(model_name):]] += 1
    return max(counts, key=counts.get) if counts else ""


def layer_of(node: str, suffix: str = "_1") -> str:
    """The Keras layer a node belongs to: the scope under the model's, less the
    `suffix` the trace appended to it."""
    parts = node.split("/")
    scope = parts[1] if len(parts) > 1 else parts[0]
    return scope[:-len(suffix)] if suffix and scope.endswith(suffix) else scope


def bert_matmul_flops(config: dict, seq: int) -> float:
    """Multiply-adds x 2 of the encoder's projections, feed-forward and attention
    products at batch 1 (the embeddings' gathers are not multiplies)."""
    h, i, n = config["hidden"], config["intermediate"], config["layers"]
    return n * (2 * seq * (4 * h * h + 2 * h * i) + 2 * 2 * seq * seq * h)


def gemm_rate(m: int, k: int, n: int, repeat: int) -> float:
    """GFLOP/s of one float32 tf.matmul [m,k]x[k,n] as a tf.function (median)."""
    a = tf.random.normal([m, k])
    b = tf.random.normal([k, n])
    mm = tf.function(lambda: tf.linalg.matmul(a, b))
    times, _ = alternating_medians({"mm": mm}, max(repeat, 5) * 4, warmup=3)
    return 2 * m * k * n / times["mm"] / 1e9


def split(ops, replaced: set, suffix: str = "_1") -> dict:
    """Op time (ms per step) in the fused layers (or the layers they replace), in
    matmul-class ops elsewhere, and in the rest."""
    out = {"fused layers": 0.0, "matmul": 0.0, "rest": 0.0}
    for node, op, us in ops:
        key = "fused layers" if layer_of(node, suffix) in replaced else "matmul" if MATMUL.search(op) else "rest"
        out[key] += us / 1e3
    return out


def run_case(case: str, args) -> dict:
    name, size = CASES[case]
    config = dict(width=args.width) if name == "yolov3" else dict(layers=args.bert_layers, **BERT_BASE)
    unfused = models.build(name, size, **config)
    fused, report = fuse(unfused)
    x = models.sample_inputs(unfused, batch=1)
    feeds = x if isinstance(x, dict) else {unfused.inputs[0].name: x}
    inputs = [tf.constant(feeds[t.name]) for t in unfused.inputs]
    fns = {"unfused": keras_function(unfused), "fused": keras_function(fused)}
    calls = {k: (lambda f=f: f(*inputs)) for k, f in fns.items()}
    times, rounds = alternating_medians(calls, args.repeat, warmup=2)
    # traced windows alternate too, so drift hits both functions alike
    windows = [{k: trace_ops(f, inputs, args.steps) for k, f in fns.items()} for _ in range(args.windows)]
    traces = {k: merge([w[k] for w in windows]) for k in fns}
    blocks = report.block_map()
    replaced = {layer for originals in blocks.values() for layer in originals}
    suffix = {tag: scope_suffix(traces[tag]["ops"], m.name) for tag, m in (("unfused", unfused), ("fused", fused))}
    shares = {"unfused": split(traces["unfused"]["ops"], replaced, suffix["unfused"]),
              "fused": split(traces["fused"]["ops"], set(blocks), suffix["fused"])}
    # a fused layer's row holds the original layers it replaces
    block_of = {layer: block for block, originals in blocks.items() for layer in originals}
    per_layer = defaultdict(lambda: [0.0, 0.0])
    for i, tag in enumerate(("unfused", "fused")):
        for node, op, us in traces[tag]["ops"]:
            layer = layer_of(node, suffix[tag])
            per_layer[block_of.get(layer, layer) if tag == "unfused" else layer][i] += us / 1e3
    ops_ms = {k: sum(v.values()) for k, v in shares.items()}
    share = shares["unfused"]["fused layers"] / ops_ms["unfused"]
    out = {"case": case, "config": config, "rounds": rounds, "steps": args.steps, "windows": args.windows,
           "ms": {k: v * 1e3 for k, v in times.items()}, "ratio": times["unfused"] / times["fused"],
           "traced_step_ms": {k: t["step_ms"] for k, t in traces.items()},
           "op_count": {k: t["op_count"] for k, t in traces.items()},
           "op_ms": ops_ms, "split_ms": shares, "fused_blocks": len(blocks),
           "fused_share": share, "bound": 1.0 / (1.0 - share),
           "ceiling": ops_ms["unfused"] / shares["unfused"]["matmul"] if shares["unfused"]["matmul"] else float("inf"),
           "layers": sorted(([k, *v] for k, v in per_layer.items()), key=lambda r: -r[1])}
    if name == "bert":
        flops = bert_matmul_flops(config, size)
        seq, h, i = size, config["hidden"], config["intermediate"]
        out["matmul"] = {
            "gflop": flops / 1e9,
            "gflops_unfused": flops / (shares["unfused"]["matmul"] * 1e-3) / 1e9,
            "gflops_fused": flops / (shares["fused"]["matmul"] * 1e-3) / 1e9,
            "standalone": f"[{seq},{h}]x[{h},{i}]",
            "gflops_standalone": gemm_rate(seq, h, i, args.repeat),
            "gflops_square": gemm_rate(2048, 2048, 2048, 3),
        }
    return out


def print_case(r: dict, top: int) -> None:
    print(f"\n{r['case']}: unfused {r['ms']['unfused']:.1f} ms, fused {r['ms']['fused']:.1f} ms, "
          f"ratio {r['ratio']:.2f}x ({r['rounds']} rounds untraced; traced steps "
          f"{r['traced_step_ms']['unfused']:.1f} / {r['traced_step_ms']['fused']:.1f} ms)")
    rows = []
    for key in ("fused layers", "matmul", "rest"):
        u, f = r["split_ms"]["unfused"][key], r["split_ms"]["fused"][key]
        rows.append((key, f"{u:.2f}", f"{100 * u / r['op_ms']['unfused']:.1f}%", f"{f:.2f}",
                     f"{100 * f / r['op_ms']['fused']:.1f}%"))
    rows.append(("all ops", f"{r['op_ms']['unfused']:.2f}", "100%", f"{r['op_ms']['fused']:.2f}", "100%"))
    rows.append(("ops run", str(r["op_count"]["unfused"]), "", str(r["op_count"]["fused"]), ""))
    print(render(("op time per step", "unfused ms", "share", "fused ms", "share"), rows))
    print(f"bound: the {r['fused_blocks']} fused layers took {100 * r['fused_share']:.1f}% of the unfused op time; "
          f"fusing them alone saves at most that op time: {r['bound']:.2f}x, measured {r['ratio']:.2f}x "
          f"(not in the bound: the executor's own cost per op, for the "
          f"{r['op_count']['unfused'] - r['op_count']['fused']} ops fewer)")
    print(f"ceiling: with every op but the matmuls free, {r['ceiling']:.2f}x "
          f"(matmul-class ops: {100 / r['ceiling']:.1f}% of the unfused op time)")
    mm = r.get("matmul")
    if mm:
        print(f"matmul: {mm['gflop']:.2f} GFLOP per step at {mm['gflops_unfused']:.0f} GFLOP/s unfused, "
              f"{mm['gflops_fused']:.0f} fused; a standalone {mm['standalone']} tf.matmul runs at "
              f"{mm['gflops_standalone']:.0f} GFLOP/s, [2048,2048]x[2048,2048] at {mm['gflops_square']:.0f}")
    rows = [(layer, f"{u:.2f}", f"{f:.2f}") for layer, u, f in r["layers"][:top]]
    print(render(("layer (a fused one: the layers it replaces; by unfused op time)", "unfused ms", "fused ms"), rows))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", default="bert-128", help=f"comma-separated cases of {list(CASES)}")
    p.add_argument("--steps", type=int, default=5, help="traced calls per function and window")
    p.add_argument("--windows", type=int, default=4, help="traced windows per function, alternating")
    p.add_argument("--repeat", type=int, default=9, help="untraced rounds (each runs both functions once)")
    p.add_argument("--bert-layers", type=int, default=4)
    p.add_argument("--width", type=float, default=1.0, help="YOLOv3 channel multiplier")
    p.add_argument("--top", type=int, default=12, help="layers listed per model")
    p.add_argument("--inter-op", type=int, default=1,
                   help="TensorFlow's inter-op threads: 1 runs ops one at a time, so each op's time is its own "
                        "(concurrent ops share the cores and their times overlap); 0: TensorFlow's default")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    args = p.parse_args(argv)
    if args.inter_op:
        tf.config.threading.set_inter_op_parallelism_threads(args.inter_op)
    results = [run_case(c, args) for c in chosen(p, args.only, list(CASES))]
    if args.json:
        print(json.dumps({"machine": machine_line(), "tensorflow": tf.__version__, "cases": results}, indent=1))
        return 0
    print(machine_line() + f"; TensorFlow inter-op threads: {args.inter_op or 'default'}")
    for r in results:
        print_case(r, args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
