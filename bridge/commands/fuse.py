"""`bridge fuse MODEL -o DIR`: a SavedModel (or TF1 frozen GraphDef) rewritten at
graph level onto the fused ops (bridge.converters.graph_fuse), written as a
SavedModel TensorFlow and TF Serving run; prints the fusion report."""
from __future__ import annotations

import json
import os
import sys

NAME = "fuse"
HELP = "rewrite a SavedModel or frozen GraphDef onto the fused ops and write it as a SavedModel"
DESCRIPTION = (HELP + ". Every op's graph patterns (layer norms over the last axis in any TF form, Conv2D + "
               "BatchNorm + LeakyReLU blocks, YOLO decode heads, a team's own) are matched after function inlining and constant "
               "folding; each match is checked numerically against the op's reference before it is rewritten. "
               "The SavedModel loads where bridge's op library is loaded (import bridge.tf_ops first).")


def add_arguments(p):
    p.add_argument("model", metavar="MODEL", help="a SavedModel folder or a frozen GraphDef .pb")
    p.add_argument("-o", "--output", required=True, metavar="DIR",
                   help="the SavedModel folder to write (written whole or not at all; one there is replaced)")
    p.add_argument("--inputs", metavar="NAME:0,...", help="a .pb's input tensors (default: its placeholders)")
    p.add_argument("--outputs", metavar="NAME:0,...", help="a .pb's output tensors (required for a .pb)")
    p.add_argument("--no-verify", dest="verify", action="store_false",
                   help="skip running the written SavedModel against the original on random inputs")
    p.add_argument("--json", action="store_true", help="print the fusion report (and the check) as JSON")


def run(args) -> int:
    from bridge.cli import UsageError
    from bridge.commands._options import tensor_names
    from bridge.converters.graph_model import GraphModelError, load
    path = os.path.expanduser(args.model)
    is_pb = os.path.isfile(path) and path.endswith(".pb")
    if not (os.path.isdir(path) and os.path.isfile(os.path.join(path, "saved_model.pb"))) and not is_pb:
        raise UsageError(f"{args.model}: not a SavedModel folder (no saved_model.pb in it) nor a frozen GraphDef .pb")
    if (args.inputs or args.outputs) and not is_pb:
        raise UsageError("--inputs/--outputs name the tensors of a frozen GraphDef (.pb), not of a SavedModel")
    if os.path.abspath(path) == os.path.abspath(args.output):
        raise UsageError("-o must not be the model's own folder")
    from bridge.modelsource import _stays_inside
    if not is_pb:
        from bridge.modelsource import ModelSourceError
        try:
            _stays_inside(path)
        except ModelSourceError as e:
            raise UsageError(str(e)) from None
    try:
        original = load(path, inputs=tensor_names(args.inputs), outputs=tensor_names(args.outputs))
    except GraphModelError as e:
        raise UsageError(str(e)) from None
    from bridge.converters.graph_fuse import fuse_graph
    print(f"bridge fuse: rewriting {args.model} ...", file=sys.stderr)
    fused, report = fuse_graph(original)
    written = fused.save(args.output)
    check = check_saved(original, written) if args.verify else None
    if args.json:
        print(json.dumps({"fusion": report.to_dict(), "output": written, "check": check}, indent=1))
    else:
        print(report.render())
        print(f"wrote {written} (SavedModel, {sum(fused.op_counts().get(s, 0) for s in _op_names())} fused nodes)")
        if check is not None:
            print(f"check: the written SavedModel vs the original on random inputs: max |diff| "
                  f"{check['max_abs_error']:.3g} ({'ok' if check['ok'] else 'FAIL'})")
    return 0 if check is None or check["ok"] else 1


def _op_names():
    from bridge import ops
    return list(ops.SPECS)


def check_saved(original, path, seed: int = 0) -> dict:
    """The SavedModel at `path`, reloaded, against `original` (a GraphModel) on
    seeded inputs at bridge parity's default float32 tolerance."""
    import numpy as np
    import tensorflow as tf
    import bridge.tf_ops  # noqa: F401  the op library, before a graph with the ops reloads
    from bridge import modelsource
    from bridge.parity.compare import compare, default_tolerance
    src = modelsource.from_object(original)
    feeds = src.sample_inputs(seed=seed)
    want = original.signatures["serving_default"](**{k: tf.constant(v) for k, v in feeds.items()})
    got = tf.saved_model.load(path).signatures["serving_default"](**{k: tf.constant(v) for k, v in feeds.items()})
    worst, ok = 0.0, True
    for name, ref in want.items():
        ref = np.asarray(ref)
        out = np.asarray(got[name])
        c = compare(out, ref, default_tolerance(ref.dtype))
        worst = max(worst, float(c.max_abs_error))
        ok = ok and bool(c.passed)
    return {"max_abs_error": worst, "ok": ok}
