"""Builds the project's native libraries with CMake, once per configuration.

A build is cached under `$BRIDGE_CACHE` (default `~/.cache/bridge`) in a folder
named by the library, the framework version it binds to, and a hash of
everything that changes the binary: sources, CMake options, compiler, and the
CPU's instruction set unless the build is portable. A second process that asks
for the same build waits on a lock instead of building twice; a build is done
in a temporary folder and renamed into place, so a half-built library is never
picked up.

The CPU flags (bridge/cpu_flags.py) are decided by what compiles: `-march=native`
(`-mcpu=native` on aarch64) unless the build's headers refuse a feature of this
CPU, then with that feature off. They are part of the cache key and of each
build's `build-info.json`. A build for this CPU that still fails is retried once
portable, and the cache remembers that it had to be. `BRIDGE_PORTABLE=1` (or
`bridge build --portable`) builds without CPU flags, for a library that must run
on other machines; `BRIDGE_CPU_FLAGS="..."` forces exact flags.
"""
from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple

from bridge import cpu_flags
from bridge.errors import BridgeError


class BuildError(BridgeError, RuntimeError):
    """A native build failed; the message names the cause and the fix."""

    exit_code = 1


def build_error_behind(e: Optional[BaseException]) -> Optional[BuildError]:
    """The innermost BuildError in `e`'s chain, if any: Keras re-raises errors
    from a layer's call() as new exceptions, with the original as their context,
    and the innermost carries the build's own message."""
    seen = set()
    found = None
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, BuildError):
            found = e
        e = e.__cause__ or e.__context__
    return found


def cache_root() -> Path:
    return Path(os.environ.get("BRIDGE_CACHE") or Path.home() / ".cache" / "bridge")


def _tool(module: str, attr: str, exe: str) -> Optional[str]:
    """A build tool from its PyPI package (a dependency) or else from PATH."""
    try:
        mod = __import__(module)
        path = Path(getattr(mod, attr)) / exe
        if path.exists():
            return str(path)
    except Exception:
        pass
    return shutil.which(exe)


def cmake_exe() -> str:
    exe = _tool("cmake", "CMAKE_BIN_DIR", "cmake")
    if not exe:
        raise BuildError("CMake not found. Fix: pip install cmake (or apt-get install cmake)")
    return exe


def ninja_exe() -> Optional[str]:
    return _tool("ninja", "BIN_DIR", "ninja")


def cxx_compiler() -> str:
    env = os.environ.get("CXX")
    if env:
        if not shutil.which(env):
            raise BuildError(f"CXX={env} is not an executable C++ compiler. Fix: point CXX at a C++17 "
                             f"compiler, or unset it to use g++ (apt-get install g++)")
        return env
    cxx = shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")
    if not cxx:
        raise BuildError("no C++ compiler found (g++, c++ or clang++). Fix: apt-get install g++ "
                         "(or set CXX to a C++17 compiler)")
    return cxx


def _compiler_id(cxx: str) -> str:
    try:
        return subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30).stdout.splitlines()[0]
    except Exception as e:  # pragma: no cover - reported by the build itself
        return f"{cxx} ({e})"


def cpu_id() -> str:
    """What -march=native depends on: the CPU's model and feature flags."""
    try:
        text = Path("/proc/cpuinfo").read_text()
        model = next((l.split(":", 1)[1].strip() for l in text.splitlines() if l.startswith("model name")), "")
        flags = next((l.split(":", 1)[1].strip() for l in text.splitlines() if l.startswith("flags")), "")
        return model + "|" + hashlib.sha1(flags.encode()).hexdigest()[:12]
    except OSError:
        return platform.machine()


def cpu_name() -> str:
    """The CPU's model name, for logs and benchmark tables, with its family and
    model numbers and the ISA extensions the kernels' speed depends on (a cloud
    CPU's name is often just "AMD EPYC": Zen 2 and Zen 5 differ by 2x in int8)."""
    try:
        info = Path("/proc/cpuinfo").read_text().split("\n\n")[0]
    except OSError:
        return platform.processor() or platform.machine()
    fields = {}
    for line in info.splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    name = fields.get("model name") or fields.get("Model") or fields.get("Hardware") or platform.machine()
    flags = cpu_flags.cpu_features()
    isa = [label for label, any_of in (("AVX2", {"avx2"}), ("AVX-512", {"avx512f"}),
                                       ("VNNI", {"avx512_vnni", "avx_vnni"}), ("BF16", {"avx512_bf16"}),
                                       ("FP16", {"avx512_fp16"}), ("AMX", {"amx_tile"})) if flags & any_of]
    detail = [f"family {fields['cpu family']} model {fields['model']}"] if "cpu family" in fields else []
    if isa:
        detail.append(" ".join(isa))
    return f"{name} ({'; '.join(detail)})" if detail else name


def _other_projects(root: Path) -> List[Path]:
    """The folders below `root` that are a CMake project or build of their own
    (a CMakeLists.txt or CMakeCache.txt there: a team's `ort/` kernel beside its
    TensorFlow one, an in-tree `build/`; or a folder of LiteRT op files,
    `litert/`, built into bridge's LiteRT kernels): their files do not go into
    `root`'s build (bridge's CMake files use no add_subdirectory)."""
    return [d for d in root.rglob("*") if d.is_dir() and ((d / "CMakeLists.txt").is_file()
                                                         or (d / "CMakeCache.txt").is_file() or is_litert_folder(d))]


