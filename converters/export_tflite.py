"""`bridge export MODEL --to tflite`: a (fused) TensorFlow model as a TFLite flatbuffer.

Modes:
- `lowered` (default): the model is traced under `bridge.tf_ops.lowered()`, so every
  fused op's public wrapper emits its composite (standard TF ops) and the file holds
  TFLite builtins only (CONV_2D with the folded weights, LEAKY_RELU, LOGISTIC, EXP,
  MEAN, ...). It runs on any TFLite runtime, delegates included.
- `custom`: the fused ops stay TFLite CUSTOM ops (custom_code = the op type, the TF
  attributes in a FlexBuffer), for runtimes that bring their own kernels: bridge's
  LiteRT kernels (litert/) run them, and verify the file here when they
  serve every custom op in it. The report lists each custom op with its
  custom_code, version and attribute keys, what an application registers.
- `fastest`: as `custom`, but each fused op call that XNNPack's builtins run faster
  than bridge's LiteRT kernel is lowered (the op folder's bench.py says which:
  `litert_prefers_builtins(input_shapes, attrs, avx512)` for this CPU; pointwise YoloConvBnLeaky,
  and on a CPU without AVX-512 every one with 8 or more input channels).

Quantisation (post-training, no calibration data): `float16` stores the weights as
float16; `dynamic` stores them as int8 and quantises activations per call.
`QUANTIZE_BOUND` states how much error each may add.

A model that TFLite cannot take fails with `TFLiteExportError` naming the op and the
converter's reason; no file is written (temporary name, then rename). Importing
this module is cheap (no TensorFlow): the CLI imports every exporter for --help.
The exporter interface is written at the top of bridge/commands/export.py.
"""
from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from typing import Dict, List, Mapping, Optional, Sequence

from bridge import atomic
from bridge import ops as specs
from bridge.exporting import NOT_WRITTEN, Check, ExportError, ExportResult, OptionError, Progress, quiet
from bridge.litert.team_libraries import FLAG as LITERT_FLAG

from . import road_limits
from .shared_steps import model_to_export

DESCRIPTION = ("TFLite: builtins only (lowered: fused ops as their composites), the fused ops as custom ops, or "
               "each on its faster road (fastest)")
MODES = ("lowered", "custom", "fastest")     # the first is the default
SUFFIX = ".tflite"
QUANTIZE = ("none", "float16", "dynamic")

# The most error quantisation may add, as parity's atol and rtol, element by
# element like every bound: |tflite[i] - tf[i]| <= bound * max(1, |tf[i]|), so a
# box is held to its own size and a probability to the bound itself. float16
# weights keep ~3 significant digits; int8 weights with per-call int8 activations
# ~2, compounded over the layers. An export past its bound fails the check.
# Measured per element, worst of seeds 0-2 (bound in brackets):
#   float16 [2e-2]: YOLOv3-tiny 96/416 boxes 0.0025/0.0063, probabilities 0.0017;
#     BERT 2x128 / 4x256 layers 0.0038/0.0043.
#   dynamic [0.25]: YOLOv3-tiny 96/416 boxes 0.051/0.165, probabilities 0.046;
#     BERT 0.075/0.122.
# Deep YOLOv3 (75 convolutions, random weights, width 0.25 at 128) is past both,
# under this rule and under the old whole-output one alike: its raw heads carry
# 0.047 (float16) and 0.73 (dynamic) absolute error, and a box's w = exp(tw)*anchor
# turns that into the same relative error on the box (0.038 and 0.76); so its
# quantised exports fail their check rather than pass with a bound that says nothing.
QUANTIZE_BOUND: Dict[str, Optional[float]] = {"none": None, "float16": 2e-2, "dynamic": 0.25}
# Why a custom-mode file is not run here (see the module docstring).
NO_CUSTOM_KERNELS = (f"custom ops: bridge's LiteRT kernels do not serve them here (a team's op: give its LiteRT "
                     f"kernel with {LITERT_FLAG} DIR; --mode lowered runs anywhere)")


class TFLiteExportError(ExportError):
    """The model cannot become a TFLite file; the message names the op(s) and why."""

    def __init__(self, message: str, ops: Sequence[str] = ()):
        super().__init__(message)
        self.ops = tuple(ops)


