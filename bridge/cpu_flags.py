"""Which instruction-set flags a native build uses on this CPU.

`-march=native` is the fast default, but "native" is decided by the compiler
from the CPU, and not every header compiles under every feature the CPU has
(TensorFlow 2.21's bundled Eigen fails under g++ 12 with AVX512-FP16, which
Sapphire Rapids has and Zen 4 has not). So the flags are decided by what
actually compiles: a probe file that includes the build's own headers is
compiled with each candidate from a ladder, fastest first, and the first that
compiles wins:

    x86-64:  -march=native
             -march=native -mno-<feature>...   (features from a short list, only
                                                those the compiler says it enables)
             -march=x86-64-v4 / v3 / v2
             (no flags: portable)
    aarch64: -mcpu=native, -march=native, (no flags)

The ladder is a pure function of the machine name and the compiler's predefined
macros (`ladder`), and the choice a pure function of the ladder and a probe
(`choose`), so both are tested without a compiler. The outcome is cached per
compiler, CPU and probe, so the probe runs once per configuration.

Overrides: `BRIDGE_CPU_FLAGS="-march=... ..."` uses exactly those flags (no
probe); `BRIDGE_PORTABLE=1` (or `bridge build --portable`) uses none.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import shlex
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterable, List, Optional, Sequence, Tuple

# Features that -march=native may turn on and that third-party headers have been
# seen to break on, newest first: (predefined macro, flag that turns it off, name).
DROPPABLE: Tuple[Tuple[str, str, str], ...] = (
    ("__AVX512FP16__", "-mno-avx512fp16", "AVX512-FP16"),
    ("__AMX_TILE__", "-mno-amx-tile", "AMX"),
    ("__AVX512BF16__", "-mno-avx512bf16", "AVX512-BF16"),
    ("__AVXVNNI__", "-mno-avxvnni", "AVX-VNNI"),
)

# The cores oneDNN's f32 brgemm needs (avx512_core), as /proc/cpuinfo names them: the batched
# GEMMs of YoloConvBnLeaky's Winograd road; without them its convolutions are oneDNN's AVX2 ones
AVX512_CORE = frozenset({"avx512f", "avx512bw", "avx512vl", "avx512dq"})
# int8 x int8 dot products in one instruction (onnxruntime's fast int8 GEMMs)
VNNI = frozenset({"avx512_vnni", "avx_vnni"})


@functools.lru_cache(maxsize=1)
def cpu_features() -> frozenset:
    """This CPU's feature flags as /proc/cpuinfo names them (x86: "avx2",
    "avx512f", ...; aarch64: "asimd", ...); empty where it cannot be read."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def has_avx512_core() -> bool:
    return AVX512_CORE <= cpu_features()


def has_vnni() -> bool:
    return bool(VNNI & cpu_features())


# x86-64 micro-architecture levels below native: (flag, a macro the level implies).
X86_LEVELS: Tuple[Tuple[str, str], ...] = (
    ("-march=x86-64-v4", "__AVX512F__"),
    ("-march=x86-64-v3", "__AVX2__"),
    ("-march=x86-64-v2", "__SSE4_2__"),
)


@dataclass(frozen=True)
class Candidate:
    flags: Tuple[str, ...]
    dropped: Tuple[str, ...] = ()   # feature names turned off against -march=native


@dataclass
class CpuFlags:
    """The flags a build uses and how they were decided."""

    flags: List[str]
    mode: str                       # "native", "reduced", "portable" or "forced"
    dropped: List[str] = field(default_factory=list)
    reason: str = ""                # one line for the user when not plain native
    tried: List[str] = field(default_factory=list)  # candidates that did not compile

    def to_json(self) -> dict:
        return asdict(self)

    @property
    def portable(self) -> bool:
        return self.mode == "portable"


def is_x86(machine: str) -> bool:
    return machine.lower() in ("x86_64", "amd64", "i386", "i686", "x86")


def is_arm64(machine: str) -> bool:
    return machine.lower() in ("aarch64", "arm64", "armv8l", "armv8", "armv9")