@dataclass
class Build:
    """One CMake project to build into the cache."""

    name: str                      # e.g. "tf_ops"
    source_dir: Path               # the folder with CMakeLists.txt
    binds_to: str                  # e.g. "tf2.21.0": the framework version, in the folder name
    target_file: str               # the library file the build produces, e.g. libbridge_tf_ops.so
    options: Dict[str, str] = field(default_factory=dict)  # -D options for CMake
    portable: Optional[bool] = None  # True: no CPU flags; None: decided (cpu_flags.py)
    extra_sources: Iterable[Path] = ()  # files outside source_dir that the build reads
    describe: str = ""             # what the one-line message says is being built
    probe_source: str = ""         # a C++ file including the build's headers, compiled to pick the CPU flags
    probe_flags: List[str] = field(default_factory=list)  # compile flags the probe needs (include paths)
    target: str = ""               # what `bridge build` calls it, when not `name` (a team's folder)
    # options left out of the key: paths of files whose content extra_sources keys
    # (a team's folder in a new place, e.g. a test's tmp folder, is the same build)
    unkeyed: Tuple[str, ...] = ()

    @functools.cached_property
    def cpu(self) -> cpu_flags.CpuFlags:
        """The CPU flags of this build, chosen on first use (cpu_flags.decide keeps
        its probe per configuration on disk). `replace(build, ...)` chooses again."""
        if self.portable:
            return cpu_flags.CpuFlags([], "portable", reason="a portable build was asked for")
        return cpu_flags.forced() or cpu_flags.decide(
            cxx_compiler(), _compiler_id(cxx_compiler()), cpu_id(), self.probe_source, self.probe_flags,
            cache_root(), announce=lambda line: print(line, file=sys.stderr, flush=True),
            what=self.describe or self.name)

    def _sources(self):
        root = Path(self.source_dir)
        others = _other_projects(root)
        files = sorted(p for p in root.rglob("*")
                       if p.is_file() and p.suffix in (".cc", ".h", ".cu", ".cuh", ".txt", ".cmake", ".hpp", ".cpp")
                       and not any(p.is_relative_to(d) for d in others))
        return files + [Path(p) for p in self.extra_sources]

    def key(self) -> str:
        h = hashlib.sha256()
        for p in self._sources():
            h.update(str(p.relative_to(self.source_dir) if p.is_relative_to(self.source_dir) else p.name).encode())
            h.update(p.read_bytes())
        h.update(json.dumps(sorted((k, v) for k, v in self.options.items() if k not in self.unkeyed)).encode())
        h.update(_compiler_id(cxx_compiler()).encode())
        flags = self.cpu.flags
        h.update(json.dumps(flags).encode())
        if any("native" in f for f in flags):
            h.update(cpu_id().encode())  # "native" means something else on another CPU
        h.update(sys.version.encode())
        return h.hexdigest()[:16]

    def folder(self) -> Path:
        return cache_root() / f"{self.name}-{self.binds_to}-{self.cpu.mode}-{self.key()}"

    def _fallback_marker(self, final: Path) -> Path:
        return Path(str(final) + ".portable-fallback.json")

    def library(self, force: bool = False, quiet: bool = False) -> Path:
        """The built library, building it first when the cache has none. A
        build for this CPU that fails is retried once portable."""
        final = self.folder()
        lib = final / self.target_file
        if lib.exists() and not force:
            return lib
        marker = self._fallback_marker(final)
        if force:
            marker.unlink(missing_ok=True)
        elif marker.exists():
            fallback = replace(self, portable=True)
            fallback_lib = fallback.folder() / self.target_file
            if fallback_lib.exists():
                return fallback_lib
        final.parent.mkdir(parents=True, exist_ok=True)
        try:
            with open(str(final) + ".lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                if lib.exists() and not force:
                    return lib  # another process built it while we waited
                self._build(final, quiet)
            return lib
        except BuildError as native_error:
            if self.cpu.mode not in ("native", "reduced"):
                raise
            what = self.describe or self.name
            print(f"bridge: building {what} for this CPU ({' '.join(self.cpu.flags)}) failed; retrying "
                  f"portable (the failed build's log: {final}.log). BRIDGE_PORTABLE=1 always builds portable; "
                  f"BRIDGE_CPU_FLAGS=\"...\" forces the CPU flags", file=sys.stderr, flush=True)
            fallback = replace(self, portable=True)
            try:
                fallback_lib = fallback.library(force=force, quiet=quiet)
            except BuildError as portable_error:
                raise BuildError(f"{portable_error}\n(the build for this CPU failed too: see {final}.log)") \
                    from native_error
            _write_json(marker, {"failed": str(final), "portable": str(fallback_lib.parent),
                                 "cpu_flags": self.cpu.flags})
            return fallback_lib

    def _build(self, final: Path, quiet: bool) -> None:
        cmake = cmake_exe()
        cxx = cxx_compiler()
        what = self.describe or self.name
        cpu = self.cpu
        if not quiet:
            print(f"bridge: building {what} ({cpu_flags.describe(cpu)}) into {final} ...", file=sys.stderr,
                  flush=True)
        t0 = time.time()
        work = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
        try:
            gen = ["-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja_exe()}"] if ninja_exe() else []
            opts = {"CMAKE_BUILD_TYPE": "Release", "CMAKE_CXX_COMPILER": cxx,
                    "BRIDGE_CPU_FLAGS": ";".join(cpu.flags), **self.options}
            configure = [cmake, "-S", str(self.source_dir), "-B", str(work / "build"), *gen,
                         *[f"-D{k}={v}" for k, v in opts.items()]]
            jobs = str(max(1, min(os.cpu_count() or 1, 8)))
            steps = [configure, [cmake, "--build", str(work / "build"), "--parallel", jobs]]
            log = work / "build.log"
            with open(log, "w") as out:
                for cmd in steps:
                    out.write("$ " + " ".join(cmd) + "\n")
                    out.flush()
                    rc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT).returncode
                    if rc:
                        break
            built = next((p for p in (work / "build").rglob(self.target_file)), None)
            if rc or built is None:
                tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
                target = self.target or self.name
                fix = f"bridge build {target} --force"
                if cpu.flags:
                    fix += f" (or without CPU flags: bridge build {target} --portable --force)"
                raise BuildError(
                    f"building {what} failed (exit {rc}); the last lines of {final}.log:\n{tail}\n"
                    f"Fix the cause above, then run: {fix}")
            staged = work / "out"
            staged.mkdir()
            shutil.copy2(built, staged / self.target_file)
            _write_json(staged / "build-info.json",
                        {"name": self.name, "binds_to": self.binds_to, "cpu_mode": cpu.mode,
                         "cpu_flags": cpu.flags, "cpu_dropped": cpu.dropped, "cpu_reason": cpu.reason,
                         "cpu": cpu_name(), "machine": platform.machine(), "options": self.options,
                         "compiler": _compiler_id(cxx), "seconds": round(time.time() - t0, 1)})
            shutil.copy2(log, staged / "build.log")
            if final.exists():
                shutil.rmtree(final)
            os.replace(staged, final)
        except BuildError:
            shutil.copy2(work / "build.log", str(final) + ".log") if (work / "build.log").exists() else None
            raise
        finally:
            shutil.rmtree(work, ignore_errors=True)
        if not quiet:
            print(f"bridge: built {what} in {time.time() - t0:.0f} s", file=sys.stderr, flush=True)