def add_arguments(group):
    group.add_argument("--quantize", choices=QUANTIZE, default="none",
                       help="post-training quantisation: float16 weights, or int8 weights with dynamic-range "
                            "activations (default: none)")


def check_options(mode: Optional[str], quantize: Optional[str]):
    mode = mode or MODES[0]
    if mode not in MODES:
        raise OptionError(f"--mode {mode}: the TFLite export has modes {', '.join(MODES)}")
    quantize = quantize or "none"
    if quantize not in QUANTIZE:
        raise OptionError(f"--quantize {quantize}: expected one of {', '.join(QUANTIZE)}")
    return mode, quantize


# -- tracing -------------------------------------------------------------------
def function(model, input_specs, output_names):
    """A fresh tf.function over `input_specs` (name/shape/dtype each) returning
    {output name: tensor}. `model`: a Keras model, a SavedModel signature (takes
    keywords) or any callable taking the inputs positionally. Fresh, so a trace
    cached outside `lowered()` is never reused inside it."""
    import tensorflow as tf
    names = list(output_names)
    sig = [s if isinstance(s, tf.TensorSpec) else
           tf.TensorSpec([None if d is None or d < 0 else int(d) for d in s.shape], tf.as_dtype(s.dtype), name=s.name)
           for s in input_specs]

    def call(*args):
        if hasattr(model, "structured_input_signature"):
            out = model(**{s.name: a for s, a in zip(sig, args)})
        elif _is_keras(model):
            from bridge.modelsource import keras_call_args
            out = model(keras_call_args(model, args), training=False)
        else:
            out = model(*args)
        if isinstance(out, Mapping):
            missing = [n for n in names if n not in out]
            if missing:
                raise TFLiteExportError(f"the model has no output named {missing[0]!r}; it returns {sorted(out)}")
            return {n: out[n] for n in names}
        out = list(out) if isinstance(out, (list, tuple)) else [out]
        if len(out) != len(names):
            raise TFLiteExportError(f"the model returns {len(out)} outputs, {len(names)} names given ({names})")
        return dict(zip(names, out))

    return tf.function(call, input_signature=sig, autograph=False)


def lowered_graph(model, where=None):
    """A TensorFlow graph (SavedModel, GraphModel) with every spec'd op node (or those
    `where(spec, input_shapes, attrs)` picks) a call of the op's composite
    (graph_model.GraphModel.lowered), for builtins-only (or `fastest`) TFLite."""
    from .graph_model import GraphModelError, load
    try:
        return load(model).lowered(where)
    except GraphModelError as e:
        raise TFLiteExportError(str(e)) from None


def litert_lowers(spec, input_shapes, attrs) -> bool:
    """`fastest` mode: whether this call of the op goes to TFLite builtins (XNNPack)
    rather than bridge's LiteRT kernel on this CPU, as the op's bench.py measured."""
    from bridge import cpu_flags
    rule = getattr(specs.part(spec, "bench"), "litert_prefers_builtins", None)
    return rule is not None and bool(rule(input_shapes, attrs, cpu_flags.has_avx512_core()))


def _lowering_rule(mode: str):
    """What lowered() and lowered_graph() take as `where` in this mode: None lowers every call."""
    return litert_lowers if mode == "fastest" else None


def _is_keras(model) -> bool:
    keras = sys.modules.get("keras")
    return keras is not None and isinstance(model, keras.Model)


def trace(fn, mode: str):
    """The concrete function the converter reads: under tf_ops.lowered() in
    `lowered` mode (composites), as is in `custom` mode (the fused ops kept), and
    lowered call by call (litert_lowers) in `fastest` mode."""
    tf_ops = None
    if mode != "custom":
        try:  # fused layers import it on their first call, i.e. during this very trace
            from bridge import tf_ops
        except Exception:  # no op library: a model with fused ops fails its trace with the reason
            tf_ops = None
    if tf_ops is not None:
        with tf_ops.lowered(where=_lowering_rule(mode)):
            return fn.get_concrete_function()
    return fn.get_concrete_function()


