"""The fused ops in ONNX and onnxruntime, without TensorFlow.

    from bridge import onnx_plugins          # registers the com.bridge schemas
    onnx_plugins.function_proto("FusedLayerNorm", opset=17)   # FunctionProto of standard ops
    onnx_plugins.add_functions(model)         # model-local functions + opset_import
    onnx_plugins.inline_custom_ops(model)     # every com.bridge node replaced by its body
    ReferenceEvaluator(model, new_ops=onnx_plugins.reference_ops())
    sess = onnx_plugins.session(model, kernels="fastest")    # onnxruntime + native kernels

Every op's function body, reference kernel, schema and shape inference come from
its spec, and its road for kernels="fastest" from its op folder's bench.py; its
onnxruntime CPU kernel is its kernel core (bridge/ops/<op>/kernel.h) through
native/host.cc, or a `native/<op>.cc` of its own. A team's op brings its kernel in
its own library (`--ort-library`, team_libraries.py).
"""
from __future__ import annotations

import ctypes
import json
import os
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Union

from bridge import cpu_flags
from bridge import ops as _specs

from . import schemas, team_libraries
from .functions import (MAX_OPSET, MIN_FUNCTION_OPSET, MIN_INLINE_OPSET, default_opset, add_functions,
                        function_proto, inline_custom_ops)
from .reference import reference_op

schemas.register_all()

CONFIG_KEY = "bridge.kernels"
# onnxruntime's session option: where a model given as bytes finds its external data
EXTERNAL_DATA_FOLDER_KEY = "session.model_external_initializers_file_folder_path"
# onnxruntime's session option: whether idle intra-op threads spin
SPINNING_KEY = "session.intra_op.allow_spinning"

# The road `session(kernels="fastest")` takes per op: "native" (the library's
# kernel) or "function" (the function body, inlined and optimised by onnxruntime),
# as the op folder's bench.py says (`FASTEST`; `FASTEST_WITHOUT_ONEDNN` where the
# native kernel is slower without oneDNN, `FASTEST_WITHOUT_AVX512` on a CPU without
# AVX-512; an op without any takes its function), chosen on whole models
# (benchmarks/onnx_models.py). A team's op runs its own library's kernel
# (--ort-library) where one serves it, else its function.
def _road(spec, name: str) -> Optional[str]:
    return getattr(_specs.part(spec, "bench"), name, None)


FASTEST = {s.name: _road(s, "FASTEST") or "function" for s in _specs.all_specs() if _specs.is_builtin(s)}
FASTEST_WITHOUT_ONEDNN = {s.name: _road(s, "FASTEST_WITHOUT_ONEDNN") for s in _specs.all_specs()
                          if _specs.is_builtin(s) and _road(s, "FASTEST_WITHOUT_ONEDNN")}
FASTEST_WITHOUT_AVX512 = {s.name: _road(s, "FASTEST_WITHOUT_AVX512") for s in _specs.all_specs()
                          if _specs.is_builtin(s) and _road(s, "FASTEST_WITHOUT_AVX512")}


def reference_ops() -> List[type]:
    """The OpRun classes for `onnx.reference.ReferenceEvaluator(new_ops=...)`."""
    return [reference_op(s) for s in _specs.all_specs()]


# -- the native library -------------------------------------------------------------

def ort_library_path(build: bool = True) -> Optional[Path]:
    """The custom-op library, building it on first use (`bridge build ort` does it
    ahead of time). With build=False: the path if already built, else None."""
    from bridge import native
    b = native.ort_build(fetch=build)
    if b is None:
        return None
    if not build:
        lib = b.folder() / b.target_file
        return lib if lib.exists() else None
    return b.library()


_described: Dict[str, dict] = {}


def library_ops(path: Optional[Path] = None) -> Dict[str, dict]:
    """{op: {inputs, outputs, attrs}} as the built library describes itself."""
    path = Path(path or ort_library_path())
    key = str(path)
    if key not in _described:
        lib = ctypes.CDLL(key)
        lib.bridge_ort_describe.restype = ctypes.c_char_p
        _described[key] = json.loads(lib.bridge_ort_describe().decode())
    return _described[key]


def kernel_calls(op: str, path: Optional[Path] = None) -> int:
    """How many times the library's kernel for `op` has run in this process."""
    lib = ctypes.CDLL(str(path or ort_library_path()))
    lib.bridge_ort_calls.restype = ctypes.c_uint64
    lib.bridge_ort_calls.argtypes = [ctypes.c_char_p]
    return int(lib.bridge_ort_calls(op.encode()))


