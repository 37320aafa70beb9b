"""`bridge export MODEL --to onnx`: a TensorFlow model with the fused ops to ONNX.

Two modes:
- custom: every fused op is one `com.bridge` node with the spec's ONNX attributes,
  plus a model-local function per op type (any runtime can run it; onnxruntime
  with bridge's kernel library runs the native kernels instead) and the
  com.bridge opset_import.
- lowered: the same export with every com.bridge node inlined into its function
  body: standard ONNX only, the same graph by construction.

The pipeline (`export`): fuse the Keras model (bridge.converters.fuse) -> trace a
tf.function with a static input signature -> tf2onnx with the com.bridge
handlers -> refuse unsupported ops -> add functions (or inline) -> the full
checker -> write atomically (external data above ~2 GB) -> run TensorFlow and
onnxruntime on the same random inputs and report the max error per output.

For onnxruntime (custom mode; `--ort-contrib` also in lowered mode) the transformer
blocks bridge knows (Keras MultiHeadAttention, Dense + exact GELU) become
onnxruntime's contrib operators (converters/ort_transformer.py: com.microsoft
Attention, BiasGelu), which measure faster there (benchmarks/onnx_models.py);
`--no-ort-contrib` keeps bridge's own graph, which any ONNX runtime runs.

`--quantize dynamic|static` makes it int8 for onnxruntime (converters/quantize_onnx.py):
judged by the answers (`--task classify|detect|embed`, bridge.parity.task), since
no elementwise bound of a float32 export holds; static is calibrated on
`--calibration DIR|FILE.npz` and verified on those inputs.

Importing this module is cheap (no TensorFlow): the CLI imports every exporter
to build its --help.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import re
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple, TypeVar

import numpy as np

from bridge import atomic
from bridge.exporting import NOT_WRITTEN, Check, ExportError, ExportResult, OptionError, Progress, quiet

from .shared_steps import model_to_export

DESCRIPTION = "ONNX: fused ops as com.bridge nodes with function bodies (custom) or standard ops only (lowered)"
MODES = ("custom", "lowered")     # the first is the default
SUFFIX = ".onnx"
USES_OPSET = True
# tf2onnx 1.17 knows opsets up to 18 (tf2onnx.constants.OPSET_TO_IR_VERSION), as
# the com.bridge function bodies do (onnx_plugins.MAX_OPSET); they start at
# onnx_plugins.MIN_FUNCTION_OPSET (13).
DEFAULT_OPSET = 18
# Protobuf cannot serialise a message over 2 GiB; stay clear of it with the graph around the weights.
EXTERNAL_DATA_BYTES = 1_800_000_000
TF2ONNX_LOGGERS = ("tf2onnx",)
T = TypeVar("T")
TASKS = ("classify", "detect", "embed")   # bridge.parity.task.TASKS (this module imports no parity)
# built-in models whose answers are embeddings (a task needs no --task for them)
EMBEDDING_BUILTINS = ("bert", "minilm")


def add_arguments(group):
    group.add_argument("--quantize", choices=("none", "dynamic", "static"), default="none",
                       help="int8 for onnxruntime: dynamic (MatMul/Gemm weights, activations at run time) or "
                            "static (QDQ, per-channel conv weights, calibrated on --calibration); judged by --task")
    group.add_argument("--calibration", metavar="DIR|FILE", help="inputs (an .npz, .npy or a folder, as bridge "
                       "parity --inputs): static measures its activation ranges on them; dynamic judges int8 against "
                       "float32 on them (its agreement pass; default: inputs made from the graph); the export is "
                       "verified on them")
    group.add_argument("--ort-contrib", action=argparse.BooleanOptionalAction, default=None,
                       help="onnxruntime's transformer ops (com.microsoft Attention for Keras MultiHeadAttention, "
                            "BiasGelu for Dense + exact GELU) where they match; the file then runs on onnxruntime only "
                            "(default: on in custom mode, off in lowered mode and with --quantize)")
    group.add_argument("--task", choices=TASKS, help="how a quantized export is judged: top-1 agreement, matched "
                       "boxes or embedding cosine (bridge.parity.task); built-in bert/minilm: embed")


def check_quantize(source, quantize: Optional[str], calibration, task: Optional[str], mode: Optional[str]):
    """(quantize, task, mode) checked: static takes --calibration and the lowered
    export; a quantized export takes a task to be judged by."""
    from .quantize_onnx import MODES as QUANTIZE
    quantize = quantize or "none"
    if quantize not in QUANTIZE:
        raise OptionError(f"--quantize {quantize}: the ONNX export quantizes {', '.join(QUANTIZE[1:])}")
    if quantize == "none":
        if calibration or task:
            raise OptionError(f"{'--calibration' if calibration else '--task'} applies to --quantize dynamic|static")
        return quantize, None, mode
    if quantize == "static" and not calibration:
        raise OptionError("--quantize static needs --calibration DIR|FILE.npz: the inputs its activation ranges "
                          "are measured on")
    if task is None and getattr(source, "kind", "") == "builtin" and getattr(source, "name", "") in EMBEDDING_BUILTINS:
        task = "embed"
    if task is None:
        raise OptionError(f"--quantize {quantize} needs --task {'|'.join(TASKS)}: an int8 export keeps no "
                          f"elementwise bound, so it is judged by its answers")
    if task not in TASKS:
        raise OptionError(f"--task {task}: expected one of {', '.join(TASKS)}")
    return quantize, task, ("lowered" if quantize == "static" else mode)


def check_ort_contrib(ort_contrib: Optional[bool], mode: str, quantize: str) -> bool:
    """Whether the export gets onnxruntime's contrib ops (None: the default for `mode`)."""
    if ort_contrib is None:
        return mode == "custom" and quantize == "none"
    if ort_contrib and quantize != "none":
        raise OptionError(f"--ort-contrib with --quantize {quantize}: the int8 export quantizes bridge's own graph "
                          f"(give --no-ort-contrib or leave it out)")
    return bool(ort_contrib)


