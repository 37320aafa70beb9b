"""The ops' CUDA kernels from Python, on PyTorch tensors or CuPy arrays.

    from bridge import cuda
    k = cuda.harness()        # builds tf_ops/cuda_harness once (needs nvcc), loads it
    outputs = k.<op module>(*inputs, **attrs)    # e.g. the op's spec module name

The kernels are the ones TensorFlow's GPU kernels run (each op folder's CUDA core,
bridge/ops/<op module>/kernel.cuh), behind the C ABI of tf_ops/cuda_harness
(harness.cu, and each op's own entry points), called through ctypes with the arrays' device pointers. Outputs are new arrays of the inputs' kind, on their
device; the work is queued on the framework's current stream. Inputs are checked
against the op's spec (bridge.ops) first, so bad shapes, attributes and dtypes
raise the spec's OpError (a ValueError naming the op, the argument and the
shapes); an array that is not on a CUDA device does too.

What each op adds lives in its op folder, found by looking: its entry points are
bridge/ops/<op module>/cuda_harness.cu, and its companion cuda_harness.py beside
it declares them (ENTRIES: the arguments after the device pointers, which come
from the spec), the calls the harness gains (CALLS) and the roads `bridge cuda`
checks (CHECKS). No list of ops is kept here.

`gpu_status()` says whether a GPU and a framework to reach it are here, and if
not, why. Neither PyTorch nor CuPy is a dependency: each is imported only when
one of its arrays comes in. Needs no TensorFlow.

Without a GPU, `emulator()` gives the same interface over the same kernel sources
compiled for a CPU emulator of the CUDA execution model (tf_ops/cuda_emulator:
blocks of fiber threads, __syncthreads and warp shuffles checked, a stand-in
cuBLASLt), on numpy arrays: for checking what the kernels compute, not their speed.

    e = cuda.emulator()       # needs the CUDA headers (toolkit or pip), not nvcc nor a GPU
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import glob
import importlib.util
import os
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from bridge import ops as _specs
from bridge.ops import OpError

ABI_VERSION = 1


class CudaUnavailable(RuntimeError):
    """No GPU (or no framework to reach one); the message says which and why."""


def gpu_status() -> Tuple[bool, str]:
    """(True, device name) when PyTorch or CuPy sees a CUDA device, else (False, why not)."""
    reasons = []
    try:
        import torch
        if torch.cuda.is_available():
            return True, f"torch {torch.__version__}: {torch.cuda.get_device_name(0)}"
        reasons.append(f"torch {torch.__version__} sees no CUDA device (torch.version.cuda={torch.version.cuda})")
    except ImportError:
        reasons.append("PyTorch is not installed")
    try:
        import cupy
        n = cupy.cuda.runtime.getDeviceCount()
        if n > 0:
            return True, f"cupy {cupy.__version__}: {n} device(s)"
        reasons.append("CuPy sees no CUDA device")
    except ImportError:
        reasons.append("CuPy is not installed")
    except Exception as e:  # CuPy raises its own error types when no driver/device is there
        reasons.append(f"CuPy: {e}")
    return False, "no CUDA GPU: " + "; ".join(reasons)


# -- arrays of either framework ------------------------------------------------

class _Torch:
    def __init__(self):
        import torch
        self.torch = torch

    def owns(self, a) -> bool:
        return isinstance(a, self.torch.Tensor)

    def on_gpu(self, a) -> bool:
        return a.is_cuda

    def where(self, a) -> str:
        return str(a.device)

    def dtype(self, a) -> str:
        return str(a.dtype).replace("torch.", "")

    def contiguous(self, a):
        return a.contiguous()

    def ptr(self, a) -> int:
        return a.data_ptr()

    def empty(self, shape, like):
        return self.torch.empty(tuple(shape), dtype=like.dtype, device=like.device)

    def stream(self, like) -> int:
        return self.torch.cuda.current_stream(like.device).cuda_stream

    def on_device(self, like):
        return self.torch.cuda.device(like.device)


class _Cupy:
    def __init__(self):
        import cupy
        self.cupy = cupy

    def owns(self, a) -> bool:
        return isinstance(a, self.cupy.ndarray)

    def on_gpu(self, a) -> bool:
        return True

    def where(self, a) -> str:
        return f"cuda:{a.device.id}"

    def dtype(self, a) -> str:
        return a.dtype.name

    def contiguous(self, a):
        return self.cupy.ascontiguousarray(a)

    def ptr(self, a) -> int:
        return a.data.ptr

    def empty(self, shape, like):
        with like.device:
            return self.cupy.empty(tuple(shape), dtype=like.dtype)

    def stream(self, like) -> int:
        return self.cupy.cuda.get_current_stream().ptr

    def on_device(self, like):
        return like.device


class _Host:
    """numpy arrays, for the CPU emulator, whose "device" memory is the host's.
    Outputs sit between guard elements, checked after the call: a kernel that
    writes past its output's ends is caught (a GPU might corrupt silently)."""

    GUARD = 64  # elements each side: keeps the output 16-byte aligned
    FENCE = 7.0

    def __init__(self):
        self._fenced = []

    def owns(self, a) -> bool:
        import numpy
        return isinstance(a, numpy.ndarray)

    def on_gpu(self, a) -> bool:
        return True

    def where(self, a) -> str:
        return "emulator"

    def dtype(self, a) -> str:
        return a.dtype.name

    def contiguous(self, a):
        import numpy
        return numpy.ascontiguousarray(a)

    def ptr(self, a) -> int:
        return a.ctypes.data

    def empty(self, shape, like):
        import numpy
        n, g = numel(shape), self.GUARD
        # NaN, not zero: an output element no kernel wrote cannot pass a comparison.
        buf = numpy.full(n + 2 * g, numpy.nan, dtype=like.dtype)
        buf[:g] = buf[n + g:] = self.FENCE
        self._fenced.append(buf)
        return buf[g:n + g].reshape(tuple(shape))

    def check_fences(self, op: str) -> None:
        g = self.GUARD
        for buf in self._fenced:
            if not ((buf[:g] == self.FENCE).all() and (buf[-g:] == self.FENCE).all()):
                raise RuntimeError(f"{op} (CUDA emulator): a kernel wrote outside its output "
                                   f"({buf.size - 2 * g} elements)")

    def stream(self, like):
        return None

    def on_device(self, like):
        return contextlib.nullcontext()


