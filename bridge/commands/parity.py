"""`bridge parity`: one model through every runtime, compared against the reference."""
from __future__ import annotations

import argparse
import json
import sys

from bridge import atomic
from bridge.commands._options import parse_config, tensor_names

NAME = "parity"
USES_TF_OPS = True  # the op library is built (or found) before any model is loaded
HELP = "run a model through every runtime and prove they agree (down to the first diverging layer)"
DESCRIPTION = """\
Runs MODEL on every runtime available here and compares each output with the
reference: `tf` (the original, unfused TensorFlow model) for TensorFlow models,
`onnx-reference` (onnx's ReferenceEvaluator with bridge's float64 reference
ops) for an .onnx MODEL. A runtime that cannot run here says why in the table.

Comparison, element by element (docs/ops.md): element i passes when
  |got[i] - ref[i]| <= max(atol * max(1, |ref[i]|), rtol * |ref[i]|)
(each element is held to its own magnitude, never to the largest value of the
output). Defaults: float32 atol 1e-4 rtol 1e-4; float16 1e-2/1e-2; integer
outputs exact. A NaN or Inf on either side fails unless both sides hold the same
one at that place (the row says so); a reference that produces NaN fails the run.
--atol/--rtol take a number (all outputs) or NAME=NUMBER (one output).

The judge of a Keras MODEL is the same model run in float64 (row tf-float64:
TF float32's own distance from it, the floor). Every runtime, per output and
per layer, is measured against float64: element i passes when its error is
within max(the bound above, 3 x min(E, R x max(1, |f64[i]|))), E being TF
float32's largest error on that tensor and R its largest per max(1, |f64|)
("as close to float64 as TF float32 itself, within 3x"); where that widens
the bound, the mean error must also be within 3x TF float32's. Without a
float64 run (a SavedModel, an .onnx MODEL, a model whose float64 copy is
refused) runtimes are judged against the reference, and a row that would
need float64 says why there is none; a saturated softmax whose arg-max flips
is then "ill-conditioned" (exit 0, counted apart, --json "ill_conditioned").

Numbers (table, --json, --csv): cosine similarity, RMSE, max abs / max rel,
mean rel, relative Euclidean distance, error quantiles p50/p99/p99.9, elements
past the bound; --csv uses msit's column names where they mean the same.

Real inputs (--inputs): an .npz, an .npy, or a folder of NAME.npy and/or
images (--preprocess scale-0-1|caffe|tf|MODULE:FUNC|FILE.py:FUNC; resized to
the model's H x W). --task classify|detect|embed adds answer-level agreement
per runtime against TF float32 and float64: top-1 (>= 0.99) and top-5
overlap; boxes decoded from boxes/objectness/class_probs (score >= 0.25,
NMS 0.45) matched at IoU >= 0.5 and the same class (>= 0.95); the smallest
embedding cosine (>= 0.99). A quantized export (tflite-float16,
tflite-dynamic) whose outputs are past their elementwise bound is judged by
the task instead, and says so; other runtimes are judged elementwise.

Exit codes: 0 every runtime agrees (or is ill-conditioned), 1 a runtime disagrees or fails (or the
reference produced NaN), 2 usage error (unknown runtime, bad file, bad shape)."""


def _runtime_help() -> str:
    try:
        from bridge.parity.runtimes import discover
        found, _ = discover()
        return "; ".join(f"{n}: {c.description}" + ("" if getattr(c, "default", True) else " (opt-in: only when named)")
                         for n, c in found.items())
    except Exception as e:  # help must print even when an adapter is broken
        return f"(runtimes not listed: {e})"


