"""`bridge inspect FILE.tflite|FILE.onnx`: what a model file holds, as tables or JSON."""
from __future__ import annotations

import json
from pathlib import Path

NAME = "inspect"
HELP = "op census, custom ops, inputs/outputs and size of a .tflite or .onnx file"
USES_TENSORFLOW = False  # runs on a box with onnx/onnxruntime only

DESCRIPTION = (HELP + ". TFLite: builtin and custom ops with counts, custom-op attributes (FlexBuffer), "
               "signatures, weights by dtype. ONNX: opsets, nodes by domain, custom-domain nodes, "
               "model-local functions, external data.")


def add_arguments(p):
    p.add_argument("file", metavar="FILE", help="a .tflite or .onnx file")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")


def summarise(path: str):
    """The summary of one file, by content (TFLite identifier) and else by suffix."""
    from bridge.cli import UsageError
    from bridge.tflite_inspect import InspectError, inspect_tflite, is_tflite
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"{path}: no such file")
    with open(p, "rb") as f:
        head = f.read(8)
    try:
        if is_tflite(head) or p.suffix.lower() == ".tflite":
            return inspect_tflite(p)
        if p.suffix.lower() == ".onnx":
            from bridge.onnx_inspect import inspect_onnx
            return inspect_onnx(p)
    except InspectError as e:
        raise UsageError(str(e)) from None
    raise UsageError(f"{path}: not a TFLite flatbuffer and not named .onnx; bridge inspect reads .tflite and .onnx files")


def run(args) -> int:
    summary = summarise(args.file)
    print(json.dumps(summary.to_json(), indent=1) if args.json else summary.render())
    return 0