def _package(a) -> str:
    return type(a).__module__.split(".")[0]


def _framework(a):
    frameworks = {"torch": _Torch, "cupy": _Cupy}
    make = frameworks.get(_package(a))
    return make() if make else None


def _host_array(a) -> bool:
    return _package(a) == "numpy"


def _prepare(spec, names: Sequence[str], arrays: Sequence, emulated: bool = False):
    """The framework and the arrays (contiguous), after checking that all are
    device arrays of one framework, one device and one dtype the op allows (for
    the emulator: numpy arrays)."""
    if emulated:
        fw = _Host()
        for name, a in zip(names, arrays):
            if not fw.owns(a):
                raise OpError(spec.name, name, f"must be a numpy array for the CUDA emulator, got {type(a).__name__}")
        arrays = [fw.contiguous(a) for a in arrays]
        first_dtype = fw.dtype(arrays[0])
        for name, a in zip(names, arrays):
            if fw.dtype(a) != first_dtype:
                raise OpError(spec.name, name, f"dtype {fw.dtype(a)} differs from {names[0]}'s {first_dtype} "
                                               f"(shape {list(a.shape)})")
        spec.check_dtype(first_dtype)
        return fw, first_dtype, arrays
    for name, a in zip(names, arrays):
        if _host_array(a):
            raise OpError(spec.name, name, f"must be on a CUDA device, got cpu (a numpy array of shape {list(a.shape)})")
    fw = _framework(arrays[0])
    if fw is None:
        raise OpError(spec.name, names[0], f"must be a torch.Tensor or cupy.ndarray on a CUDA device, "
                                           f"got {type(arrays[0]).__name__}")
    first_dtype = fw.dtype(arrays[0])
    out = []
    for name, a in zip(names, arrays):
        if not fw.owns(a):
            raise OpError(spec.name, name, f"must be a {type(arrays[0]).__name__} like {names[0]}, "
                                           f"got {type(a).__name__}")
        if not fw.on_gpu(a):
            raise OpError(spec.name, name, f"must be on a CUDA device, got {fw.where(a)} "
                                           f"(shape {list(a.shape)})")
        if fw.where(a) != fw.where(arrays[0]):
            raise OpError(spec.name, name, f"is on {fw.where(a)}, {names[0]} on {fw.where(arrays[0])}")
        if fw.dtype(a) != first_dtype:
            raise OpError(spec.name, name, f"dtype {fw.dtype(a)} differs from {names[0]}'s {first_dtype} "
                                           f"(shape {list(a.shape)})")
        out.append(fw.contiguous(a))
    spec.check_dtype(first_dtype)
    return fw, first_dtype, out