# YoloConvBnLeaky's convolution roads, as its kernel core counts them (bridge_conv_calls)
CONV_ROADS = ("gemm", "onednn-direct", "onednn-winograd")


def conv_road_calls(path: Optional[Path] = None) -> Dict[str, int]:
    """{road: how many YoloConvBnLeaky calls took it in this process} (CONV_ROADS):
    which convolution a node ran, read from the kernel library's counters."""
    lib = ctypes.CDLL(str(path or ort_library_path()))
    lib.bridge_conv_calls.restype = ctypes.c_uint64
    lib.bridge_conv_calls.argtypes = [ctypes.c_char_p]
    return {road: int(lib.bridge_conv_calls(road.encode())) for road in CONV_ROADS}


def library_has_onednn(path: Optional[Path] = None) -> bool:
    """Whether the kernel library was built with oneDNN (its convolution road)."""
    from bridge import native
    info = native.read_build_info(Path(path or ort_library_path()))
    return bool(info.get("options", {}).get("BRIDGE_DNNL_ROOT"))


def _fastest(op: str) -> str:
    from bridge.native import BuildError
    if team_libraries.library_for(op):
        return "native"
    road = FASTEST.get(op, "function")
    if op in FASTEST_WITHOUT_ONEDNN:
        try:
            onednn = library_has_onednn()
        except BuildError:
            onednn = False  # registering the library will report why it cannot be built
        if not onednn:
            road = FASTEST_WITHOUT_ONEDNN[op]
    if op in FASTEST_WITHOUT_AVX512 and not cpu_flags.has_avx512_core():
        road = FASTEST_WITHOUT_AVX512[op]
    return road


def native_ops(kernels: Union[str, Iterable[str]] = "fastest") -> List[str]:
    """The op types whose native kernel a session with `kernels` uses."""
    if isinstance(kernels, str):
        if kernels == "all":  # every op a kernel library serves: bridge's, or a team's (--ort-library)
            return [s.name for s in _specs.all_specs() if _specs.is_builtin(s) or team_libraries.library_for(s.name)]
        if kernels == "none":
            return []
        if kernels == "fastest":
            return [s.name for s in _specs.all_specs() if _fastest(s.name) == "native"]
        kernels = [kernels]
    names = []
    for k in kernels:
        try:
            spec = _specs.get(k)
        except KeyError:
            raise ValueError(f"kernels: unknown op {k!r}; use 'fastest', 'all', 'none' or op types from "
                             f"{sorted(_specs.SPECS)}") from None
        if not _specs.is_builtin(spec) and not team_libraries.library_for(spec.name):
            raise ValueError(f"kernels: {spec.name} has no onnxruntime kernel library "
                             f"(give it with {team_libraries.FLAG})")
        names.append(spec.name)
    return names