def opset_range() -> range:
    """Opsets both tf2onnx and the com.bridge function bodies support."""
    from tf2onnx import constants
    import onnx
    from bridge import onnx_plugins
    top = min(max(constants.OPSET_TO_IR_VERSION), onnx.defs.onnx_opset_version(), onnx_plugins.MAX_OPSET)
    return range(onnx_plugins.MIN_FUNCTION_OPSET, top + 1)


def check_opset(opset: Optional[int]) -> int:
    if opset is None:
        return DEFAULT_OPSET
    ok = opset_range()
    if int(opset) not in ok:
        raise OptionError(f"--opset {opset}: supported opsets are {ok.start}..{ok.stop - 1} "
                          f"(the newest tf2onnx and the com.bridge function bodies both support)")
    return int(opset)


def check_mode(mode: Optional[str]) -> str:
    mode = mode or MODES[0]
    if mode not in MODES:
        raise OptionError(f"--mode {mode}: the ONNX export has modes {', '.join(MODES)}")
    return mode


# -- tf2onnx -------------------------------------------------------------------
class _Capture(logging.Handler):
    """Keeps what tf2onnx logs as errors: with continue_on_error (always on in
    from_function) a failed handler or an unsupported op is only a log line."""

    def __init__(self):
        super().__init__(level=logging.ERROR)
        self.records: List[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)

    def exceptions(self) -> List[BaseException]:
        return [r.exc_info[1] for r in self.records if r.exc_info and r.exc_info[1] is not None]


@contextlib.contextmanager
def _tf2onnx_logging(verbose: bool):
    """tf2onnx is chatty (and prints "Cannot infer shape" for custom ops): quiet
    unless verbose, while its errors are always captured."""
    capture = _Capture()
    saved = []
    for name in TF2ONNX_LOGGERS:
        lg = logging.getLogger(name)
        saved.append((lg, lg.level, lg.propagate))
        lg.addHandler(capture)
        lg.setLevel(logging.INFO if verbose else logging.ERROR)
        lg.propagate = verbose
    try:
        yield capture
    finally:
        for lg, level, propagate in saved:
            lg.removeHandler(capture)
            lg.setLevel(level)
            lg.propagate = propagate


