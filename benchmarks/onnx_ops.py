"""Op-level onnxruntime speeds: each com.bridge op's native kernel against the
roads onnxruntime takes without it, side by side in one run.

    python benchmarks/onnx_ops.py [--threads 2] [--repeat 30] [--json] [--quick] [--no-busy]

Rows: every built-in op, at the shapes of its ORT_BENCH_SHAPES (its folder's bench.py),
else at its large case-table rows (its spec's examples()).
Roads:
  native    the library's kernel (session(kernels=[op])), where it has one
            ("vs native" is then relative to the function road)
  builtin   onnxruntime's own standard op on the same node, where the op names one
            (ORT_BENCH_BUILTIN: FusedLayerNorm's LayerNormalization, opset 17)
  function  the model-local function, inlined and optimised by onnxruntime
            (session(kernels="none")), at the op's ORT_BENCH_FUNCTION_OPSET (else 17):
            FusedLayerNorm at opset 16, i.e. the decomposition onnxruntime fuses
            back into its LayerNormalization kernel; YoloConvBnLeaky: its fused
            NCHWc Conv+LeakyRelu between Transposes.
  native-openmp  (where the op's bench.py names ORT_BENCH_NATIVE_VARIANTS) the
            native kernel with other settings: YoloConvBnLeaky's oneDNN on its
            own OpenMP team (BRIDGE_DNNL_THREADS=openmp) instead of the session's threads;
            timed after the other roads, whose cores its spinning team would take
Weights are initializers (as in an exported model); no session's threads spin
(session.intra_op.allow_spinning=0). Rounds alternate between
the roads so that drift on a shared machine hits all of them alike; the table
shows medians and each road's time relative to native (>1: native is faster).
Each case runs twice, quiet and then with one core busy (another process
spinning, as on a shared machine; --no-busy: quiet only): "busy/quiet" is how
much each road slows down when it cannot have every core.
"""
from __future__ import annotations

import argparse
import json
import sys

import numpy as np
import onnx
from onnx import helper

from _common import alternating_medians, machine_line, one_core_busy
from _common import env as env_set
from bridge import onnx_plugins, ops
from bridge.onnx_plugins.one_op import one_op_model
from bridge.table import render


def _rows(spec):
    """The op's ORT_BENCH_SHAPES (its folder's bench.py), else its large case-table
    rows (its examples()): (label, input shapes, node attributes, in --quick)."""
    own = getattr(ops.part(spec, "bench"), "ORT_BENCH_SHAPES", None)
    if own is not None:
        return own
    rows = [e for e in spec.examples() if e.large] or list(spec.examples()[:1])
    return [("x".join(map(str, e.shapes[0])), e.shapes, e.onnx_attrs, i == 0) for i, e in enumerate(rows)]


def _cases(rng, quick, only=None):
    """(op, label, feeds, {road: (model, kernels)}) for every built-in op. The first
    input is fed (normal values), the others are initializers as in an exported
    model (uniform in [0.5, 1.5]: a variance or a scale stays positive)."""
    for spec in ops.all_specs():
        if not ops.is_builtin(spec) or (only and spec.name not in only):
            continue
        bench = ops.part(spec, "bench")
        consts = tuple(a.name for a in spec.inputs[1:])
        for label, shapes, attrs, in_quick in _rows(spec):
            if quick and not in_quick:
                continue
            xs = [rng.standard_normal(shapes[0]).astype(np.float32)] + \
                 [rng.uniform(0.5, 1.5, s).astype(np.float32) for s in shapes[1:]]
            model = one_op_model(spec.name, xs, attrs, opset=17, constants=consts)
            opset = getattr(bench, "ORT_BENCH_FUNCTION_OPSET", 17)
            function = model if opset == 17 else one_op_model(spec.name, xs, attrs, opset=opset, constants=consts)
            roads = {}
            if onnx_plugins.backend_status(spec)["ort_kernel"] == "yes":
                roads["native"] = (model, [spec.name])
            builtin = getattr(bench, "ORT_BENCH_BUILTIN", None)
            if builtin is not None:
                roads["builtin"] = (_as_builtin(model, *builtin), "none")
            roads["function"] = (function, "none")
            for variant, env in getattr(bench, "ORT_BENCH_NATIVE_VARIANTS", {}).items():
                if "native" in roads:
                    roads[variant] = (model, [spec.name], env)
            yield spec.name, label, {spec.inputs[0].name: xs[0]}, roads