def shapes_of(arrays):
    return [tuple(int(d) for d in a.shape) for a in arrays]


def numel(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


class Call:
    """One op call: attributes resolved and arrays checked against the op's spec
    (one framework, one CUDA device, one allowed dtype), arrays contiguous."""

    def __init__(self, harness: "Harness", op: str, arrays: Sequence, attrs, names: Optional[Sequence[str]] = None):
        self.harness = harness
        self.spec = _specs.get(op)
        self.attrs = self.spec.resolve(attrs)
        names = names or tuple(a.name for a in self.spec.inputs)
        self.fw, self.dtype, self.arrays = _prepare(self.spec, names, arrays, emulated=harness.emulated)

    def empty(self, shape):
        """A new array of the inputs' kind, dtype and device."""
        return self.fw.empty(shape, self.arrays[0])

    def ptrs(self, *arrays):
        return [self.fw.ptr(a) for a in arrays]

    def launch(self, entry: str, *args) -> None:
        """The C entry `entry` for the arrays' dtype, on their device, queued on
        the framework's current stream (every entry's last argument)."""
        like = self.arrays[0]
        with self.fw.on_device(like):
            self.harness._call(self.spec.name, entry, self.dtype, *args, self.fw.stream(like))
        if isinstance(self.fw, _Host):
            self.fw.check_fences(self.spec.name)


# -- the library ---------------------------------------------------------------

def library_path(force: bool = False, quiet: bool = False):
    """Builds (or finds in the cache) libbridge_cuda_harness.so."""
    from bridge.native import cuda_harness_build
    return cuda_harness_build().library(force=force, quiet=quiet)


def preload_cublaslt() -> None:
    """Makes libcublasLt loadable by its soname for the C side's dlopen: PyTorch
    has usually loaded it already; else a pip nvidia-cublas* package's copy."""
    if os.environ.get("BRIDGE_CUBLASLT"):
        return
    for soname in ("libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"):
        try:
            ctypes.CDLL(soname, mode=ctypes.RTLD_GLOBAL)
            return
        except OSError:
            pass
    for entry in sys.path:
        for path in sorted(glob.glob(os.path.join(entry or ".", "nvidia", "*", "lib", "libcublasLt.so*")),
                           reverse=True):
            try:
                ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
                return
            except OSError:
                pass


I64 = ctypes.c_int64
F32 = ctypes.c_float
INT = ctypes.c_int
PTR = ctypes.c_void_p  # a device pointer (or the stream)
I64_ARRAY = ctypes.POINTER(ctypes.c_int64)  # host arrays
F32_ARRAY = ctypes.POINTER(ctypes.c_float)
SUFFIXES = {"float32": "f32", "float16": "f16"}  # one C entry per dtype


@dataclass(frozen=True)
class Entry:
    """One C entry point of the harness (`<name>_f32`, `<name>_f16`): `pointers`
    device pointers (None: one per input then per output of the op's spec), then
    `scalars`, then the stream."""
    name: str
    scalars: Tuple = ()
    pointers: Optional[int] = None


@dataclass(frozen=True)
class Companion:
    """What one op brings to the harness, from bridge/ops/<op module>/cuda_harness.py."""
    spec: object
    path: Path
    entries: Tuple[Entry, ...]
    calls: Tuple[Callable, ...]  # harness methods: each takes the Harness first
    checks: Tuple[tuple, ...]    # (road, dtypes, check(k, dev, rng, example, dtype) -> excess)
    module: types.ModuleType     # the file itself, for what else it offers (an op's own helpers)

    def argtypes(self, entry: Entry) -> List:
        n = entry.pointers if entry.pointers is not None else len(self.spec.inputs) + len(self.spec.outputs)
        return [PTR] * n + list(entry.scalars) + [PTR]


def companion_path(spec) -> Optional[Path]:
    """cuda_harness.py in the op's folder (bridge.ops.op_folder), None for an op without one."""
    from bridge.native import HARNESS_COMPANION
    folder = _specs.op_folder(spec)
    return folder / HARNESS_COMPANION if folder is not None else None


def _load_companion(spec, path: Path) -> Companion:
    module_spec = importlib.util.spec_from_file_location(f"_bridge_cuda_harness_{spec.module}", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    missing = [n for n in ("ENTRIES", "CALLS", "CHECKS") if not hasattr(module, n)]
    if missing:
        raise CudaUnavailable(f"{path} ({spec.name}'s CUDA companion) lacks {', '.join(missing)}")
    return Companion(spec, path, tuple(module.ENTRIES), tuple(module.CALLS), tuple(module.CHECKS), module)


@functools.lru_cache(maxsize=None)
def _companions(paths: Tuple[Tuple[str, Optional[Path]], ...]) -> Tuple[Companion, ...]:
    return tuple(_load_companion(_specs.get(name), path) for name, path in paths if path and path.is_file())


def companions() -> Tuple[Companion, ...]:
    """The ops with CUDA kernels: every spec whose op folder has a companion file."""
    return _companions(tuple((s.name, companion_path(s)) for s in _specs.all_specs()))


def companion(op: str) -> Companion:
    spec = _specs.get(op)
    for c in companions():
        if c.spec is spec:
            return c
    raise KeyError(f"{spec.name} has no CUDA kernels (no {companion_path(spec) or 'op folder'})")


class Harness:
    """The loaded C ABI, with Python signatures that check and allocate.
    `emulated`: the library is the CPU emulator's (numpy arrays in and out; its
    launch errors and cuBLASLt refusals raise after each call)."""

    def __init__(self, path, emulated: bool = False):
        self.path = str(path)
        self.emulated = emulated
        self.lib = ctypes.CDLL(self.path)
        version = self.lib.bridge_cuda_abi_version()
        if version != ABI_VERSION:
            raise CudaUnavailable(f"{self.path} has C ABI version {version}, bridge.cuda expects {ABI_VERSION}. "
                                  f"Fix: bridge.cuda.library_path(force=True)")
        self.lib.bridge_cuda_last_error.restype = ctypes.c_char_p
        self._calls: Dict[str, Callable] = {}
        for c in companions():
            for entry in c.entries:
                for suffix in SUFFIXES.values():
                    try:
                        fn = getattr(self.lib, f"{entry.name}_{suffix}")
                    except AttributeError:
                        raise CudaUnavailable(f"{self.path} lacks {entry.name}_{suffix} ({c.spec.name}, declared in "
                                              f"{c.path}). Fix: bridge.cuda.library_path(force=True)") from None
                    fn.argtypes = c.argtypes(entry)
                    fn.restype = ctypes.c_int
            for call in c.calls:
                self._calls[call.__name__] = call
        if emulated:
            for name in ("bridge_cuda_emulator_take_errors", "bridge_cublaslt_emulator_take_errors"):
                getattr(self.lib, name).restype = ctypes.c_char_p
            self.lib.bridge_cuda_emulator_seed.argtypes = [ctypes.c_uint64]
            self.lib.bridge_cuda_emulator_stats.argtypes = [I64_ARRAY, ctypes.c_int]
            self.lib.bridge_cublaslt_emulator_stats.argtypes = [I64_ARRAY, ctypes.c_int]
            self.lib.bridge_cublaslt_emulator_refuse_bias_epilogue.argtypes = [ctypes.c_int]

    def __getattr__(self, name: str):
        calls = self.__dict__.get("_calls", {})
        if name in calls:
            return types.MethodType(calls[name], self)
        raise AttributeError(f"{type(self).__name__} has no {name!r}; the ops' calls: {sorted(calls)}")

    def _call(self, op: str, name: str, dtype: str, *args) -> None:
        suffix = SUFFIXES[dtype]
        self.raise_for(op, getattr(self.lib, f"{name}_{suffix}")(*args) != 0)

    def raise_for(self, op: str, failed: bool) -> None:
        """After a call of a C entry point: RuntimeError with what the emulator found
        (a refusal the kernel code recovered from still is a finding), else with
        the entry point's own message when it `failed`."""
        if self.emulated:
            found = (self.lib.bridge_cuda_emulator_take_errors() + self.lib.bridge_cublaslt_emulator_take_errors())
            if found:
                raise RuntimeError(f"{op} (CUDA emulator): {found.decode(errors='replace').strip()}")
        if failed:
            raise RuntimeError(f"{op} (CUDA): {self.lib.bridge_cuda_last_error().decode(errors='replace')}")

    # -- the emulator's controls ---------------------------------------------
    def emulator_stats(self, reset: bool = True) -> dict:
        """What the emulated calls since the last reset did: kernel launches,
        blocks run as fibers and as plain calls, __syncthreads and shuffles met,
        scratch allocations still live; cuBLASLt heuristic queries, products, and
        products with the bias epilogue."""
        self._need_emulator()
        run, lt = (I64 * 6)(), (I64 * 3)()
        self.lib.bridge_cuda_emulator_stats(run, int(reset))
        self.lib.bridge_cublaslt_emulator_stats(lt, int(reset))
        names = ("launches", "fiber_blocks", "direct_blocks", "barriers", "shuffles", "live_allocations")
        return {**dict(zip(names, run)), **dict(zip(("gemm_queries", "gemms", "gemms_with_bias"), lt))}

    def emulator_seed(self, seed: int) -> None:
        """Seeds the order in which the emulator lets warps run ahead."""
        self._need_emulator()
        self.lib.bridge_cuda_emulator_seed(seed)

    def emulator_refuse_bias_epilogue(self, refuse: bool) -> None:
        """Makes the stand-in cuBLASLt offer no algorithm with the bias epilogue,
        as the real one may for some shapes (the convolution's fallback road)."""
        self._need_emulator()
        self.lib.bridge_cublaslt_emulator_refuse_bias_epilogue(int(refuse))

    def _need_emulator(self):
        if not self.emulated:
            raise RuntimeError(f"{self.path} is not the CUDA emulator; see bridge.cuda.emulator()")


@functools.lru_cache(maxsize=None)
def _load(path: str) -> Harness:
    return Harness(path)


def harness(build: bool = True) -> Harness:
    """The loaded harness, built first when the cache has none (BuildError when
    nvcc or cublasLt.h is missing: the message says which and the fix)."""
    from bridge.native import cuda_harness_build
    b = cuda_harness_build()
    lib = b.library() if build else b.folder() / b.target_file
    if not lib.exists():
        raise CudaUnavailable(f"{lib} is not built. Fix: bridge.cuda.library_path()")
    return _load(str(lib))


@functools.lru_cache(maxsize=None)
def _load_emulator(path: str) -> Harness:
    return Harness(path, emulated=True)


def emulator() -> Harness:
    """The harness's kernels on the CPU emulator, built first when the cache has
    none (BuildError when the CUDA headers or cublasLt.h are missing, naming the
    fix). Takes and returns numpy arrays."""
    from bridge.native import cuda_emulator_build
    return _load_emulator(str(cuda_emulator_build().library()))


def require_gpu() -> str:
    """The device description, or CudaUnavailable with the reason."""
    ok, what = gpu_status()
    if not ok:
        raise CudaUnavailable(what)
    return what


__all__ = ["ABI_VERSION", "Companion", "CudaUnavailable", "Entry", "Harness", "companion", "companions", "emulator",
           "gpu_status", "harness", "library_path", "require_gpu"]