@contextlib.contextmanager
def _optimizer_errors(catch: bool):
    """tf2onnx deep-copies the whole graph, weights included, before each of its
    ~24 optimizer passes so that it can roll a failed pass back
    (TF2ONNX_CATCH_ERRORS). On YOLOv3 that is most of the conversion time and
    ~15 GB of memory; bridge converts without the copies and retries with them
    only if a pass fails (e.g. the einsum pass below opset 13).
    tf2onnx 1.17 tests the variable's name, not its value, so any value means
    "do not catch"; unset, it catches unless large_model (then the retry cannot)."""
    from tf2onnx import constants
    key = constants.ENV_TF2ONNX_CATCH_ERRORS
    previous = os.environ.pop(key, None)
    if not catch:
        os.environ[key] = "FALSE"
    try:
        yield
    finally:
        os.environ.pop(key, None)
        if previous is not None:
            os.environ[key] = previous


@contextlib.contextmanager
def _numpy2_compat(needed: bool):
    """tf2onnx 1.17's large-model path calls np.product, which numpy 2 removed."""
    added = needed and not hasattr(np, "product")
    if added:
        np.product = np.prod
    try:
        yield
    finally:
        if added:
            del np.product


def unsupported_nodes(model, opset: int) -> Dict[str, List[str]]:
    """{op type: [node names]} of nodes that are neither standard ONNX at `opset`
    nor a com.bridge op: what tf2onnx leaves behind for an op it cannot convert."""
    import onnx
    from bridge import ops as specs
    from bridge.onnx_plugins.functions import all_nodes
    local = {(f.domain, f.name) for f in model.functions}
    versions = {o.domain: o.version for o in model.opset_import}
    bad: Dict[str, List[str]] = {}
    for node in all_nodes(model.graph):
        domain = node.domain or ""
        ok = False
        if domain in specs.domains():
            ok = specs.for_node(domain, node.op_type) is not None
        elif (domain, node.op_type) in local:
            ok = True
        elif domain in ("", "ai.onnx", "ai.onnx.ml"):
            try:
                onnx.defs.get_schema(node.op_type, versions.get(domain, opset), domain)
                ok = True
            except onnx.defs.SchemaError:
                ok = False
        if not ok:
            label = node.op_type if domain in ("", "ai.onnx") else f"{domain}::{node.op_type}"
            bad.setdefault(label, []).append(node.name)
    return bad


def _first_opset(op_type: str, above: int) -> Optional[int]:
    """The first opset above `above` that has the standard ONNX op `op_type`, or None."""
    import onnx
    for v in range(above + 1, onnx.defs.onnx_opset_version() + 1):
        try:
            onnx.defs.get_schema(op_type, v, "")
            return v
        except onnx.defs.SchemaError:
            continue
    return None


class OpsetTooLow(ExportError):
    """The model converts only at a higher opset: `opset` is the first that has
    what it needs, `reason` says what in a few words (for a note)."""

    def __init__(self, message: str, opset: int, reason: str):
        super().__init__(message)
        self.opset = opset
        self.reason = reason


def at_lowest_opset(convert: Callable[[int], T], opsets: Sequence[int]) -> Tuple[T, int, str]:
    """(convert(opset), opset, note) at the first of `opsets` (ascending) the
    model converts at: a conversion refused as OpsetTooLow moves on to the opset
    it names. `note` says why the opset is above opsets[0] ('' when it is not);
    when no opset of `opsets` will do, the last refusal is raised."""
    opsets = sorted(opsets)
    refused: Optional[OpsetTooLow] = None
    for opset in opsets:
        if refused is not None and opset < refused.opset:
            continue
        try:
            value = convert(opset)
        except OpsetTooLow as e:
            refused = e
            continue
        note = "" if refused is None else f"opset {opset}: at opset {opsets[0]} {refused.reason}"
        return value, opset, note
    if refused is None:
        raise ExportError("no opset to convert at")
    raise refused


# tf2onnx handlers refuse an attribute the opset lacks with messages such as
# "Opset 12 required for batch_dims attribute of GatherV2" or "... requires opset >= 11"
_NEEDS_OPSET = re.compile(r"\bopset (?:>= ?)?(\d+)(?: is)? required\b|\brequires opset (?:>= ?)?(\d+)", re.I)


def needed_opset(message: str) -> Optional[int]:
    """The opset a tf2onnx handler's refusal says it needs, or None."""
    m = _NEEDS_OPSET.search(message)
    return int(m.group(1) or m.group(2)) if m else None


