"""`bridge inspect FILE.tflite|FILE.onnx`: what a model file holds, as tables or JSON."""
from __future__ import annotations

import json

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
    """bridge.api.inspect.inspect, its errors as usage errors (exit 2)."""
    from bridge.api.inspect import inspect
    from bridge.cli import UsageError
    from bridge.tflite_inspect import InspectError
    try:
        return inspect(path)
    except InspectError as e:
        raise UsageError(str(e)) from None


def run(args) -> int:
    summary = summarise(args.file)
    print(json.dumps(summary.to_json(), indent=1) if args.json else summary.render())
    return 0