def _as_builtin(model, op_type, extra_attrs):
    """`model` with its one node as onnxruntime's own standard op `op_type`."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    node = out.graph.node[0]
    node.domain, node.op_type = "", op_type
    node.attribute.extend([helper.make_attribute(k, v) for k, v in extra_attrs.items()])
    del out.functions[:]
    return out


def _no_spinning():
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.add_session_config_entry(onnx_plugins.SPINNING_KEY, "0")
    return so


def sessions(roads, threads):
    # No session spins: one spinning after its run took the cores of the next road's
    # (the oneDNN convolution's OpenMP threads: 1x1 52x52 ran 9x slower after the function road).
    made = {}
    for name, (model, k, *env) in roads.items():
        with env_set(env[0] if env else {}):
            made[name] = onnx_plugins.session(model, kernels=k, threads=threads, options=_no_spinning())
    return made


def measure(made, feeds, repeat, warmup=3, apart=()):
    """{road: median ms}. The roads in `apart` are timed after the others, not
    between them: oneDNN's OpenMP team spins on after its run (tens of ms) and
    would take the cores of whichever road came next."""
    together = {k: v for k, v in made.items() if k not in apart}
    ms = {}
    for group in [together] + [{k: made[k]} for k in apart if k in made]:
        seconds, _ = alternating_medians({name: (lambda s=s: s.run(None, feeds)) for name, s in group.items()},
                                         repeat, warmup=warmup)
        ms.update({name: t * 1e3 for name, t in seconds.items()})
    return {name: ms[name] for name in made}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeat", type=int, default=30)
    p.add_argument("--quick", action="store_true", help="the smaller shapes only")
    p.add_argument("--json", action="store_true", help="one JSON document instead of the table")
    p.add_argument("--ops", nargs="*", default=None, help="only these op types")
    p.add_argument("--no-busy", action="store_true", help="quiet only: no second run with one core busy")
    args = p.parse_args(argv)
    rng = np.random.default_rng(0)
    results = []
    for op, shape, feeds, roads in _cases(rng, args.quick, args.ops):
        made = sessions(roads, args.threads)
        apart = [name for name, road in roads.items() if len(road) > 2]  # the native variants
        ms = measure(made, feeds, args.repeat, apart=apart)
        busy = {}
        if not args.no_busy:
            with one_core_busy():
                busy = measure(made, feeds, args.repeat, apart=apart)
        fastest = min(ms, key=ms.get)
        base = ms.get("native", ms["function"])
        for road, t in ms.items():
            row = {"op": op, "shape": shape, "road": road, "ms": round(t, 4),
                   "vs_native": round(t / base, 3), "fastest": road == fastest}
            if busy:
                row.update(busy_ms=round(busy[road], 4), busy_over_quiet=round(busy[road] / t, 3))
            results.append(row)
        if not args.json:
            print(f"  measured {op} {shape}", file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps({"machine": machine_line(), "threads": args.threads, "repeat": args.repeat,
                          "rows": results}, indent=1))
        return 0
    print(machine_line())
    head = ["op", "shape", "road", "median ms", "vs native", "fastest"]
    if not args.no_busy:
        head[4:4] = ["one core busy ms", "busy/quiet"]
    rows = []
    for r in results:
        row = [r["op"], r["shape"], r["road"], r["ms"], f"{r['vs_native']:.2f}x", "*" if r["fastest"] else ""]
        if not args.no_busy:
            row[4:4] = [r["busy_ms"], f"{r['busy_over_quiet']:.2f}x"]
        rows.append(row)
    print(render(head, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