def _unsupported_error(bad: Dict[str, List[str]], opset: Optional[int] = None) -> ExportError:
    lines = ["tf2onnx cannot convert these ops (the model would be invalid):"]
    later = {}
    for op, nodes in sorted(bad.items()):
        shown = ", ".join(nodes[:3]) + (f", ... ({len(nodes)} nodes)" if len(nodes) > 3 else "")
        lines.append(f"  {op}: {shown}")
        first = _first_opset(op, opset) if opset is not None and "::" not in op else None
        if first is not None:
            later[op] = first
    if later and len(later) == len(bad):
        need = max(later.values())
        ops_named = ", ".join(sorted(later))
        return OpsetTooLow("\n".join(lines + [f"Fix: {ops_named} is standard ONNX from opset {need} on; this "
                                               f"export is at opset {opset}: export with --opset {need} or higher"]),
                           need, f"{ops_named} is not an ONNX op")
    lines.append("Fix: rewrite the model without them, or add a tf2onnx handler: a module with "
                 "`@tf2onnx.handler.tf_op(\"OpName\")` and a `version_N(cls, ctx, node, **kw)` classmethod, "
                 "imported before the export (bridge's own handlers are converters/<op>.py; a fused op of "
                 "bridge also needs its spec in bridge/ops).")
    return ExportError("\n".join(lines))


def _handler_failures(capture: _Capture, opset: int) -> Optional[Exception]:
    from bridge.ops import OpError
    excs = capture.exceptions()
    for e in excs:
        if isinstance(e, OpError):  # names op, argument and shapes: the best message there is
            return ExportError(f"converting failed: {e}")
    if excs:
        first = [r for r in capture.records if r.exc_info][0]
        message = (f"tf2onnx failed to convert a node: {first.getMessage().splitlines()[0]}: "
                   f"{type(excs[0]).__name__}: {excs[0]}")
        need = needed_opset(str(excs[0]))
        if need is not None and need > opset:
            said = str(excs[0]).replace("make_sure failure: ", "")
            return OpsetTooLow(f"{message}\nFix: this export is at opset {opset}: export with --opset {need} "
                               f"or higher", need, f"tf2onnx refuses it ({said})")
        return ExportError(message)
    return None


def convert_raw(fn, input_signature, *, opset: int, output_names: Optional[Sequence[str]] = None,
                verbose: bool = False, large: bool = False):
    """tf2onnx with the com.bridge handlers, nothing added: (model with bare
    com.bridge nodes, external tensor data). Refuses unsupported ops and failed
    handlers (ExportError). Any opset tf2onnx supports: for exporters that post-
    process the nodes themselves (--to ge at opset 11)."""
    import tf2onnx
    from bridge import onnx_plugins  # noqa: F401  registers the com.bridge schemas (output shapes)
    from .tf2onnx_common import custom_opset, fresh_node_protos, register_all
    from .tf2onnx_repairs import scalar_one_hot_depth, split_extra_conv_bias
    from .tf_graph import captured_constants, constants_to_initializers, xla_calls_inlined
    register_all()
    renames = output_renames(list(output_names or _output_keys(fn, input_signature)),
                             [spec.name for spec in input_signature])
    if renames:  # tf2onnx names an output like the input it shadows and then loses the input
        fn = _outputs_renamed(fn, renames, input_signature)
        output_names = [renames.get(n, n) for n in output_names] if output_names else None
    concrete = fn.get_concrete_function(*input_signature)
    constants = captured_constants(concrete)
    for catch in (False, True):
        # tf2onnx rolls a failed pass back only off its large-model path (it then catches whatever
        # TF2ONNX_CATCH_ERRORS says): the retry takes the tensors inside the proto
        use_large = large and not catch
        with _tf2onnx_logging(verbose) as capture, _numpy2_compat(use_large), _optimizer_errors(catch), \
                fresh_node_protos(), xla_calls_inlined(concrete):
            try:
                model, storage = tf2onnx.convert.from_function(
                    fn, input_signature=list(input_signature), opset=opset, extra_opset=custom_opset(),
                    large_model=use_large)
                break
            except Exception as e:
                failure = _handler_failures(capture, opset)
                if failure is not None:
                    raise failure from e
                if not catch:
                    continue  # an optimizer pass failed: again, with tf2onnx skipping failed passes
                raise ExportError(f"tf2onnx failed: {type(e).__name__}: {e}") from e
    failure = _handler_failures(capture, opset)
    if failure is not None:
        raise failure
    constants_to_initializers(model, constants, [s.name for s in input_signature])
    split_extra_conv_bias(model)
    scalar_one_hot_depth(model)
    bad = unsupported_nodes(model, opset)
    if bad:
        raise _unsupported_error(bad, opset)
    if output_names:
        _order_outputs(model, output_names)
    _fill_output_types(model)
    if renames:
        entry = model.metadata_props.add()
        entry.key, entry.value = RENAMED_OUTPUTS, json.dumps({new: old for old, new in renames.items()})
    external = dict(storage.name_to_tensor_data) if use_large and storage is not None else {}
    return model, external