def add_arguments(p):
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("model", metavar="MODEL", help="a built-in model name, a .keras file, a SavedModel folder or an .onnx file")
    p.add_argument("--runtimes", metavar="LIST", help="comma-separated runtimes (default: every default one available here). "
                   + _runtime_help())
    p.add_argument("--batch", type=int, default=1, metavar="N", help="batch size of generated inputs (default 1)")
    p.add_argument("--input-shape", action="append", metavar="NAME:D,D,...",
                   help="shape of one input (repeatable); fixes dims the model leaves open")
    p.add_argument("--config", action="append", metavar="KEY=VALUE",
                   help="built-in model option (repeatable), e.g. input_size=96 width=0.125")
    p.add_argument("--seed", type=int, default=0, help="seed of the generated inputs (default 0)")
    p.add_argument("--outputs", metavar="NAME:0,...", help="a frozen GraphDef .pb's output tensors, as tf2onnx "
                   "--graphdef and bridge export --outputs take them (required for a .pb)")
    p.add_argument("--graph-inputs", metavar="NAME:0,...", help="a .pb's input tensors (bridge export --inputs; "
                   "default: its placeholders)")
    p.add_argument("--atol", action="append", metavar="[OUTPUT=]A", help="absolute tolerance (per element, times max(1, |ref|))")
    p.add_argument("--rtol", action="append", metavar="[OUTPUT=]R", help="relative tolerance")
    p.add_argument("--per-layer", action="store_true",
                   help="also compare every intermediate tensor shared with the reference; print the first that "
                        "fails and the last that passes before it, per runtime")
    p.add_argument("--json", metavar="FILE", help="write every number as JSON to FILE ('-' for stdout)")
    p.add_argument("--csv", metavar="FILE", help="write one row per runtime x output (and x layer) with msit's "
                   "metric names to FILE")
    p.add_argument("--report", metavar="DIR", help="write DIR/report.html: one self-contained page with the "
                   "verdicts, the first divergence and plots (needs matplotlib: the report extra)")
    p.add_argument("--save-inputs", metavar="F", help="write the inputs used to F (.npz)")
    p.add_argument("--inputs", metavar="DIR|FILE", help="real inputs: an .npz (one array per input), an .npy "
                   "(a single-input model takes any single array), or a folder of NAME.npy files and/or images "
                   "(.png/.jpg/.bmp: the batch of the one image input, resized to its H x W; needs --preprocess)")
    p.add_argument("--preprocess", metavar="HOW", help="how images become inputs: scale-0-1 (x/255), caffe (BGR "
                   "minus the ImageNet mean), tf (x/127.5-1, in [-1,1]), or MODULE:FUNC / FILE.py:FUNC (called "
                   "with the float32 batch [N,H,W,C] in 0..255 RGB, returning the same shape)")
    p.add_argument("--task", choices=("classify", "detect", "embed"), help="add answer-level agreement per "
                   "runtime against the reference and float64: top-1/top-5 (classify), matched boxes of the decoded "
                   "outputs (detect), cosine of embeddings (embed); quantized TFLite exports are judged by it "
                   "(bridge.parity.task states the thresholds)")
    p.add_argument("--load-inputs", metavar="F", help="read the inputs from F (as --inputs)")
    p.add_argument("--load-outputs", action="append", metavar="RUNTIME=F",
                   help="compare outputs produced elsewhere: an .npz keyed by output name, or a folder of raw .bin "
                        "files as Ascend's msame writes them (shapes and dtypes from the model)")
    p.add_argument("--onnx", metavar="FILE", help="use this ONNX export for the ONNX runtimes instead of exporting MODEL")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")


def _tolerances(items, flag):
    from bridge.cli import UsageError
    out = {}
    for item in items or []:
        name, sep, value = item.rpartition("=")
        try:
            number = float(value)
        except ValueError:
            raise UsageError(f"{flag} {item!r}: expected a number or OUTPUT=NUMBER") from None
        if not number >= 0:
            raise UsageError(f"{flag} {item!r}: must be a non-negative number")
        out[name if sep else ""] = number
    return out


def _inputs(args):
    """--inputs (or its older name --load-inputs), read; images wait for the model's size."""
    from bridge.cli import UsageError
    from bridge.parity import real_inputs
    if args.inputs and args.load_inputs:
        raise UsageError("--inputs and --load-inputs are one option: give one")
    path = args.inputs or args.load_inputs
    if path is None:
        if args.preprocess:
            raise UsageError("--preprocess applies to images read from --inputs DIR")
        return None
    return real_inputs.open_inputs(path, args.preprocess, "--inputs" if args.inputs else "--load-inputs")


def _write_json(path, data):
    text = json.dumps(data, indent=1, allow_nan=False)
    if path == "-":
        print(text)
        return
    atomic.write_text(path, text + "\n")


def run(args) -> int:
    """argparse over bridge.api.parity.parity (the one implementation)."""
    from bridge.cli import UsageError
    from bridge.api.parity import parity
    from bridge.parity.inputs import InputError
    from bridge.parity.loaded import parse_load_outputs

    if args.report:  # before the run: a missing plotting library is a usage error, not a lost hour
        from bridge.parity import html_report
        try:
            html_report.require()
        except html_report.ReportError as e:
            raise UsageError(str(e)) from None
    try:
        report = parity(args.model, runtimes=args.runtimes, per_layer=args.per_layer, inputs=_inputs(args),
                        batch=args.batch, input_shapes=args.input_shape or None, seed=args.seed,
                        atol=_tolerances(args.atol, "--atol"), rtol=_tolerances(args.rtol, "--rtol"),
                        config=parse_config(args.config), onnx=args.onnx, save_inputs=args.save_inputs,
                        load_outputs=parse_load_outputs(args.load_outputs), task=args.task,
                        graph_inputs=tensor_names(args.graph_inputs), graph_outputs=tensor_names(args.outputs),
                        progress=not (args.quiet or args.json == "-"))
    except InputError as e:
        raise UsageError(str(e)) from None
    if args.json:
        _write_json(args.json, report.to_json())
    if args.csv:
        from bridge.parity import metrics_csv
        metrics_csv.write(args.csv, report)
    if args.report:
        from bridge.parity import html_report
        path = html_report.write(args.report, report)
        if not args.quiet:
            print(f"report: {path}", file=sys.stderr)
    if args.json != "-":
        print(report.table())
    return 0 if report.passed else 1