def ladder(machine: str, native_macros: Iterable[str]) -> List[Candidate]:
    """Candidate flag sets for `machine`, fastest first; the last is always no flags.
    `native_macros`: the macros the compiler predefines under the native flag
    (empty when unknown)."""
    macros = set(native_macros)
    out: List[Candidate] = []
    if is_x86(machine):
        out.append(Candidate(("-march=native",)))
        dropped_flags: List[str] = []
        dropped_names: List[str] = []
        for macro, flag, name in DROPPABLE:
            if macro in macros:
                dropped_flags.append(flag)
                dropped_names.append(name)
                out.append(Candidate(("-march=native", *dropped_flags), tuple(dropped_names)))
        for flag, implied in X86_LEVELS:
            if not macros or implied in macros:
                out.append(Candidate((flag, "-mtune=native")))
    elif is_arm64(machine):
        # GCC and Clang on aarch64 both take -mcpu=native; older GCCs refuse -march=native.
        out.append(Candidate(("-mcpu=native",)))
        out.append(Candidate(("-march=native",)))
    else:
        out.append(Candidate(("-mcpu=native",)))
    out.append(Candidate(()))
    return out


def choose(candidates: Sequence[Candidate], compiles: Callable[[Sequence[str]], bool]) -> CpuFlags:
    """The first candidate that `compiles`; the empty one needs no probe."""
    tried: List[str] = []
    for i, c in enumerate(candidates):
        if c.flags and not compiles(list(c.flags)):
            tried.append(" ".join(c.flags))
            continue
        if i == 0:
            return CpuFlags(list(c.flags), "native" if c.flags else "portable")
        mode = "portable" if not c.flags else "reduced"
        used = " ".join(c.flags) or "no CPU flags"
        reason = (f"{tried[0]} does not compile the build's headers on this CPU; using {used}"
                  + (f" ({', '.join(c.dropped)} off)" if c.dropped else ""))
        return CpuFlags(list(c.flags), mode, list(c.dropped), reason, tried)
    return CpuFlags([], "portable", reason="no CPU flag set compiled", tried=tried)


def predefined_macros(cxx: str, flags: Sequence[str]) -> List[str]:
    """The macros `cxx` predefines under `flags` (empty if the flags are refused)."""
    try:
        out = subprocess.run([cxx, *flags, "-dM", "-E", "-x", "c++", os.devnull],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return []
    if out.returncode:
        return []
    return [line.split()[1] for line in out.stdout.splitlines() if line.startswith("#define ")]


def probe_compiles(cxx: str, probe_source: str, extra: Sequence[str]) -> Callable[[Sequence[str]], bool]:
    """A `compiles(flags)` that syntax-checks `probe_source` with `extra` + flags."""
    def compiles(flags: Sequence[str]) -> bool:
        with tempfile.TemporaryDirectory(prefix="bridge-probe-") as d:
            src = Path(d) / "probe.cc"
            src.write_text(probe_source)
            try:
                done = subprocess.run([cxx, "-std=c++17", *extra, *flags, "-fsyntax-only", str(src)],
                                      capture_output=True, text=True, timeout=300)
            except (OSError, subprocess.SubprocessError):
                return False
            return done.returncode == 0
    return compiles


def forced() -> Optional[CpuFlags]:
    """`BRIDGE_CPU_FLAGS` or `BRIDGE_PORTABLE=1`, when the user set either."""
    env = os.environ.get("BRIDGE_CPU_FLAGS")
    if env is not None:
        return CpuFlags(shlex.split(env), "forced", reason=f"BRIDGE_CPU_FLAGS={env!r}")
    if os.environ.get("BRIDGE_PORTABLE", "") not in ("", "0", "false", "no"):
        return CpuFlags([], "portable", reason="BRIDGE_PORTABLE is set")
    return None


def decide(cxx: str, compiler_id: str, cpu_id: str, probe_source: str, probe_flags: Sequence[str],
           cache: Path, machine: Optional[str] = None, announce: Callable[[str], None] = None,
           what: str = "") -> CpuFlags:
    """The flags for one build on this machine: cached, else probed (and, when
    they are not plain native, announced in one line)."""
    machine = machine or platform.machine()
    key = hashlib.sha256(json.dumps([compiler_id, cpu_id, machine, probe_source, list(probe_flags)]).encode())
    path = cache / f"cpu-flags-{key.hexdigest()[:16]}.json"
    try:
        return CpuFlags(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        pass
    native = ladder(machine, [])[0].flags
    candidates = ladder(machine, predefined_macros(cxx, native))
    choice = choose(candidates, probe_compiles(cxx, probe_source, probe_flags))
    if choice.mode != "native" and announce:
        announce(f"bridge: {what}: {choice.reason}" if what else f"bridge: {choice.reason}")
    cache.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(choice.to_json()))
    os.replace(tmp, path)
    return choice


def describe(choice: CpuFlags) -> str:
    flags = " ".join(choice.flags) or "no CPU flags"
    return {"native": f"for this CPU ({flags})", "reduced": f"for this CPU ({flags})",
            "portable": "portable", "forced": f"with {flags} (BRIDGE_CPU_FLAGS)"}[choice.mode]