# An output named like an input (a serving dict {"seq": f(seq), ...}) cannot keep its name in ONNX, where
# one name is one value: it becomes NAME_output (NAME_output_1, ... if taken), and the file's metadata
# (metadata_props[RENAMED_OUTPUTS], JSON {name in the file: the model's name}) maps it back.
RENAMED_OUTPUTS = "bridge.renamed_outputs"


def output_renames(output_names: Sequence[str], input_names: Sequence[str]) -> Dict[str, str]:
    """{model output name: its name in the ONNX file} for each output named like an input."""
    taken = set(input_names) | set(output_names)
    out: Dict[str, str] = {}
    for name in output_names:
        if name in input_names:
            new, i = f"{name}_output", 0
            while new in taken:
                i += 1
                new = f"{name}_output_{i}"
            taken.add(new)
            out[name] = new
    return out


def model_output_names(model) -> Dict[str, str]:
    """{output name in the ONNX file: the model's name} for the outputs the export renamed ({} if none)."""
    entry = next((p.value for p in model.metadata_props if p.key == RENAMED_OUTPUTS), None)
    try:
        names = json.loads(entry) if entry else {}
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in names.items()} if isinstance(names, dict) else {}


def as_model_outputs(outputs: Mapping[str, np.ndarray], model) -> Dict[str, np.ndarray]:
    """Outputs keyed by the ONNX file's names, keyed by the model's instead."""
    names = model_output_names(model)
    return {names.get(k, k): v for k, v in outputs.items()}


def _output_keys(fn, input_signature) -> List[str]:
    out = fn.get_concrete_function(*input_signature).structured_outputs
    return sorted(out) if isinstance(out, Mapping) else []


def _outputs_renamed(fn, renames: Mapping[str, str], input_signature):
    """`fn` (returning a dict) with the keys in `renames` renamed, traced from the same Python code."""
    import tensorflow as tf
    inner = getattr(fn, "python_function", fn)

    def call(*args):
        return {renames.get(k, k): v for k, v in inner(*args).items()}
    return tf.function(call, input_signature=list(input_signature), autograph=False)


def embed_external(model, external: Mapping[str, bytes]):
    """`model` with tf2onnx's external tensors (`external`: {location: bytes})
    back inside it, in place: one self-contained ModelProto."""
    if not external:
        return model
    import onnx
    from onnx.external_data_helper import _get_all_tensors
    for t in _get_all_tensors(model):
        if t.data_location != onnx.TensorProto.EXTERNAL:
            continue
        location = next((e.value for e in t.external_data if e.key == "location"), None)
        if location not in external:
            raise ExportError(f"tensor {t.name!r}: tf2onnx kept its data at {location!r}, which it did not return")
        t.raw_data = external[location]
        del t.external_data[:]
        t.data_location = onnx.TensorProto.DEFAULT
    return model


def convert(fn, input_signature, *, opset: int = DEFAULT_OPSET, mode: str = "custom",
            output_names: Optional[Sequence[str]] = None, verbose: bool = False, large: bool = False):
    """A tf.function -> (onnx.ModelProto in `mode`, external tensor data). With
    `large`, tf2onnx keeps big tensors out of the proto (protobuf's 2 GiB limit):
    they come back as {location: bytes}, which `save` writes out; else {}."""
    from bridge import onnx_plugins
    opset = check_opset(opset)
    mode = check_mode(mode)
    model, external = convert_raw(fn, input_signature, opset=opset, output_names=output_names, verbose=verbose,
                                  large=large)
    model = onnx_plugins.add_functions(model, opset)
    if mode == "lowered":
        model = onnx_plugins.inline_custom_ops(model)
    _fill_output_types(model)
    return model, external


