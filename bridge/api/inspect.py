"""`bridge.inspect(path)`: what `bridge inspect FILE` reads, as a summary object
(`.render()` is the CLI's text, `.to_json()` its --json). Needs no TensorFlow."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Union


def inspect(path: Union[str, "os.PathLike[str]"]):
    """The summary of a .tflite or .onnx file (by content: the TFLite file
    identifier; else by suffix): a TFLiteSummary or an ONNX summary with the op
    census, custom ops, inputs, outputs, opsets, functions and external data.
    Raises InspectError (a bridge.BridgeError) with the CLI's message."""
    from bridge.tflite_inspect import InspectError, inspect_tflite, is_tflite
    p = Path(path)
    if not p.is_file():
        raise InspectError(f"{os.fspath(path)}: no such file")
    with open(p, "rb") as f:
        head = f.read(8)
    if is_tflite(head) or p.suffix.lower() == ".tflite":
        return inspect_tflite(p)
    if p.suffix.lower() == ".onnx":
        from bridge.onnx_inspect import inspect_onnx
        return inspect_onnx(p)
    raise InspectError(f"{os.fspath(path)}: not a TFLite flatbuffer and not named .onnx; bridge inspect reads "
                       f".tflite and .onnx files")