# -- converting ----------------------------------------------------------------
@contextlib.contextmanager
def _native_stderr_muted(muted: bool = True):
    """The converter's C++ side writes its MLIR diagnostics (a screen per op, with
    call-site chains) straight to fd 2; the Python error carries what matters."""
    if not muted:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with tempfile.TemporaryFile() as sink:
            os.dup2(sink.fileno(), 2)
            try:
                yield
            finally:
                sys.stderr.flush()
                os.dup2(saved, 2)
    finally:
        os.close(saved)


def convert_function(fn, mode: str = "lowered", quantize: str = "none", verbose: bool = False) -> bytes:
    """A tf.function with an input signature (returning {name: tensor}) -> the
    TFLite flatbuffer; raises TFLiteExportError naming any op TFLite cannot take.
    `verbose` lets the converter's own diagnostics through to stderr."""
    mode, quantize = check_options(mode, quantize)
    return convert_frozen(frozen_function(fn, mode), mode, quantize, verbose)


def frozen_function(fn, mode: str = "lowered"):
    """The traced (`trace`) and frozen (`_frozen`) concrete function the converter
    reads: the costly half of a conversion (~10 s on YOLOv3-416), which the
    quantisation variants of one model can share (bridge parity does)."""
    return _frozen(trace(fn, mode))


def convert_frozen(cf, mode: str = "lowered", quantize: str = "none", verbose: bool = False) -> bytes:
    """`frozen_function`'s result -> the TFLite flatbuffer (see `convert_function`)."""
    import tensorflow as tf
    mode, quantize = check_options(mode, quantize)
    # A bare trackable: the converter then writes a serving signature (input and
    # output names) and finds no variables to keep.
    converter = tf.lite.TFLiteConverter.from_concrete_functions([cf], tf.Module())
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    converter.allow_custom_ops = mode != "lowered"
    if quantize != "none":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        if quantize == "float16":
            converter.target_spec.supported_types = [tf.float16]
    try:
        with _native_stderr_muted(not verbose):
            data = converter.convert()
    except Exception as e:
        if type(e).__name__ != "ConverterError":
            raise
        raise _explain(e, mode) from None
    _check_custom_ops(data, mode)
    return data


def convert(model, input_specs, output_names, mode: str = "lowered", quantize: str = "none",
            verbose: bool = False) -> bytes:
    """`convert_function` of `function(model, input_specs, output_names)`."""
    return convert_function(function(model, input_specs, output_names), mode, quantize, verbose)


def _frozen(cf):
    """`cf` with its variables as constants and its outputs still named. The
    converter would keep Keras 3 variables as VAR_HANDLE/READ_VARIABLE ops that
    nothing initialises; freezing alone drops the output names (a flat list in
    tf.nest order), so a wrapper packs them back. The frozen GraphDef is
    imported into the wrapper directly: TF's public freezing also rebuilds a
    ConcreteFunction from it first (pruning, lifting), 3-4 s and 1.5 GB more on
    YOLOv3-416."""
    import tensorflow as tf
    structure = cf.structured_outputs
    sig = [tf.TensorSpec(x.shape, x.dtype, name=x.name) for x in cf.structured_input_signature[0]]
    graph_def = _frozen_graph_def(cf)
    if graph_def is None:
        from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2
        frozen = convert_variables_to_constants_v2(cf)

        def named(*args):
            return tf.nest.pack_sequence_as(structure, frozen(*args))
    else:
        from .tf_graph import without_identity_n
        inputs = [t.name for t in cf.inputs if t.dtype != tf.resource]
        graph_def, outputs = without_identity_n(graph_def, [t.name for t in cf.outputs])

        def named(*args):
            outs = tf.graph_util.import_graph_def(graph_def, input_map=dict(zip(inputs, args)),
                                                  return_elements=outputs, name="frozen")
            return tf.nest.pack_sequence_as(structure, outs)

    return tf.function(named, input_signature=sig, autograph=False).get_concrete_function()


def _frozen_graph_def(cf):
    """The GraphDef of `cf` with its variables as constants (the first half of
    convert_variables_to_constants_v2, as tf2onnx's large-model path uses it);
    None where this TensorFlow lacks those internals."""
    try:
        from tensorflow.python.framework.convert_to_constants import (
            _FunctionConverterDataInEager, _replace_variables_by_constants)
    except ImportError:
        return None
    data = _FunctionConverterDataInEager(func=cf, lower_control_flow=False, aggressive_inlining=True)
    graph_def, _ = _replace_variables_by_constants(converter_data=data)
    return graph_def