def _fill_output_types(model) -> None:
    """Outputs TensorFlow could not shape (tf2onnx leaves them without a shape,
    which the full checker rejects) get ONNX's inferred type: the com.bridge
    schemas (registered by bridge.onnx_plugins) know the ops' shapes."""
    import onnx
    missing = [o for o in model.graph.output if not o.type.tensor_type.HasField("shape")]
    if not missing:
        return
    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception:  # the checker will then say what is wrong
        return
    known = {v.name: v for v in list(inferred.graph.value_info) + list(inferred.graph.output)}
    for o in missing:
        v = known.get(o.name)
        if v is not None and v.type.tensor_type.HasField("shape"):
            o.type.CopyFrom(v.type)


def _order_outputs(model, names: Sequence[str]) -> None:
    """TensorFlow sorts a returned dict by key; put the outputs back in the model's order."""
    by_name = {o.name: o for o in model.graph.output}
    if set(names) != set(by_name):
        return
    ordered = [type(by_name[n])() for n in names]
    for o, n in zip(ordered, names):
        o.CopyFrom(by_name[n])
    del model.graph.output[:]
    model.graph.output.extend(ordered)


# -- writing -------------------------------------------------------------------
def save(model, path: str, external: bool = False, storage: Optional[Mapping[str, bytes]] = None,
         check: bool = True, verify: Optional[Callable[[str], bool]] = None,
         progress: Optional[Progress] = None) -> List[str]:
    """Writes `model` to `path` atomically (a temp folder next to it, checked with
    the full checker there, then renamed into place). `external`: tensors of
    EXTERNAL_TENSOR_MIN_BYTES or more go to `<path>.data` (ONNX external data), with
    `storage` holding the bytes tf2onnx already kept out of the proto. `verify`:
    called with the staged model's path once it is checked; when it returns
    False nothing is moved into place (a file that fails its verification is
    not written, and one already at `path` stays). Returns the files written
    ([] when `verify` refused)."""
    import onnx
    progress = progress or quiet()
    path = os.path.abspath(path)
    folder = os.path.dirname(path)
    with atomic.staging_folder(folder, os.path.basename(path)) as tmp:
        files = [path]
        tmp_model = os.path.join(tmp, os.path.basename(path))
        if external:
            data_name = os.path.basename(path) + ".data"
            _write_external(model, storage or {}, os.path.join(tmp, data_name), data_name)
            files.append(os.path.join(folder, data_name))
        with open(tmp_model, "wb") as f:
            f.write(model.SerializeToString())
        if check:
            with progress.stage("checking"):
                try:
                    onnx.checker.check_model(tmp_model, full_check=True)
                except Exception as e:
                    raise ExportError(f"the exported model fails onnx.checker (full check): {e}") from e
        if verify is not None and not verify(tmp_model):
            return []
        for name in sorted(os.listdir(tmp), key=lambda n: n == os.path.basename(path)):  # data first, model last
            os.replace(os.path.join(tmp, name), os.path.join(folder, name))
        return files


EXTERNAL_TENSOR_MIN_BYTES = 1024


def _write_external(model, storage: Mapping[str, bytes], data_path: str, data_name: str) -> None:
    """Moves every large tensor into one data file (offsets 4 KiB-aligned, as onnx
    does), whether tf2onnx kept it out already (`storage`) or it is inline."""
    from onnx.external_data_helper import _get_all_tensors
    import onnx
    with open(data_path, "wb") as f:
        for t in _get_all_tensors(model):
            if t.data_location == onnx.TensorProto.EXTERNAL:
                info = {e.key: e.value for e in t.external_data}
                data = storage.get(info.get("location"))
                if data is None:
                    raise ExportError(f"tensor {t.name!r}: its external data {info.get('location')!r} is missing")
            elif t.HasField("raw_data") and len(t.raw_data) >= EXTERNAL_TENSOR_MIN_BYTES:
                data = t.raw_data
            else:
                continue
            f.write(b"\0" * ((-f.tell()) % 4096))
            offset = f.tell()
            f.write(data)
            t.ClearField("raw_data")
            t.data_location = onnx.TensorProto.EXTERNAL
            del t.external_data[:]
            for k, v in (("location", data_name), ("offset", str(offset)), ("length", str(len(data)))):
                e = t.external_data.add()
                e.key, e.value = k, v