def session(model_or_path, *, kernels: Union[str, Sequence[str]] = "fastest", threads: Optional[int] = None,
            options=None, providers=None, **kw):
    """An onnxruntime InferenceSession with the com.bridge kernels named by
    `kernels` ("fastest", "all", "none" or op types) registered; every other
    com.bridge op runs its model-local function (added here if the model lacks it).
    `threads` sets intra_op_num_threads; `options` is a SessionOptions to start from.
    The kernels run on the session's own intra-op threads. Only where
    YoloConvBnLeaky's oneDNN is told to use its own OpenMP team
    (BRIDGE_DNNL_THREADS=openmp) do onnxruntime's idle threads not spin
    (SPINNING_KEY "0") unless `options` says otherwise: spinning, they took the
    team's cores (YOLOv3-416 2x slower on 2 cores).

    A path goes to onnxruntime as it is (no re-serialisation: models over 2 GB
    with external data work) unless a com.bridge op without a native kernel has
    no function in the file; then only the graph is read (tensor data stays on
    disk), the functions are added in memory, and onnxruntime reads the external
    data from the file's folder. The file itself is never modified."""
    import onnx
    import onnxruntime as ort

    names = native_ops(kernels)
    so = options or ort.SessionOptions()
    if isinstance(model_or_path, onnx.ModelProto):
        model, path = model_or_path, None
    else:
        path = os.path.abspath(os.fspath(model_or_path))
        # every op native: no function can be missing, so the file is read once, by onnxruntime
        model = None if set(names) >= set(_specs.SPECS) else onnx.load(path, load_external_data=False)
    if model is not None and _ops_without_body(model, names):
        if path is None:
            copy = onnx.ModelProto()
            copy.CopyFrom(model)
            model = copy
        else:
            # the model goes as bytes: onnxruntime resolves its external data against this folder
            so.add_session_config_entry(EXTERNAL_DATA_FOLDER_KEY, os.path.dirname(path))
        missing = _ops_without_body(model, names)
        if default_opset(model) < MIN_FUNCTION_OPSET:  # too old for generic functions: the nodes' own bodies
            source = inline_custom_ops(model, only=missing).SerializeToString()
        else:
            source = add_functions(model).SerializeToString()
    else:
        source = path if path is not None else model.SerializeToString()
    if threads:
        so.intra_op_num_threads = threads
    if (os.environ.get("BRIDGE_DNNL_THREADS") == "openmp" and any(n in FASTEST_WITHOUT_ONEDNN for n in names)
            and not _has_config(so, SPINNING_KEY) and library_has_onednn()):
        # oneDNN's OpenMP team and onnxruntime's spinning threads would share the cores
        so.add_session_config_entry(SPINNING_KEY, "0")
    own = [n for n in names if _specs.is_builtin(_specs.get(n))]
    if own:
        # The library reads this entry while it registers, so it goes first.
        so.add_session_config_entry(CONFIG_KEY, ",".join(own))
        so.register_custom_ops_library(str(ort_library_path()))
    # A team's library only where its op's kernel is asked for: registered, its
    # kernel would take the node's place even where the function body was meant.
    for library in dict.fromkeys(team_libraries.library_for(n)[0] for n in names if n not in own):
        so.register_custom_ops_library(str(library))
    return ort.InferenceSession(source, sess_options=so, providers=providers or ["CPUExecutionProvider"], **kw)


def _has_config(so, key: str) -> bool:
    try:
        so.get_session_config_entry(key)
        return True
    except RuntimeError:  # onnxruntime's answer for an entry never set
        return False


def _ops_without_body(model, native: Sequence[str]) -> set:
    """com.bridge op types the model uses that have neither a native kernel in
    this session nor a model-local function."""
    used = {n.op_type for n in model.graph.node if _specs.for_node(n.domain, n.op_type)}
    have = {f.name for f in model.functions if _specs.for_node(f.domain, f.name)}
    return used - set(native) - have


# -- `bridge ops` ----------------------------------------------------------------------

def backend_status(spec) -> Dict[str, str]:
    import onnx.defs
    out = {"onnx_schema": "yes" if onnx.defs.has(spec.name, spec.domain) else "schema not registered"}
    try:
        function_proto(spec, MAX_OPSET)
        function_proto(spec, MIN_FUNCTION_OPSET, dtype=spec.dtypes[0])
        out["onnx_function"] = "yes"
    except Exception as e:  # the cell says why
        out["onnx_function"] = f"no: {e}"
    team = team_libraries.library_for(spec.name)
    if team is not None:
        library, dtypes = team
        only = "" if set(dtypes) == set(spec.dtypes) else f"; {', '.join(dtypes)} only"
        out["ort_kernel"] = f"yes ({library.name}{only})"
        return out
    try:
        path = ort_library_path(build=False)
        if path is None:
            out["ort_kernel"] = "not built (bridge build ort)"
        else:
            out["ort_kernel"] = "yes" if spec.name in library_ops(path) else (
                "not in the library" if _specs.is_builtin(spec) else
                f"not in the library (a team's own: {team_libraries.FLAG} LIB)")
    except Exception as e:
        out["ort_kernel"] = f"no: {e}"
    return out


__all__ = ["CONFIG_KEY", "CONV_ROADS", "SPINNING_KEY", "FASTEST", "FASTEST_WITHOUT_AVX512", "FASTEST_WITHOUT_ONEDNN",
           "MAX_OPSET", "MIN_FUNCTION_OPSET", "MIN_INLINE_OPSET", "add_functions", "backend_status", "conv_road_calls",
           "function_proto", "inline_custom_ops", "kernel_calls", "library_has_onednn", "library_ops", "native_ops",
           "ort_library_path", "reference_ops", "session"]