def _write_json(path: Path, data: dict) -> None:
    tmp = Path(f"{path}.tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def read_build_info(library: Path) -> dict:
    try:
        return json.loads((Path(library).parent / "build-info.json").read_text())
    except (OSError, ValueError):
        return {}


# -- the project's two libraries ----------------------------------------------
# The recipes live here, not in their packages, so that `bridge build --force`
# can rebuild without first importing (and so loading) the library it replaces.

# What each build's CPU flags must compile (bridge/cpu_flags.py): the third-party
# headers its sources include, where a CPU feature can break them.
# The kernel cores (bridge/kernels/conv_gemm.h) include Eigen, whichever host
# builds them: a build of the cores probes it too, under the same flags.
CORES_PROBE = """#include <Eigen/Core>
int probe_cores() { Eigen::half h(1.0f); return static_cast<int>(static_cast<float>(h)); }
"""
TF_PROBE = """#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif
#include <unsupported/Eigen/CXX11/Tensor>
""" + CORES_PROBE
ORT_PROBE = """#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif
#define ORT_API_MANUAL_INIT
#include <onnxruntime_cxx_api.h>
#ifdef BRIDGE_HAVE_DNNL
#include <oneapi/dnnl/dnnl.hpp>
#endif
int probe() { return ORT_API_VERSION; }
"""


def _package_dir(package: str) -> Path:
    import importlib.util
    spec = importlib.util.find_spec(package)
    return Path(list(spec.submodule_search_locations)[0]).resolve()


def kernel_cores() -> List[Tuple[object, Path]]:
    """(spec, kernel.h) of every built-in op whose folder holds a kernel core
    (kernel.h beside its spec: bridge/ops/<module>/, or an op folder elsewhere on
    bridge.ops.__path__): the ops the generic hosts serve."""
    from bridge import ops
    folders = [(spec, ops.op_folder(spec)) for spec in ops.all_specs()]
    return [(spec, folder / "kernel.h") for spec, folder in folders
            if folder is not None and (folder / "kernel.h").is_file()]


def is_core_folder(folder) -> bool:
    """Whether a team's folder is one kernel core (`kernel.h`, no CMakeLists.txt):
    the generic hosts build its TensorFlow, onnxruntime and LiteRT kernels."""
    folder = Path(folder).expanduser()
    return folder.is_dir() and (folder / "kernel.h").is_file() and not (folder / "CMakeLists.txt").exists()


def team_core(folder) -> Tuple[object, Path]:
    """(spec, kernel.h) of a team's core folder: the registered team spec whose
    module is the folder's name."""
    from bridge import ops
    folder = Path(folder).expanduser().resolve()
    spec = next((s for s in ops.all_specs() if s.module == folder.name and not ops.is_builtin(s)), None)
    if spec is None:
        raise BuildError(f"{folder} is a kernel core (kernel.h) for the op whose spec has module "
                         f"'{folder.name}', and no such team spec is registered. Fix: give the spec with "
                         f"--op-spec FILE (its `module` must be '{folder.name}')")
    return spec, folder / "kernel.h"


def op_headers(cores: Optional[List[Tuple[object, Path]]] = None) -> Tuple[Path, List[Path]]:
    """The headers rendered from the specs (bridge/ops/cpp_header.py): those of
    the built-in ops with an adapter of their own and of the kernel cores
    (default: the built-ins'), with cores.h
    listing the cores, in a cache folder named by their content; and the files
    a build's key must cover (those headers and the cores)."""
    from bridge.ops import cpp_header
    from bridge import ops
    cores = kernel_cores() if cores is None else cores
    root = _package_dir("bridge")
    # The built-in ops with an adapter of their own (<module>.cc in a host folder) read their header too;
    # only those: a spec without native code must not change the builds' keys.
    adapters = {p.stem for d in (_tf_ops_dir(), _package_dir("bridge.litert") / "native",
                                 _tf_ops_dir().parent / "onnx_plugins" / "native") for p in d.glob("*.cc")}
    files = cpp_header.render_all([(spec, path.relative_to(root).as_posix() if path.is_relative_to(root)
                                    else str(path)) for spec, path in cores],
                                  [s for s in ops.all_specs() if ops.is_builtin(s) and s.module in adapters])
    digest = hashlib.sha256(json.dumps(sorted(files.items())).encode()).hexdigest()[:16]
    folder = cache_root() / f"op-headers-{digest}"
    if not (folder / "spec" / "cores.h").is_file():
        folder.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
        for rel, text in files.items():
            (work / rel).parent.mkdir(parents=True, exist_ok=True)
            (work / rel).write_text(text)
        try:
            os.replace(work, folder)
        except OSError:  # another process put the same headers there first
            shutil.rmtree(work, ignore_errors=True)
    return folder, sorted(folder.rglob("*.h")) + [path for _, path in cores]


def _with_cores(options: Dict[str, str], extra: List[Path],
                cores: Optional[List[Tuple[object, Path]]] = None) -> List[Path]:
    """Adds the rendered headers (BRIDGE_OPS_GEN_DIR) to a build's options; the
    files its key must cover, after `extra`."""
    folder, files = op_headers(cores)
    options["BRIDGE_OPS_GEN_DIR"] = str(folder)
    return [*extra, *files]


def core_build(folder, runtime: str, portable: Optional[bool] = None) -> "Build":
    """A team's kernel core built by one generic host: "tf" the TensorFlow op
    library (`--op-library DIR`), "ort" the onnxruntime library (`--ort-library
    DIR`), "litert" bridge's LiteRT kernels with the core added
    (`--litert-library DIR`: LiteRT takes one library per model). TensorFlow and
    onnxruntime load a team's library beside bridge's, so theirs hold the core alone."""
    spec, kernel = team_core(folder)
    folder = kernel.parent
    what = f"{spec.name}'s kernel core ({folder})"
    alone = {"BRIDGE_HOST_ONLY": "ON", "BRIDGE_LIBRARY_NAME": f"bridge_core_{spec.module}"}
    kernels = sorted((_package_dir("bridge") / "kernels").glob("*.h"))
    if runtime == "litert":
        base = litert_build(portable=portable)
        options = dict(base.options)
        extra = _with_cores(options, [*kernels, _tf_ops_dir() / "cpu" / "native.cmake"],
                            [*kernel_cores(), (spec, kernel)])
        return replace(base, name=f"litertcore-{spec.module}", options=options, extra_sources=extra,
                       target=str(folder), describe=f"the LiteRT kernels with {what} for ai-edge-litert "
                                                    f"{litert_version()}")
    if runtime == "tf":
        base, extra = tf_ops_build(portable=portable), kernels
    elif runtime == "ort":
        base = ort_build(portable=portable)
        extra = [p for p in base.extra_sources if p.parent.name != "spec" and p.name != "kernel.h"]
    else:
        raise ValueError(f"runtime {runtime!r} is not tf, ort or litert")
    options = {**base.options, **alone}
    extra = _with_cores(options, extra, [(spec, kernel)])
    return replace(base, name=f"{runtime}core-{spec.module}", target_file=f"libbridge_core_{spec.module}.so",
                   options=options, extra_sources=extra, target=str(folder),
                   describe=f"the {'TensorFlow' if runtime == 'tf' else 'onnxruntime'} kernel of {what}")


def tf_ops_build(cuda: bool = False, portable: Optional[bool] = None) -> Build:
    """The TensorFlow op library, bound to the installed TensorFlow."""
    import tensorflow as tf
    options = {
        "TF_COMPILE_FLAGS": ";".join(tf.sysconfig.get_compile_flags()),
        "TF_LINK_FLAGS": ";".join(tf.sysconfig.get_link_flags()),
        "TF_LIB_DIR": tf.sysconfig.get_lib(),
        "BRIDGE_CUDA": "ON" if cuda else "OFF",
    }
    if cuda:
        options.update(tf_gpu_options())
    dnnl = onednn_root()
    if dnnl:
        options["BRIDGE_DNNL_ROOT"] = str(dnnl)
    kernels = _package_dir("bridge") / "kernels"  # the framework-free cores, shared with ort_build
    options["BRIDGE_KERNELS_DIR"] = str(kernels)
    extra = _with_cores(options, sorted(kernels.glob("*.h")) + (cuda_core_files(TF_GPU_SOURCE) if cuda else []))
    return Build(name="tf_ops", source_dir=_package_dir("bridge.tf_ops"), binds_to=f"tf{tf.__version__}",
                 target_file="libbridge_tf_ops.so", options=options, extra_sources=extra,
                 describe=f"the TensorFlow ops for TensorFlow {tf.__version__}",
                 probe_source=TF_PROBE, probe_flags=list(tf.sysconfig.get_compile_flags()), portable=portable)


def op_library_build(folder, portable: Optional[bool] = None) -> Build:
    """A team's TensorFlow op library from its CMake folder (`--op-library DIR`,
    `bridge build DIR`), built like bridge's own: against the installed
    TensorFlow's flags, cached per TensorFlow version, compiler and CPU. The
    library is the folder's first `add_library(NAME SHARED ...)`."""
    if is_core_folder(folder):
        return core_build(folder, "tf", portable=portable)
    import tensorflow as tf
    folder, name = _team_folder(folder)
    options = {
        "TF_COMPILE_FLAGS": ";".join(tf.sysconfig.get_compile_flags()),
        "TF_LINK_FLAGS": ";".join(tf.sysconfig.get_link_flags()),
        "TF_LIB_DIR": tf.sysconfig.get_lib(),
    }
    return Build(name=f"oplib-{name}", source_dir=folder, binds_to=f"tf{tf.__version__}",
                 target_file=f"lib{name}.so", options=options, target=str(folder),
                 describe=f"the op library {name} ({folder}) for TensorFlow {tf.__version__}",
                 probe_source=TF_PROBE, probe_flags=list(tf.sysconfig.get_compile_flags()), portable=portable)


def _team_folder(folder) -> Tuple[Path, str]:
    """(the folder, the name of its first `add_library(NAME SHARED ...)`)."""
    import re
    folder = Path(folder).expanduser().resolve()
    cmake_file = folder / "CMakeLists.txt"
    if not cmake_file.is_file():
        raise BuildError(f"{folder} has no CMakeLists.txt (give the library's .so, or its CMake folder)")
    m = re.search(r"add_library\(\s*([A-Za-z0-9_\-]+)\s+SHARED", cmake_file.read_text(errors="replace"))
    if not m:
        raise BuildError(f"{cmake_file} has no add_library(NAME SHARED ...): bridge builds the shared library "
                         f"it names")
    return folder, m.group(1)


def is_ort_folder(folder) -> bool:
    """Whether a team's CMake folder builds an onnxruntime library (it asks for
    ORT_INCLUDE_DIR) rather than a TensorFlow one."""
    cmake_file = Path(folder).expanduser() / "CMakeLists.txt"
    return cmake_file.is_file() and "ORT_INCLUDE_DIR" in cmake_file.read_text(errors="replace")


def is_litert_folder(folder) -> bool:
    """Whether a folder holds a team's LiteRT op files (`--litert-library DIR`):
    no CMakeLists.txt, and .cc files that register an op with bridge's Node API."""
    folder = Path(folder).expanduser()
    return (folder.is_dir() and not (folder / "CMakeLists.txt").exists()
            and any("register_op" in p.read_text(errors="replace") for p in folder.glob("*.cc")))


def team_library_build(folder, portable: Optional[bool] = None) -> "Build":
    """`bridge build DIR`: a team's LiteRT op files, or its onnxruntime or
    TensorFlow library, by what its CMake file asks for."""
    if is_litert_folder(folder):
        return litert_library_build(folder, portable=portable)
    return (ort_library_build if is_ort_folder(folder) else op_library_build)(folder, portable=portable)


def ort_library_build(folder, portable: Optional[bool] = None) -> "Build":
    """A team's onnxruntime custom-op library from its CMake folder
    (`--ort-library DIR`, `bridge build DIR`), built like bridge's own
    (ort_build): against onnxruntime's C headers (ORT_INCLUDE_DIR), with the
    CPU target of tf_ops/cpu/native.cmake (BRIDGE_CPU_CMAKE), cached per API
    version, compiler and CPU."""
    if is_core_folder(folder):
        return core_build(folder, "ort", portable=portable)
    from bridge import ort_headers
    folder, name = _team_folder(folder)
    include = _ort_include(fetch=True)
    cpu_cmake = _package_dir("bridge.tf_ops") / "cpu" / "native.cmake"
    version = ort_headers.api_version(include)
    return Build(name=f"ortlib-{name}", source_dir=folder, binds_to=f"ort{version}", target_file=f"lib{name}.so",
                 options={"ORT_INCLUDE_DIR": str(include), "BRIDGE_CPU_CMAKE": str(cpu_cmake)}, target=str(folder),
                 extra_sources=[include / ort_headers.MAIN_HEADER, cpu_cmake],
                 describe=f"the onnxruntime library {name} ({folder}) for onnxruntime API {version}",
                 probe_source=ORT_PROBE, probe_flags=[f"-I{include}"], portable=portable)


def onednn_root() -> Optional[Path]:
    """A oneDNN install the convolution kernels can use, or None (Eigen then).
    `BRIDGE_DNNL_ROOT` names one; `BRIDGE_DNNL_ROOT=` (empty) turns it off."""
    env = os.environ.get("BRIDGE_DNNL_ROOT")
    if env is not None:
        return Path(env) if env else None
    for root in (Path(sys.prefix), Path("/usr")):
        if (root / "include" / "oneapi" / "dnnl" / "dnnl.hpp").exists() and \
                any(root.glob("lib*/**/libdnnl.so*")):
            return root
    return None


def eigen_include() -> Path:
    """A folder holding Eigen/Core for the libraries whose framework brings no
    Eigen (onnxruntime's, LiteRT's): `BRIDGE_EIGEN_INCLUDE`, Debian's
    libeigen3-dev, else the installed TensorFlow's headers (found, not imported)."""
    import importlib.util
    env = os.environ.get("BRIDGE_EIGEN_INCLUDE")
    candidates = [Path(env)] if env else [Path("/usr/include/eigen3")]
    if not env:
        tf = importlib.util.find_spec("tensorflow")
        if tf is not None and tf.submodule_search_locations:
            candidates.append(Path(list(tf.submodule_search_locations)[0]) / "include")
    for folder in candidates:
        if (folder / "Eigen" / "Core").is_file():
            return folder
    raise BuildError(f"no Eigen headers (Eigen/Core) in {', '.join(map(str, candidates))}: the kernel cores need them "
                     f"(YoloConvBnLeaky's GEMM road). Fix: apt-get install libeigen3-dev (or pip install tensorflow, "
                     f"whose headers carry Eigen), or BRIDGE_EIGEN_INCLUDE=DIR naming a folder with Eigen/Core")


def _ort_include(fetch: bool) -> Optional[Path]:
    """onnxruntime's C headers: found (ORT_INCLUDE_DIR, the cache), else fetched
    into the cache when `fetch`, else None."""
    from bridge import ort_headers
    include = ort_headers.find(cache_root())
    if include is None and fetch:
        try:
            include = ort_headers.fetch(cache_root())
        except ort_headers.HeaderError as e:
            raise BuildError(str(e)) from e
    return include


def ort_build(portable: Optional[bool] = None, fetch: bool = True) -> Optional[Build]:
    """The onnxruntime custom-op library (onnx_plugins/native), built against
    onnxruntime's C headers: `ORT_INCLUDE_DIR`, or Debian's libonnxruntime-dev
    fetched into the cache (bridge/ort_headers.py). It binds to the
    headers' API version and loads into every onnxruntime that serves it.
    With fetch=False, returns None instead of fetching missing headers."""
    from bridge import ort_headers
    include = _ort_include(fetch)
    if include is None:
        return None
    source = _package_dir("bridge.onnx_plugins") / "native"
    # The framework-free cores (bridge/kernels) are shared with the TensorFlow kernels,
    # and so is tf_ops/cpu/native.cmake.
    tf_ops_dir = _package_dir("bridge.tf_ops")
    kernels = _package_dir("bridge") / "kernels"
    options = {"ORT_INCLUDE_DIR": str(include), "BRIDGE_TF_OPS_DIR": str(tf_ops_dir),
               "BRIDGE_KERNELS_DIR": str(kernels), "BRIDGE_EIGEN_INCLUDE": str(eigen_include())}
    dnnl = onednn_root()
    if dnnl:
        options["BRIDGE_DNNL_ROOT"] = str(dnnl)
    extra = _with_cores(options, [include / ort_headers.MAIN_HEADER, *sorted((tf_ops_dir / "cpu").glob("*")),
                                  *sorted(kernels.glob("*.h"))])
    return Build(name="ort", source_dir=source, binds_to=f"ort{ort_headers.api_version(include)}",
                 target_file="libbridge_ort_ops.so", options=options, extra_sources=extra,
                 describe="the onnxruntime kernels", probe_source=ORT_PROBE + CORES_PROBE,
                 probe_flags=[f"-I{include}", f"-isystem{options['BRIDGE_EIGEN_INCLUDE']}"]
                 + ([f"-I{dnnl / 'include'}", "-DBRIDGE_HAVE_DNNL=1"] if dnnl else []),
                 portable=portable)


# ai-edge-litert versions the LiteRT kernels were checked against; another one
# is built and self-tested (litert/runtime.py) but named in a warning.
LITERT_KNOWN = ("2.3.0",)


def litert_library() -> Path:
    """The libLiteRt.so to build against: `BRIDGE_LITERT_LIB`, else the ai-edge-litert wheel's."""
    env = os.environ.get("BRIDGE_LITERT_LIB")
    if env:
        return Path(env)
    import importlib.util
    spec = importlib.util.find_spec("ai_edge_litert")  # finds, does not import
    if spec is None or not spec.submodule_search_locations:
        raise BuildError("ai-edge-litert is not installed (the LiteRT kernels link its libLiteRt.so). "
                         "Fix: pip install ai-edge-litert")
    return Path(list(spec.submodule_search_locations)[0]) / "libLiteRt.so"


def litert_version() -> str:
    from importlib import metadata
    try:
        return metadata.version("ai-edge-litert")
    except metadata.PackageNotFoundError:
        return "unknown"


def litert_declared(header: Path) -> List[str]:
    """The LiteRT functions bridge's own header declares (one per line)."""
    import re
    return re.findall(r"^(?:LiteRtStatus|void) (LiteRt\w+)\(", header.read_text(), re.M)


def litert_missing_symbols(library: Path, names: Iterable[str]) -> List[str]:
    """The names `library` does not export (nm -D --defined-only)."""
    try:
        out = subprocess.run(["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True,
                             timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        raise BuildError(f"could not list the symbols of {library} with nm: {e}. Fix: apt-get install binutils") from e
    if out.returncode:
        raise BuildError(f"nm could not read {library}: {out.stderr.strip()[:300]}")
    exported = {line.split()[-1].split("@")[0] for line in out.stdout.splitlines() if line.strip()}
    return [n for n in names if n not in exported]


def litert_build(portable: Optional[bool] = None) -> Build:
    """bridge's LiteRT custom-op kernels (litert/native), linked against
    the installed libLiteRt.so, bound to its ai-edge-litert version. Checks
    first that the library exports every function litert/native/litert_c_api.h
    declares; the self-test model runs on first use (litert/runtime.py)."""
    source = _package_dir("bridge.litert") / "native"
    lib = litert_library()
    version = litert_version()
    if not lib.exists():
        raise BuildError(f"{lib} does not exist (ai-edge-litert {version}). Fix: pip install ai-edge-litert, "
                         f"or point BRIDGE_LITERT_LIB at a libLiteRt.so")
    missing = litert_missing_symbols(lib, litert_declared(source / "litert_c_api.h"))
    if missing:
        raise BuildError(
            f"ai-edge-litert {version}'s {lib.name} ({lib}) does not export {', '.join(missing)}, which bridge's "
            f"LiteRT kernels call (declared in litert/native/litert_c_api.h; known to work with ai-edge-litert "
            f"{', '.join(LITERT_KNOWN)}). Fix: pip install ai-edge-litert=={LITERT_KNOWN[-1]}; --mode lowered runs "
            f"on any LiteRT")
    if version not in LITERT_KNOWN:
        print(f"bridge: ai-edge-litert {version} is not one the LiteRT kernels were checked with "
              f"({', '.join(LITERT_KNOWN)}); its self-test decides", file=sys.stderr, flush=True)
    tf_ops_dir = _tf_ops_dir()
    kernels = _package_dir("bridge") / "kernels"
    options = {"LITERT_LIBRARY": str(lib), "BRIDGE_KERNELS_DIR": str(kernels), "BRIDGE_TF_OPS_DIR": str(tf_ops_dir),
               "BRIDGE_EIGEN_INCLUDE": str(eigen_include())}
    dnnl = onednn_root()
    if dnnl:
        options["BRIDGE_DNNL_ROOT"] = str(dnnl)
    probe = "#if defined(__x86_64__)\n#include <immintrin.h>\n#endif\n" + \
            ("#include <oneapi/dnnl/dnnl.hpp>\n" if dnnl else "") + "int probe() { return 0; }\n" + CORES_PROBE
    extra = _with_cores(options, [*sorted(kernels.glob("*.h")), tf_ops_dir / "cpu" / "native.cmake"])
    return Build(name="tflite", source_dir=source, binds_to=f"litert{version}", target_file="libbridge_litert_ops.so",
                 options=options, extra_sources=extra,
                 describe=f"the LiteRT kernels for ai-edge-litert {version}", probe_source=probe,
                 probe_flags=[f"-isystem{options['BRIDGE_EIGEN_INCLUDE']}"] + ([f"-I{dnnl / 'include'}"] if dnnl else []),
                 portable=portable)


def litert_library_build(folder, portable: Optional[bool] = None) -> Build:
    """bridge's LiteRT kernels with a team's op files added (`--litert-library
    DIR`, `bridge build DIR`): every DIR/*.cc registers one op through
    litert/native/common.h, like bridge's own op files, and is compiled
    into the same library (BRIDGE_EXTRA_OP_SOURCES), cached apart from bridge's
    own build and keyed by the team files too."""
    if is_core_folder(folder):
        return core_build(folder, "litert", portable=portable)
    import re
    folder = Path(folder).expanduser().resolve()
    sources = sorted(folder.glob("*.cc"))
    if not folder.is_dir() or not sources:
        raise BuildError(f"{folder} has no .cc files (a LiteRT op folder holds one .cc per op, written against "
                         f"litert/native/common.h)")
    if ";" in str(folder):  # CMake would split the list of sources there
        raise BuildError(f"{folder}: a LiteRT op folder's path cannot contain ';'")
    base = litert_build(portable=portable)
    name = re.sub(r"[^A-Za-z0-9_]+", "_", "-".join(p.stem for p in sources))[:60]
    return replace(base, name=f"litertlib-{name}", target=str(folder),
                   options={**base.options, "BRIDGE_EXTRA_OP_SOURCES": ";".join(map(str, sources))},
                   extra_sources=[*base.extra_sources, *sources, *sorted(folder.glob("*.h"))],
                   unkeyed=("BRIDGE_EXTRA_OP_SOURCES",),
                   describe=f"the LiteRT kernels with {folder}'s ops for ai-edge-litert {litert_version()}")

# -- CUDA ---------------------------------------------------------------------

def nvcc_exe() -> str:
    """nvcc: `CUDACXX`, else PATH, else `CUDA_HOME`/`CUDA_PATH`, else /usr/local/cuda."""
    candidates = [os.environ.get("CUDACXX"), shutil.which("nvcc")]
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home:
            candidates.append(str(Path(home) / "bin" / "nvcc"))
    for c in candidates:
        if c and Path(c).is_file() and os.access(c, os.X_OK):
            return c
    raise BuildError("nvcc (the CUDA compiler) not found. Fix: install the CUDA toolkit and put its bin/ on "
                     "PATH, or set CUDACXX to nvcc")


def nvcc_version(nvcc: Optional[str] = None) -> str:
    """'13.0' from `nvcc --version`."""
    nvcc = nvcc or nvcc_exe()
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as e:
        raise BuildError(f"{nvcc} --version failed: {e}") from e
    import re
    m = re.search(r"release (\d+\.\d+)", out)
    if m:
        return m.group(1)
    raise BuildError(f"could not read the CUDA release from `{nvcc} --version`:\n{out}")


def cuda_include(nvcc: Optional[str] = None) -> Optional[Path]:
    """The toolkit's include folder (cuda_runtime.h), found through nvcc's own
    description of its include path, else next to nvcc."""
    nvcc = nvcc or nvcc_exe()
    try:
        out = subprocess.run([nvcc, "-v", "--dryrun", "-x", "cu", "-c", os.devnull], capture_output=True,
                             text=True, timeout=60).stderr
        for line in out.splitlines():
            if "INCLUDES=" in line:
                for part in line.split("INCLUDES=", 1)[1].replace('"', " ").split():
                    if part.startswith("-I") and (Path(part[2:]) / "cuda_runtime.h").exists():
                        return Path(part[2:]).resolve()
    except (OSError, subprocess.SubprocessError):
        pass
    guess = Path(nvcc).resolve().parent.parent / "include"
    return guess if (guess / "cuda_runtime.h").exists() else None


def cublas_include(nvcc: Optional[str] = None) -> Path:
    """A folder with cublasLt.h: `BRIDGE_CUBLAS_INCLUDE`, the toolkit's, a pip
    `nvidia-cublas*` package's, or the TensorFlow wheel's headers-only copy (the
    kernels load the library at run time, so headers are all a build needs)."""
    env = os.environ.get("BRIDGE_CUBLAS_INCLUDE")
    candidates = [Path(env)] if env else []
    try:
        toolkit = cuda_include(nvcc)
    except BuildError:  # no nvcc: the emulator build still finds pip's or TensorFlow's copy
        toolkit = None
    if toolkit:
        candidates.append(toolkit)
    import importlib.util
    for entry in sys.path:
        candidates.extend(sorted(Path(entry or ".").glob("nvidia/*/include")))
    try:
        tf_spec = importlib.util.find_spec("tensorflow")  # finds, does not import
        if tf_spec and tf_spec.submodule_search_locations:
            root = Path(list(tf_spec.submodule_search_locations)[0])
            candidates.append(root / "include" / "external" / "cuda_cublas" / "include")
    except (ImportError, ValueError):
        pass
    for c in candidates:
        if (c / "cublasLt.h").exists():
            return c.resolve()
    raise BuildError("cublasLt.h not found (the YoloConvBnLeaky CUDA kernel multiplies with cuBLASLt). Fix: pip "
                     "install nvidia-cublas (or the CUDA toolkit's libcublas-dev), or set BRIDGE_CUBLAS_INCLUDE to "
                     "a folder holding cublasLt.h")


def cuda_archs() -> str:
    """CMake's CUDA_ARCHITECTURES: `BRIDGE_CUDA_ARCHS`, else 90 (Hopper: H100, H200)."""
    return os.environ.get("BRIDGE_CUDA_ARCHS") or "90"


def cuda_options() -> Dict[str, str]:
    nvcc = nvcc_exe()
    return {"CMAKE_CUDA_COMPILER": nvcc, "CMAKE_CUDA_ARCHITECTURES": cuda_archs(),
            "BRIDGE_CUBLAS_INCLUDE": str(cublas_include(nvcc))}


# What an op folder's CUDA core holds (bridge/ops/<module>/): the kernels (kernel.cuh,
# and any other .cuh they include), the TensorFlow GPU kernels, the harness's C entry
# points and their Python companion (bridge/cuda.py reads it).
CUDA_CORE = "kernel.cuh"
TF_GPU_SOURCE = "tf_gpu.cu.cc"
HARNESS_SOURCE = "cuda_harness.cu"
HARNESS_COMPANION = "cuda_harness.py"


def cuda_cores() -> List[Tuple[object, Path]]:
    """(spec, folder) of every built-in op whose folder (bridge.ops.op_folder:
    bridge/ops/<module>/) holds a CUDA core, kernel.cuh: the ops the CUDA hosts
    (TensorFlow's GPU build, the harness, the emulator) serve."""
    from bridge import ops
    folders = [(spec, ops.op_folder(spec)) for spec in ops.all_specs()]
    return [(spec, folder) for spec, folder in folders if folder is not None and (folder / CUDA_CORE).is_file()]


def cuda_sources(name: str) -> List[Path]:
    """The file `name` (TF_GPU_SOURCE, HARNESS_SOURCE) of every CUDA core that has one."""
    return [folder / name for _, folder in cuda_cores() if (folder / name).is_file()]


def cuda_core_files(source: str) -> List[Path]:
    """The CUDA cores' kernels (every .cuh of their folders) and their file `source`:
    what the key of a CUDA build from those sources covers."""
    return sorted(p for _, folder in cuda_cores() for p in folder.glob("*.cuh")) + cuda_sources(source)


def _cmake_list(paths: Iterable[Path]) -> str:
    paths = [str(p) for p in paths]
    bad = [p for p in paths if ";" in p]
    if bad:  # CMake would split the list there
        raise BuildError(f"a CUDA source's path cannot contain ';': {bad[0]}")
    return ";".join(paths)


def tf_gpu_options() -> Dict[str, str]:
    """cuda_options() and the TensorFlow GPU kernels of the CUDA cores (BRIDGE_TF_GPU_SOURCES)."""
    return {**cuda_options(), "BRIDGE_TF_GPU_SOURCES": _cmake_list(cuda_sources(TF_GPU_SOURCE))}


def _tf_ops_dir() -> Path:
    """tf_ops/, also where the project is not installed (a bare checkout on a GPU
    machine without TensorFlow)."""
    try:
        return _package_dir("bridge.tf_ops")
    except (ImportError, AttributeError, TypeError):
        return Path(__file__).resolve().parent.parent / "tf_ops"


def cuda_harness_build() -> Build:
    """The CUDA cores' kernels behind a C ABI (tf_ops/cuda_harness/harness.cu and
    each core's cuda_harness.cu), bound to the CUDA release of nvcc. Needs no
    TensorFlow. Portable: it has no host-CPU flags."""
    options = {**cuda_options(), "BRIDGE_HARNESS_SOURCES": _cmake_list(cuda_sources(HARNESS_SOURCE))}
    source = _tf_ops_dir() / "cuda_harness"
    return Build(name="cuda_harness", source_dir=source, binds_to=f"cuda{nvcc_version(options['CMAKE_CUDA_COMPILER'])}",
                 target_file="libbridge_cuda_harness.so", options=options, portable=True,
                 extra_sources=sorted((source.parent / "cuda").glob("*")) + cuda_core_files(HARNESS_SOURCE),
                 describe="the CUDA kernel harness")


def cuda_headers() -> Path:
    """The CUDA runtime's headers (cuda_runtime.h) without needing a GPU:
    `BRIDGE_CUDA_INCLUDE`, else nvcc's include folder, else a pip nvidia-* package's."""
    env = os.environ.get("BRIDGE_CUDA_INCLUDE")
    candidates = [Path(env)] if env else []
    try:
        found = cuda_include()
        if found:
            candidates.append(found)
    except BuildError:
        pass
    for entry in sys.path:
        candidates.extend(sorted(Path(entry or ".").glob("nvidia/*/include")))
    for c in candidates:
        if (c / "cuda_runtime.h").exists() and (c / "cuda_fp16.h").exists():
            return c.resolve()
    raise BuildError("the CUDA headers (cuda_runtime.h, cuda_fp16.h) were not found. Fix: install the CUDA "
                     "toolkit (nvcc on PATH) or pip install nvidia-cuda-runtime, or set BRIDGE_CUDA_INCLUDE "
                     "to a folder holding cuda_runtime.h")


def cuda_emulator_build() -> Build:
    """The same CUDA kernels and C-ABI harness compiled as C++ for the CPU
    emulator (tf_ops/cuda_emulator): needs the CUDA headers and cublasLt.h, not
    nvcc nor a GPU. Portable: it has no host-CPU flags."""
    include = cuda_headers()
    source = _tf_ops_dir() / "cuda_emulator"
    version = "unknown"
    header = (include / "cuda_runtime_api.h").read_text(errors="replace") if (include / "cuda_runtime_api.h").exists() else ""
    import re
    m = re.search(r"#define CUDART_VERSION\s+(\d+)", header)
    if m:
        v = int(m.group(1))
        version = f"{v // 1000}.{v % 1000 // 10}"
    return Build(name="cuda_emulator", source_dir=source, binds_to=f"cuda{version}-headers",
                 target_file="libbridge_cuda_emulator.so",
                 options={"BRIDGE_CUDA_INCLUDE": str(include), "BRIDGE_CUBLAS_INCLUDE": str(cublas_include()),
                          "BRIDGE_HARNESS_SOURCES": _cmake_list(cuda_sources(HARNESS_SOURCE))},
                 portable=True,
                 extra_sources=sorted((source.parent / "cuda").glob("*"))
                 + sorted((source.parent / "cuda_harness").glob("*.cu*")) + cuda_core_files(HARNESS_SOURCE),
                 describe="the CUDA kernels for the CPU emulator")