# -- the pipeline ----------------------------------------------------------------
def _variable_bytes(concrete) -> int:
    return sum(int(v.shape.num_elements() or 0) * v.dtype.size for v in concrete.variables)


def export(source, output: str, *, mode: Optional[str] = None, opset: Optional[int] = None, fuse: bool = True,
           seed: int = 0, verbose: bool = False, progress: Optional[Progress] = None, atol: Optional[float] = None,
           verify=None, external_data: Optional[bool] = None, quantize: Optional[str] = "none",
           calibration=None, task: Optional[str] = None, ort_contrib: Optional[bool] = None,
           **_) -> ExportResult:
    """The `--to onnx` exporter (interface: bridge/commands/export.py). `verify`:
    a bridge.parity.verify.Verifier, run on the staged file (None: not verified)."""
    progress = progress or quiet()
    quantize, task, mode = check_quantize(source, quantize, calibration, task, mode)
    mode = check_mode(mode)
    opset = check_opset(opset)
    contrib = check_ort_contrib(ort_contrib, mode, quantize)
    if source.kind == "onnx":
        raise OptionError(f"{source.arg} is already an ONNX model")
    calibrated = _calibration_inputs(source, calibration) if calibration else None
    summary: List[str] = []
    details: dict = {"mode": mode, "opset": opset}
    model = model_to_export(source, fuse, progress, summary, details)
    with progress.stage("tracing"):
        fn = source.function(model)
        concrete = fn.get_concrete_function()
        large = _variable_bytes(concrete) > EXTERNAL_DATA_BYTES if external_data is None else bool(external_data)
    with progress.stage("converting"):
        # always tf2onnx's large-model path: constants kept out of the graphs it copies cut the peak
        # memory of large models to under half (RESULTS.md); small models get their tensors back inline
        onnx_model, external = convert(fn, source.signature(), opset=opset, mode=mode,
                                       output_names=source.output_names, verbose=verbose, large=True)
        if not large or quantize != "none":
            onnx_model, external = embed_external(onnx_model, external), {}
    if contrib:
        onnx_model = _with_contrib(onnx_model, external, progress, summary, details)
    if quantize != "none":
        onnx_model, large = _quantized(onnx_model, quantize, calibrated, progress, summary, details)
    checks: List[Check] = []

    def verified(staged: str) -> bool:  # the staged file, before it is moved into place
        with progress.stage("verifying"):
            if quantize == "none":
                checks.extend(verify.onnx(staged, mode))
            else:
                checks.extend(verify.onnx(staged, mode, quantize=quantize, task=task, inputs=calibrated))
        return all(c.passed for c in checks)

    files = save(onnx_model, output, external=large, storage=external, verify=verified if verify else None,
                 progress=progress)
    counts = _op_counts(onnx_model)
    details.update(nodes=sum(counts.values()), custom_nodes={k: v for k, v in counts.items() if "::" in k},
                   external_data=large)
    # "domain: n Op" per custom domain (a team op lives in its own domain)
    custom = "; ".join(f"{domain}: " + ", ".join(f"{v} {k.split('::')[1]}" for k, v in sorted(counts.items())
                                                 if k.split("::")[0] == domain)
                       for domain in sorted({k.split("::")[0] for k in counts if "::" in k}))
    what = (f"({mode}, opset {opset}, {sum(counts.values())} nodes" + (f"; {custom}" if custom else "")
            + (", external data" if large else "") + ")")
    if not files:
        return ExportResult(output=os.path.abspath(output), format="onnx", summary=summary + [f"converted {what}"],
                            checks=checks, seconds=dict(progress.seconds), details=details,
                            not_written=NOT_WRITTEN)
    summary.append(f"wrote {files[0]} {what}")
    summary += renamed_lines(onnx_model)
    return ExportResult(output=files[0], format="onnx", files=files, summary=summary, checks=checks,
                        seconds=dict(progress.seconds), details=details)


