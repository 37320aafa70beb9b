"""`bridge.parity(...)`: what `bridge parity` does, as a function (the command
is argparse over this): the same inputs through every runtime, compared
against the reference, in a ParityReport."""
from __future__ import annotations

import os
import time
from typing import Any, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from bridge.api import team_ops
from bridge.api.progress import ProgressArg, sink

Tolerance = Union[None, float, Mapping[str, float]]


def parity(model: Any, runtimes: Union[None, str, Sequence[str]] = None, per_layer: bool = False,
           inputs: Union[None, str, "os.PathLike[str]", Mapping[str, np.ndarray]] = None, *,
           batch: int = 1, input_shapes=None, seed: int = 0, atol: Tolerance = None, rtol: Tolerance = None,
           config: Optional[Mapping[str, Any]] = None, onnx: Optional[str] = None,
           save_inputs: Optional[str] = None,
           graph_inputs: Optional[Sequence[str]] = None, graph_outputs: Optional[Sequence[str]] = None,
           load_outputs: Union[None, Mapping[str, str], Sequence[Tuple[str, str]]] = None,
           progress: ProgressArg = False, op_spec: Sequence = (), op_library: Sequence = (), imports: Sequence = (),
           ort_library: Sequence = (), litert_library: Optional[str] = None, task: Optional[str] = None,
           preprocess=None):
    """Runs `model` on every runtime here (or those named in `runtimes`, a list
    or "a,b") and compares each output with the reference, as `bridge parity
    MODEL` does. Returns a bridge.parity.ParityReport: `.passed`, `.rows`,
    `.layers`, `.first_divergence`, `.to_json()`, `.table()`, `.to_pandas()`.

    `model`: a built-in name, a .keras file, a SavedModel folder, an .onnx file,
    a keras.Model, a loaded SavedModel, an onnx.ModelProto or a tf.function /
    ConcreteFunction with an input signature. `inputs`: {input name: array}, an
    .npz or .npy file, or a folder of .npy files and/or images (bridge.parity.real_inputs;
    images need `preprocess`: "scale-0-1", "caffe", "tf", "MODULE:FUNC" or a callable);
    else seeded inputs of `batch`, `input_shapes` and `seed`. `task`: "classify",
    "detect" or "embed" adds answer-level agreement (bridge.parity.task; `.task`).
    `graph_inputs`/`graph_outputs`: a frozen GraphDef .pb's tensor names, as
    tf2onnx --graphdef takes them (inputs default to its placeholders).
    `atol`/`rtol`: a number for every output or {output name: number}.
    `onnx`: an ONNX export to use instead of bridge's own. `load_outputs`:
    {runtime name: .npz file or msame folder} produced elsewhere. `progress`:
    True prints the CLI's progress lines on stderr; a callable receives them.

    A runtime that disagrees is a FAIL row, not an exception. Raises
    ModelSourceError (the model, a shape, the inputs, an unknown runtime),
    BuildError, SpecError, ImportFailed or a LibraryError, all bridge.BridgeError.
    `imports`: modules or .py files imported first, as `--import` does."""
    from bridge.native import build_error_behind
    try:
        team_ops.load_imports(imports)  # --import: a team's Keras classes and op specs, first
        if graph_inputs or graph_outputs:
            model = _graphdef(model, graph_inputs, graph_outputs, input_shapes)
        return _parity(model, runtimes, per_layer, inputs, batch, input_shapes, seed, atol, rtol, config, onnx,
                       save_inputs, load_outputs, progress, op_spec, op_library, ort_library, litert_library,
                       task, preprocess)
    except Exception as e:
        found = build_error_behind(e)
        if found is None or found is e:
            raise
        raise found from None


def _parity(model, runtimes, per_layer, inputs, batch, input_shapes, seed, atol, rtol, config, onnx, save_inputs,
            load_outputs, progress, op_spec, op_library, ort_library, litert_library, task=None, preprocess=None):
    from bridge.parity import real_inputs
    from bridge.parity.inputs import InputError
    from bridge.parity.runner import run_parity
    lines = sink(progress)
    start = time.perf_counter()

    def log(msg):
        if lines is not None:
            lines(f"[{time.perf_counter() - start:6.1f}s] {msg}")

    if batch < 1:
        raise InputError(f"--batch must be >= 1, got {batch}")
    if isinstance(runtimes, str):
        runtimes = [r.strip() for r in runtimes.split(",") if r.strip()]
        if not runtimes:
            raise InputError("--runtimes is empty")
    elif runtimes is not None:
        runtimes = list(runtimes)
        if not runtimes:
            raise InputError("--runtimes is empty")
    team_ops.load(op_spec, op_library, ort_library, litert_library)
    if not isinstance(model, (str, os.PathLike)) or not os.fspath(model).endswith(".onnx"):
        team_ops.quiet_tensorflow()
    if not isinstance(model, (str, os.PathLike)):
        from bridge.api.model import live
        model = live(model)
    if isinstance(inputs, (str, os.PathLike)):
        given = real_inputs.open_inputs(inputs, preprocess)
    elif preprocess is not None and not isinstance(inputs, real_inputs.RealInputs):
        raise InputError("--preprocess applies to images read from --inputs DIR")
    else:
        given = inputs if inputs is None or isinstance(inputs, real_inputs.RealInputs) else dict(inputs)
    if given is not None and input_shapes and not getattr(given, "images", None):
        raise InputError("--input-shape and --inputs exclude each other (the file fixes the shapes; images are "
                         "resized to it)")
    loaded = list(load_outputs.items()) if isinstance(load_outputs, Mapping) else list(load_outputs or ())
    return run_parity(model, runtimes=runtimes, batch=batch, input_shapes=input_shapes or None, seed=seed,
                      atol=_tolerance(atol, "--atol"), rtol=_tolerance(rtol, "--rtol"), per_layer=per_layer,
                      inputs=given, save_inputs=save_inputs, load_outputs=loaded, config=dict(config or {}),
                      onnx_file=onnx, log=log, task=task)


def _graphdef(model, inputs, outputs, input_shapes):
    """A frozen .pb resolved with its tensor names (the runner takes it so)."""
    from bridge import modelsource
    from bridge.parity.inputs import InputError
    if not isinstance(model, (str, os.PathLike)):
        raise InputError("graph_inputs/graph_outputs name the tensors of a frozen GraphDef .pb file")
    return modelsource.resolve(os.fspath(model), input_shapes=input_shapes, graph_inputs=list(inputs or ()),
                               graph_outputs=list(outputs or ()))


def _tolerance(value: Tolerance, flag: str) -> dict:
    """A number (every output) or {output: number} -> the runner's {"" or output: number}."""
    from bridge.parity.inputs import InputError
    if value is None:
        return {}
    items = value.items() if isinstance(value, Mapping) else [("", value)]
    out = {}
    for name, number in items:
        try:
            number = float(number)
        except (TypeError, ValueError):
            raise InputError(f"{flag} {number!r}: expected a number or OUTPUT=NUMBER") from None
        if not number >= 0:
            raise InputError(f"{flag} {(name + '=') if name else ''}{number}: must be a non-negative number")
        out[name] = number
    return out
