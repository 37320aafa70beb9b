"""Running a .tflite on LiteRT's CompiledModel (CPU) with bridge's custom-op
kernels, through the library's C harness (litert/native/harness.cc) over
ctypes: the Python `Interpreter` and `CompiledModel` have no custom-op hook.

The library is built once per LiteRT version and CPU (bridge.native.litert_build,
`bridge build tflite`); the first use of each build runs a self-test model in a
subprocess (selftest.py), so a LiteRT whose ABI differs from what
native/litert_c_api.h declares is a clear error, never a crash in the caller.
"""
from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Mapping, Optional

import numpy as np

SELFTEST_MARK = "selftest.json"

# the build in use when a team's kernels were added (team_libraries.add sets it:
# that module configures this one, never the other way round); None: bridge's own
_team_build = None


def use_build(build_fn) -> None:
    """`build_fn()` (a bridge.native.Build) serves library() from now on; None: bridge's own."""
    global _team_build
    _team_build = build_fn


def _kernels_libgomp_loaded(maps: str) -> bool:
    """Whether /proc/self/maps text holds the system's libgomp.so.1, which the
    kernels link; a wheel's own copy (scikit-learn's libgomp-<hash>.so, loaded
    with TensorFlow) is another library that reads its policy apart."""
    return any(Path(line.split()[-1]).name.startswith("libgomp.so")
               for line in maps.splitlines() if "libgomp" in line)


def _passive_openmp() -> None:
    """The kernels run on OpenMP threads (libgomp) between LiteRT's own; GOMP's
    default spin-waiting after each parallel loop took the cores from the
    interpreter thread and XNNPack's pool: FusedLayerNorm [4,128,768] 17 ms
    instead of 0.9 ms on 2 cores, XNNPack's 1x1 conv 0.96 instead of 0.50 ms.
    libgomp reads the policy once, when it loads: set here unless the caller
    chose one or the kernels' libgomp is already in the process."""
    try:
        loaded = _kernels_libgomp_loaded(Path("/proc/self/maps").read_text())
    except OSError:
        loaded = False
    if not loaded:
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


_passive_openmp()
# TFLite element types (LiteRtElementType carries TfLiteType numbers) -> numpy
# (the element types native/harness.cc copies: it refuses any other when the model is opened)
DTYPES = {1: np.float32, 2: np.int32, 4: np.int64, 10: np.float16, 3: np.uint8, 9: np.int8, 6: np.bool_,
          7: np.int16, 11: np.float64}


class LiteRTError(RuntimeError):
    """A model that does not load or run; the message names the op and argument
    when one of bridge's kernels refused it."""


def litert_version() -> str:
    from importlib import metadata
    try:
        return metadata.version("ai-edge-litert")
    except metadata.PackageNotFoundError:
        return "not installed"


def library(build: bool = True) -> Path:
    """The built kernel library, self-tested (building it first with build=True):
    bridge's own, or bridge's with a team's op files once `--litert-library`
    gave them (team_libraries.py). Raises bridge.native.BuildError naming the
    cause and the LiteRT version."""
    from bridge import native
    b = (_team_build and _team_build()) or native.litert_build()
    lib = b.library() if build else b.folder() / b.target_file
    if not lib.exists():
        raise native.BuildError(f"the LiteRT kernels are not built. Fix: bridge build {b.target or b.name}")
    mark = lib.parent / SELFTEST_MARK
    if not mark.exists():
        _selftest(native, lib, mark)
    return lib


def _selftest(native, lib: Path, mark: Path) -> None:
    env = dict(os.environ, BRIDGE_LITERT_SELFTEST_LIB=str(lib))
    p = subprocess.run([sys.executable, "-m", "bridge.litert.selftest"], capture_output=True, text=True, env=env,
                       timeout=300)
    if p.returncode:
        tail = "\n".join((p.stdout + p.stderr).strip().splitlines()[-6:])
        crashed = f" (it crashed: signal {-p.returncode})" if p.returncode < 0 else ""
        raise native.BuildError(
            f"the LiteRT kernels built, but their self-test failed on ai-edge-litert {litert_version()}{crashed}: "
            f"{tail}\nbridge's declarations (litert/native/litert_c_api.h) may not match this LiteRT; "
            f"--mode lowered still runs on it")
    tmp = mark.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps({"litert": litert_version(), "output": p.stdout.strip()}))
    os.replace(tmp, mark)


def _bind(lib: Path):
    c = ctypes.CDLL(str(lib))
    P, I, S = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
    sig = {
        "bridge_litert_open": (P, [ctypes.c_char_p, I, I, ctypes.c_char_p, S]),
        "bridge_litert_close": (None, [P]),
        "bridge_litert_count": (I, [P, I]),
        "bridge_litert_name": (ctypes.c_char_p, [P, I, I]),
        "bridge_litert_element_type": (I, [P, I, I]),
        "bridge_litert_run": (I, [P, P, P, P, ctypes.c_char_p, S]),
        "bridge_litert_output_shape": (I, [P, I, P]),
        "bridge_litert_read_output": (I, [P, I, P, S]),
        "bridge_litert_ops": (I, [ctypes.c_char_p, S]),
    }
    for name, (res, args) in sig.items():
        f = getattr(c, name)
        f.restype, f.argtypes = res, args
    return c


_LIBS: Dict[str, ctypes.CDLL] = {}