def _check_custom_ops(data: bytes, mode: str) -> None:
    """With allow_custom_ops the converter keeps ANY TF op it cannot map as a custom
    op; only bridge's fused ops may stay so (a runtime can bring kernels for those)."""
    from bridge.tflite_inspect import inspect_tflite
    custom = inspect_tflite(data).custom_codes
    ours = {s.name for s in specs.all_specs()}
    foreign = sorted(set(custom) - ours) if mode != "lowered" else sorted(custom)
    if foreign:
        raise TFLiteExportError(
            f"TFLite cannot take op {', '.join(foreign)}: it has no TFLite builtin, and only bridge's fused ops "
            f"({', '.join(sorted(ours))}) may stay custom ops", foreign)


def _explain(error, mode: str) -> TFLiteExportError:
    """The converter's reason, by op, without its MLIR dump."""
    ops: List[str] = []
    reasons: List[str] = []
    for err in getattr(error, "errors", None) or []:
        name = err.operator.name.split(".", 1)[-1] if err.operator.name else ""
        if not name or name in ops:
            continue
        code = _error_code_name(err)
        reason = err.error_message.splitlines()[0] if err.error_message else code
        ops.append(name)
        reasons.append(reason + (f" ({code})" if code and code not in reason else ""))
    if not ops:  # no structured errors: the ops and the first "error:" line of the text
        text = str(error)
        ops = list(dict.fromkeys(re.findall(r"'tf\.(\w+)' op", text)))
        found = re.findall(r"error: (.*)", text)
        reasons = [found[0] if found else (text.strip().splitlines() or [type(error).__name__])[0]]
    hint = ""
    ours = [o for o in ops if o in specs.SPECS]
    if ours and mode == "lowered":
        hint = (f". {', '.join(ours)} stayed a fused op: lowering needs the model traced through bridge.tf_ops' "
                f"wrappers or a graph lowered by lowered_graph; --mode custom keeps it as a TFLite custom op")
    what = f"op {', '.join(ops)}" if ops else "the model"
    return TFLiteExportError(f"TFLite cannot take {what}: {'; '.join(reasons)}{hint}", ops)


def _error_code_name(err) -> str:
    try:
        return type(err).ErrorCode.Name(err.error_code)
    except Exception:  # an older converter_error_data without the enum
        return ""


def _kernels_serve(codes) -> bool:
    """Whether bridge's LiteRT kernels build here and serve every custom op in
    `codes` (else the file is not run: the report says so)."""
    try:
        from bridge.litert import runtime
        served = {op for op, why in runtime.served_ops().items() if why is None}
    except Exception:  # no LiteRT kernels here: the report says the file was not run
        return False
    return set(codes) <= served


