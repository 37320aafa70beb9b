"""`bridge.export(...)`: what `bridge export` does, as a function (the command
is argparse over this). The exporter interface is at the top of
bridge/commands/export.py; each target is the module
bridge.converters.export_<to>, found by discovery."""
from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from bridge.api import team_ops
from bridge.api.progress import ProgressArg, sink
from bridge.exporting import ExportError, ExportResult, OptionError, Progress

Shapes = Union[None, Sequence[str], Mapping[str, Sequence[Optional[int]]]]


def targets() -> Dict[str, str]:
    """{to: module name} of every bridge.converters.export_<to> module present."""
    from importlib.util import find_spec
    spec = find_spec("bridge.converters")
    found = {}
    for info in pkgutil.iter_modules(spec.submodule_search_locations):
        if info.name.startswith("export_"):
            found[info.name[len("export_"):]] = f"bridge.converters.{info.name}"
    return dict(sorted(found.items()))


def exporter(to: str):
    """The exporter module of `--to TO`; OptionError for an unknown target,
    ExportError for one that cannot be imported."""
    known = targets()
    if to not in known:
        raise OptionError(f"--to {to}: the targets are {', '.join(known)}")
    try:
        return importlib.import_module(known[to])
    except Exception as e:
        raise ExportError(f"the {to} exporter cannot be loaded: {type(e).__name__}: {e}") from None


def own_options(mod) -> Dict[str, argparse.Action]:
    """{dest: its argparse action} of the flags an exporter adds (--quantize,
    --parser, ...): their defaults and choices are the API's too."""
    add = getattr(mod, "add_arguments", None)
    if add is None:
        return {}
    group = argparse.ArgumentParser(add_help=False).add_argument_group()
    add(group)
    return {a.dest: a for a in group._group_actions}


def export(model: Any, to: str = "onnx", output: Optional[Union[str, "os.PathLike[str]"]] = None, *,
           mode: Optional[str] = None, opset: Optional[int] = None, fuse: bool = True,
           input_shapes: Shapes = None, batch: Optional[int] = None, seed: int = 0,
           config: Optional[Mapping[str, Any]] = None, atol: Optional[float] = None, verify: bool = True,
           verbose: bool = False, progress: ProgressArg = False,
           op_spec: Sequence = (), op_library: Sequence = (), ort_library: Sequence = (),
           litert_library: Optional[str] = None, graph_inputs: Optional[Sequence[str]] = None,
           graph_outputs: Optional[Sequence[str]] = None, imports: Sequence = (), **options: Any) -> ExportResult:
    """Exports `model` to `to` ("onnx", "tflite", "ge"), fused onto the custom ops
    and verified against TensorFlow, as `bridge export MODEL --to TO -o OUTPUT` does.

    `model`: a keras.Model, a tf.function / ConcreteFunction with an input
    signature (or a tf.Module whose __call__ is one), a loaded SavedModel, a
    path (.keras, SavedModel folder, frozen GraphDef .pb with its tensor names in
    `graph_inputs`/`graph_outputs`) or a built-in name (`config` then holds its
    options, e.g. {"input_size": 96}). `output`: the file (folder for "ge");
    default: the model's name plus the target's suffix. `input_shapes`:
    ["image:1,96,96,3"] or {"image": (1, 96, 96, 3)} (None for a dynamic dim).
    The target's own options go in `options` (quantize="float16" for tflite;
    parser=, soc_version=, route= for ge), with the CLI's defaults.
    `op_spec`/`op_library`/`ort_library`/`litert_library`: a team's own ops
    (see register_op); `imports`: modules or .py files imported first, as
    `--import` does (Keras classes and op specs they register). `progress`: True prints the CLI's stage lines on stderr;
    a callable receives them.

    Returns an ExportResult (`.ok` False when an output is beyond its bound:
    nothing is raised for that). Raises ModelSourceError (the model or a shape),
    OptionError (an option), ExportError (the export failed), BuildError
    (bridge's native library did not build), SpecError, ImportFailed or a
    LibraryError (a team's op): all bridge.BridgeError, each with the CLI's message."""
    from bridge.native import build_error_behind
    try:
        team_ops.load_imports(imports)
        return _export(model, to, output, mode, opset, fuse, input_shapes, batch, seed, config, atol, verify,
                       verbose, progress, op_spec, op_library, ort_library, litert_library,
                       (graph_inputs, graph_outputs), options)
    except Exception as e:
        found = build_error_behind(e)
        if found is None or found is e:
            raise
        raise found from None


def _export(model, to, output, mode, opset, fuse, input_shapes, batch, seed, config, atol, verify, verbose,
            progress, op_spec, op_library, ort_library, litert_library, graph_names, options) -> ExportResult:
    from bridge.api.model import resolve
    lines = sink(progress)
    team_ops.load(op_spec, op_library, ort_library, litert_library)
    mod = exporter(to)
    modes = tuple(getattr(mod, "MODES", ()))
    if mode is not None and mode not in modes:
        raise OptionError(f"--mode {mode}: --to {to} has modes {', '.join(modes) or '(none)'}")
    if opset is not None and not getattr(mod, "USES_OPSET", False):
        raise OptionError(f"--opset applies to targets that write ONNX, not to --to {to}")
    own = _target_options(mod, to, options)
    team_ops.quiet_tensorflow(verbose)
    progress_ = Progress(enabled=lines is not None, sink=lines)
    label = os.fspath(model) if isinstance(model, (str, os.PathLike)) else getattr(model, "name", type(model).__name__)
    with progress_.stage(f"loading {label}"):
        source = resolve(model, input_shapes=input_shapes, batch=batch, seed=seed, config=dict(config or {}),
                         graph_inputs=graph_names[0], graph_outputs=graph_names[1])
    if source.sample_note():  # the dims left open, and this run's values of them
        progress_.note(source.sample_note())
    output = os.fspath(output) if output is not None else source.name + getattr(mod, "SUFFIX", "")
    from bridge.parity import verify as verifier  # the target's parity runtime judges what the exporter wrote
    result = verifier.export(mod, source, output, mode=mode or (modes[0] if modes else None), opset=opset, fuse=fuse,
                             seed=seed, verbose=verbose, progress=progress_, atol=atol, verify=verify, **own)
    if not result.checks and not verify:
        result.not_verified = "--no-verify"
    return result


def _target_options(mod, to: str, given: Mapping[str, Any]) -> Dict[str, Any]:
    actions = own_options(mod)
    unknown = [k for k in given if k not in actions]
    if unknown:
        takes = ", ".join(sorted(actions)) or "none"
        raise OptionError(f"unknown option {unknown[0]!r} for --to {to} (its own options: {takes})")
    out = {}
    for dest, action in actions.items():
        value = given.get(dest, action.default)
        if dest in given and value is not None and action.choices is not None and value not in action.choices:
            raise OptionError(f"{action.option_strings[0]} {value}: --to {to} takes "
                              f"{', '.join(map(str, action.choices))}")
        out[dest] = value
    return out


__all__: List[str] = ["export", "targets", "exporter", "own_options"]