def _lib(path: Path):
    key = str(path)
    if key not in _LIBS:
        _LIBS[key] = _bind(path)
    return _LIBS[key]


def served_ops(lib: Optional[Path] = None) -> Dict[str, Optional[str]]:
    """{op: None if the library runs it, else why not}."""
    c = _lib(lib or library())
    buf = ctypes.create_string_buffer(4096)
    c.bridge_litert_ops(buf, len(buf))
    out: Dict[str, Optional[str]] = {}
    for line in buf.value.decode().splitlines():
        parts = line.split(":", 2)
        out[parts[0]] = parts[2] if len(parts) > 2 else None
    return out


def host_threads() -> int:
    """The threads a model runs on: OMP_NUM_THREADS where the user set it (it sizes
    bridge's OpenMP team too), else the CPUs this process may use."""
    try:
        n = int(os.environ.get("OMP_NUM_THREADS", "").split(",")[0])
    except ValueError:
        n = 0
    return n if n > 0 else len(os.sched_getaffinity(0))


class Model:
    """One .tflite compiled for LiteRT's CPU; custom=True registers bridge's kernels.
    XNNPack runs on `threads` threads (default host_threads(): LiteRT's own default
    is one, which a custom kernel on every core would beat unfairly)."""

    def __init__(self, source, custom: bool = True, lib: Optional[Path] = None, threads: Optional[int] = None):
        self._c = _lib(lib or library())
        data = bytes(source) if isinstance(source, (bytes, bytearray)) else Path(source).read_bytes()
        if custom:  # LiteRT gives a custom op only 64-byte aligned constants (aligned.py)
            from bridge.litert.aligned import align_buffers
            data = align_buffers(data)
        fd, path = tempfile.mkstemp(suffix=".tflite")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        self._tmp = path
        err = ctypes.create_string_buffer(4096)
        self._h = self._c.bridge_litert_open(path.encode(), int(custom), int(threads or host_threads()), err, len(err))
        if self._tmp:
            os.unlink(self._tmp)
        if not self._h:
            raise LiteRTError(err.value.decode(errors="replace"))
        self.inputs = self._names(0)
        self.outputs = self._names(1)
        self._types = [self._c.bridge_litert_element_type(self._h, 0, k) for k in range(len(self.inputs))]
        from bridge.litert.shape_guard import file_input_shapes, shape_computed_outputs
        self._shape_computed = shape_computed_outputs(data)
        self._file_shapes = file_input_shapes(data)

    def _names(self, output: int) -> List[str]:
        return [self._c.bridge_litert_name(self._h, output, k).decode()
                for k in range(self._c.bridge_litert_count(self._h, output))]

    def run(self, feeds: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
        missing = [n for n in self.inputs if n not in feeds]
        if missing:
            raise LiteRTError(f"missing input {missing[0]!r}; the model takes {self.inputs}")
        arrays = [np.ascontiguousarray(feeds[n], dtype=DTYPES.get(t, None)) for n, t in zip(self.inputs, self._types)]
        self._refuse_unsized_outputs(arrays)
        ptrs = (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])
        shapes = (ctypes.c_int64 * max(1, sum(a.ndim for a in arrays)))(*[d for a in arrays for d in a.shape])
        ranks = (ctypes.c_int * len(arrays))(*[a.ndim for a in arrays])
        err = ctypes.create_string_buffer(4096)
        if self._c.bridge_litert_run(self._h, ptrs, shapes, ranks, err, len(err)):
            raise LiteRTError(err.value.decode(errors="replace"))
        out = {}
        for k, name in enumerate(self.outputs):
            dims = (ctypes.c_int64 * 8)()
            rank = self._c.bridge_litert_output_shape(self._h, k, dims)
            dtype = DTYPES[self._c.bridge_litert_element_type(self._h, 1, k)]
            a = np.empty([dims[j] for j in range(rank)], dtype)
            if self._c.bridge_litert_read_output(self._h, k, a.ctypes.data, a.nbytes):
                raise LiteRTError(f"could not read output {name!r}")
            out[name] = a
        return out

    def _refuse_unsized_outputs(self, arrays) -> None:
        """An output whose shape a SHAPE op computes, at input shapes other than the
        file's: the CompiledModel would size its buffer for the file's shapes and the
        run write past it (shape_guard.py), so the run is refused before it starts."""
        if not self._shape_computed:
            return
        for name, a in zip(self.inputs, arrays):
            stored = self._file_shapes.get(name)
            if stored is not None and list(a.shape) != stored:
                out, shape_op = next(iter(self._shape_computed.items()))
                raise LiteRTError(
                    f"output {out!r}: its shape is computed while the model runs (it depends on SHAPE op "
                    f"output {shape_op!r}), and LiteRT's CompiledModel sizes output buffers before running, for "
                    f"the file's input shapes: input {name!r} at [{','.join(map(str, a.shape))}] instead of the "
                    f"file's [{','.join(map(str, stored))}] would be written past its buffer. Convert the model "
                    f"at these input shapes")

    def close(self):
        if getattr(self, "_h", None):
            self._c.bridge_litert_close(self._h)
            self._h = None

    def __del__(self):
        self.close()


def run_tflite_custom(data, feeds: Mapping[str, np.ndarray], custom: bool = True) -> Dict[str, np.ndarray]:
    """One run of a .tflite (bytes or path) on LiteRT with bridge's kernels."""
    m = Model(data, custom=custom)
    try:
        return m.run(feeds)
    finally:
        m.close()