# -- the pipeline ----------------------------------------------------------------
def export(source, output: str, *, mode: Optional[str] = None, quantize: Optional[str] = "none", fuse: bool = True,
           seed: int = 0, progress: Optional[Progress] = None, atol: Optional[float] = None, verify=None,
           opset: Optional[int] = None, verbose: bool = False, **_) -> ExportResult:
    """The `--to tflite` exporter. `source`: a bridge.modelsource.ResolvedModel.
    `verify`: a bridge.parity.verify.Verifier, run on the file before it is
    written (None: not verified)."""
    progress = progress or quiet()
    mode, quantize = check_options(mode, quantize)
    if opset is not None:
        raise OptionError("--opset applies to ONNX exports, not to --to tflite")
    if source.kind == "onnx":
        raise OptionError(f"{source.arg} is an ONNX model; --to tflite exports TensorFlow models")
    summary: List[str] = []
    details: dict = {"mode": mode, "quantize": quantize}
    model = model_to_export(source, fuse, progress, summary, details)
    if mode != "custom" and getattr(source, "is_graph", False):
        model = lowered_graph(model, where=_lowering_rule(mode))
    if source.is_keras:
        try:
            model, note = road_limits.float32_model(model)
        except ValueError as e:
            raise TFLiteExportError(str(e)) from None
        if note:
            summary.append(note)
    with progress.stage("converting"):
        try:
            data = _converted(source, model, mode, quantize, fuse, verbose, summary)
        except TFLiteExportError as e:
            if not road_limits.static_may_help(e) or not any(
                    d is None for i in source.inputs for d in i.shape):
                raise
            source = _at_sample(source)  # verified at these shapes too
            try:
                data = _converted(source, model, mode, quantize, fuse, verbose, summary)
            except TFLiteExportError:
                raise e from None  # static shapes did not help: the failure at the model's own dims
            summary.append(road_limits.static_note({i.name: i.shape for i in source.inputs}, e))
    from bridge.tflite_inspect import inspect_tflite
    info = inspect_tflite(data)
    custom: Dict[str, List[dict]] = {}
    versions: Dict[str, int] = {}
    for c in info.custom:
        custom.setdefault(c.code, []).append(c.attrs or {})
        versions[c.code] = c.version
    details.update(size=len(data), ops=dict(info.ops), custom_ops=custom, weights=info.weights)
    what = f"({mode}, quantize {quantize}, {len(data)} bytes, {sum(info.ops.values())} ops)"
    lines = []
    if custom:
        lines.append("custom ops the runtime must provide: "
                     + ", ".join(f"{k} x{len(v)}" for k, v in sorted(custom.items())))
        for code, nodes in sorted(custom.items()):
            keys = sorted({k for attrs in nodes for k in attrs})
            lines.append(f"  custom_code {code!r} version {versions[code]}: FlexBuffer keys {', '.join(keys) or '(none)'}")
    else:
        lines.append("builtin ops only: runs on any TFLite runtime")
    checks: List[Check] = []
    not_verified = ""
    runs = not custom or _kernels_serve(set(custom))
    if verify and runs:
        with progress.stage("verifying"):
            checked = data
            if custom and _open_dims(source):
                # bridge's LiteRT harness cannot resize a file's open dims through shape-computing ops
                # (bridge/parity/runtimes/tflite_custom.py): its kernels are checked on a twin at the sample shape
                checked = _converted(_at_sample(source), model, mode, quantize, fuse, verbose, [])
                lines.append("verified on LiteRT with bridge's kernels: a twin converted at the sample shape "
                             "(the harness cannot resize the file's open dims)")
            # against the model as given (unfused): the fusion is part of what is checked
            checks = verify.tflite(checked, custom=bool(custom), bound=QUANTIZE_BOUND[quantize])
    elif verify:
        not_verified = NO_CUSTOM_KERNELS
    if not all(c.passed for c in checks):  # a file that fails its check is not written
        return ExportResult(output=os.path.abspath(output), format="tflite", summary=summary + [f"converted {what}"]
                            + lines, checks=checks, seconds=dict(progress.seconds), details=details,
                            not_written=NOT_WRITTEN)
    path = atomic.write_bytes(output, data)
    summary += [f"wrote {path} {what}"] + lines
    return ExportResult(output=path, format="tflite", files=[path], summary=summary, checks=checks,
                        seconds=dict(progress.seconds), details=details, not_verified=not_verified)


def _converted(source, model, mode: str, quantize: str, fuse: bool, verbose: bool, summary: List[str]) -> bytes:
    """convert_function of `model` at `source`'s inputs, looked up in (and else
    written to) bridge's TFLite cache (tflite_cache: bridge parity's TFLite rows
    share it); `summary` says when the file came from the cache."""
    from . import tflite_cache
    key = tflite_cache.key(source, mode=mode, quantize=quantize, fuse=fuse)
    data, hit = tflite_cache.converted(key, lambda: convert_function(source.function(model), mode, quantize, verbose))
    if hit:
        summary.append(f"converted earlier: read from bridge's TFLite cache ({tflite_cache.path_of(key)})")
    return data


def _open_dims(source) -> bool:
    """Whether an input leaves a dim other than the batch open."""
    return any(d is None for i in source.inputs for d in i.shape[1:])


def _at_sample(source):
    """`source` with its inputs fixed at the sample shape (a static twin's signature)."""
    import dataclasses
    shapes = source.concrete_shapes(1)
    return dataclasses.replace(source, inputs=[dataclasses.replace(i, shape=shapes[i.name]) for i in source.inputs])