def _with_contrib(model, external, progress: Progress, summary: List[str], details: dict):
    """The model with onnxruntime's transformer ops where they match (ort_transformer.rewrite)."""
    from . import ort_transformer
    if external:   # past protobuf's 2 GiB the weights stay outside: the matcher needs them in the proto
        summary.append("onnxruntime contrib ops: not applied (the weights are external data)")
        details["ort_contrib"] = {"applied": False}
        return model
    with progress.stage("onnxruntime contrib ops"):
        model, report = ort_transformer.rewrite(model)
    summary.append(report.line() + ("; the file runs on onnxruntime only" if report.total else ""))
    summary += [f"  left as bridge's graph: {why}" for why in report.skipped[:3]]
    details["ort_contrib"] = {"applied": bool(report.total), "counts": dict(report.counts),
                              "skipped": list(report.skipped)}
    return model


def _calibration_inputs(source, calibration) -> Dict[str, np.ndarray]:
    """--calibration as {input: array}: read by the caller (bridge.parity.verify.export
    reads a DIR|FILE with parity's --inputs reader); every model input present."""
    if not isinstance(calibration, Mapping):
        raise OptionError(f"--calibration {calibration}: give the inputs read ({{input name: array}}); "
                          f"bridge export and bridge.export read a DIR|FILE")
    missing = [i.name for i in source.inputs if i.name not in calibration]
    if missing:
        raise OptionError(f"--calibration: no array for input {missing[0]!r}")
    return {k: np.asarray(v) for k, v in calibration.items()}


def _quantized(model, quantize: str, calibrated, progress: Progress, summary: List[str], details: dict):
    """(the int8 model, whether its weights go to external data)."""
    from . import quantize_onnx
    with progress.stage(f"quantizing ({quantize})"):
        if quantize == "dynamic":
            weights = quantize_onnx.weight_type()
            # the agreement pass judges int8 on the user's inputs where given: inputs made from the
            # graph miss what real ones do (MiniLM on AMD Zen 3: held sentences 0.981 vs 0.998 given)
            feeds = quantize_onnx.batches(calibrated) if calibrated else None
            info: dict = {}
            model = quantize_onnx.dynamic(model, weights, feeds=feeds, report=info)
            judged = f"{len(feeds)} sample(s) of --calibration" if feeds else "inputs made from the graph"
            how = (f"dynamic int8: MatMul/Gemm weights {weights} (this CPU "
                   f"{'has' if quantize_onnx.cpu_has_vnni() else 'lacks'} VNNI), activations at run time; "
                   f"judged against float32 on {judged}" + ("" if feeds else " (--calibration gives yours)")
                   + (f", {len(info['kept_float'])} MatMul/Gemm kept float32" if info.get("kept_float") else ""))
            details.update(agreement_inputs=judged, kept_float32=list(info.get("kept_float", [])))
        else:
            feeds = quantize_onnx.batches(calibrated)
            model = quantize_onnx.static(model, feeds)
            weights = "int8"
            how = (f"static int8 (QDQ, per-channel weights) of the lowered export (onnxruntime's calibrator runs "
                   f"without bridge's kernels), calibrated on {len(feeds)} sample(s) of --calibration")
    made = quantize_onnx.counts(model)
    if not made:
        raise ExportError(f"--quantize {quantize}: onnxruntime's quantizer left no node int8 (the model has no "
                          f"{'MatMul/Gemm with constant weights' if quantize == 'dynamic' else 'quantizable node'})")
    summary.append(how + ": " + ", ".join(f"{v} {k}" for k, v in sorted(made.items())))
    details.update(quantize=quantize, weights=weights, int8_nodes=dict(made))
    return model, model.ByteSize() > EXTERNAL_DATA_BYTES


def renamed_lines(model) -> List[str]:
    """The summary's word on outputs the export renamed (see RENAMED_OUTPUTS)."""
    from bridge.untrusted import shown
    names = model_output_names(model)
    if not names:
        return []
    pairs = ", ".join(f"{shown(old)} -> {shown(new)}" for new, old in names.items())
    return [f"outputs named like an input are renamed in the file (an ONNX name is one value): {pairs}; "
            f"metadata {RENAMED_OUTPUTS} maps them back"]


def _op_counts(model) -> Dict[str, int]:
    counts: Dict[str, int] = {}
    for n in model.graph.node:
        key = f"{n.domain}::{n.op_type}" if n.domain not in ("", "ai.onnx") else n.op_type
        counts[key] = counts.get(key, 0) + 1
    return counts
