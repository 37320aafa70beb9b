"""The CPU flags of the native builds: decided by what compiles, recorded, and a
failed build for this CPU retried portable (bridge/cpu_flags.py, bridge/native.py)."""
from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bridge import cpu_flags, native

# What g++ 12 predefines under -march=native on the two CPU kinds these machines had.
ZEN4 = ["__AVX512F__", "__AVX512BF16__", "__AVX2__", "__SSE4_2__", "__x86_64__"]
SAPPHIRE_RAPIDS = ZEN4 + ["__AVX512FP16__", "__AMX_TILE__", "__AVXVNNI__"]


def test_x86_ladder_starts_native_then_drops_only_the_features_the_cpu_has():
    steps = [c.flags for c in cpu_flags.ladder("x86_64", SAPPHIRE_RAPIDS)]
    assert steps[0] == ("-march=native",)
    assert steps[1] == ("-march=native", "-mno-avx512fp16")
    assert ("-march=native", "-mno-avx512fp16", "-mno-amx-tile") in steps
    assert steps[-1] == ()  # portable is always the last resort
    zen = [c.flags for c in cpu_flags.ladder("x86_64", ZEN4)]
    assert not any("-mno-avx512fp16" in s for s in zen)  # Zen 4 has no FP16: nothing to drop
    assert not any("-mno-amx-tile" in s for s in zen)


def test_aarch64_never_leads_with_march_native():
    steps = [c.flags for c in cpu_flags.ladder("aarch64", [])]
    assert steps[0] == ("-mcpu=native",)
    assert steps[-1] == ()
    assert not any(f.startswith("-mno-avx") for s in steps for f in s)
    assert [c.flags for c in cpu_flags.ladder("riscv64", [])][-1] == ()


def test_the_first_candidate_that_compiles_wins_and_says_what_it_dropped():
    def eigen_on_fp16_is_broken(flags):  # the Sapphire Rapids failure, as a probe
        return "-mno-avx512fp16" in flags
    choice = cpu_flags.choose(cpu_flags.ladder("x86_64", SAPPHIRE_RAPIDS), eigen_on_fp16_is_broken)
    assert choice.flags == ["-march=native", "-mno-avx512fp16"]
    assert choice.mode == "reduced" and choice.dropped == ["AVX512-FP16"]
    assert "-march=native does not compile" in choice.reason and "AVX512-FP16 off" in choice.reason
    assert cpu_flags.choose(cpu_flags.ladder("x86_64", ZEN4), lambda f: True).mode == "native"


def test_aarch64_compiler_that_refuses_mcpu_falls_to_march_then_portable():
    choice = cpu_flags.choose(cpu_flags.ladder("aarch64", []), lambda f: f == ["-march=native"])
    assert choice.flags == ["-march=native"] and choice.mode == "reduced"
    nothing = cpu_flags.choose(cpu_flags.ladder("aarch64", []), lambda f: False)
    assert nothing.flags == [] and nothing.mode == "portable"
    assert nothing.tried == ["-mcpu=native", "-march=native"]


def _knows(flag):
    cxx = native.cxx_compiler()
    return subprocess.run([cxx, flag, "-x", "c++", "-fsyntax-only", os.devnull], capture_output=True).returncode == 0


@pytest.mark.skipif(platform.machine() != "x86_64", reason="AVX512-FP16 is an x86-64 feature")
def test_the_probe_finds_the_sapphire_rapids_eigen_failure_with_the_real_headers():
    """-mavx512fp16 on top of -march=native makes this CPU look like Sapphire Rapids
    to the compiler (explicit -m flags win over -march): TensorFlow's Eigen then
    fails, and the probe must drop exactly that feature."""
    if not _knows("-mavx512fp16"):
        pytest.skip("this compiler has no -mavx512fp16 (g++ >= 12 has)")
    tf = pytest.importorskip("tensorflow")
    cxx = native.cxx_compiler()
    spr = ["-mavx512fp16"]
    macros = cpu_flags.predefined_macros(cxx, ["-march=native", *spr])
    assert "__AVX512FP16__" in macros
    compiles = cpu_flags.probe_compiles(cxx, native.TF_PROBE, spr + list(tf.sysconfig.get_compile_flags()))
    assert not compiles(["-march=native"])  # the failure of the issue, reproduced
    choice = cpu_flags.choose(cpu_flags.ladder("x86_64", macros), compiles)
    assert choice.flags == ["-march=native", "-mno-avx512fp16"], choice


@pytest.mark.skipif(platform.machine() != "x86_64", reason="AVX512-FP16 is an x86-64 feature")
@pytest.mark.parametrize("which", ["ort", "litert"])
def test_every_build_of_the_kernel_cores_probes_the_eigen_they_include(which):
    """The onnxruntime and LiteRT libraries compile the kernel cores, which include
    Eigen: on a Sapphire Rapids CPU their probe must fail where Eigen fails, or the
    build tries -march=native, fails, and falls back to portable (what this machine
    did before the probes included Eigen)."""
    if not _knows("-mavx512fp16"):
        pytest.skip("this compiler has no -mavx512fp16 (g++ >= 12 has)")
    if which == "litert":
        pytest.importorskip("ai_edge_litert")
    build = native.ort_build() if which == "ort" else native.litert_build()
    cxx = native.cxx_compiler()
    spr = ["-march=native", "-mavx512fp16"]
    eigen = cpu_flags.probe_compiles(cxx, "#include <Eigen/Core>\n",
                                     ["-isystem", build.options["BRIDGE_EIGEN_INCLUDE"]])(spr)
    probe = cpu_flags.probe_compiles(cxx, build.probe_source, build.probe_flags)(spr)
    assert probe == eigen, (which, probe, eigen)
    assert cpu_flags.probe_compiles(cxx, build.probe_source, build.probe_flags)(["-march=native", "-mno-avx512fp16"])


# -- the build cache -------------------------------------------------------------

def _project(tmp_path, monkeypatch):
    """A one-file library that takes its CPU flags the way the real ones do."""
    monkeypatch.setenv("BRIDGE_CACHE", str(tmp_path / "cache"))
    for var in ("BRIDGE_CPU_FLAGS", "BRIDGE_PORTABLE"):
        monkeypatch.delenv(var, raising=False)
    src = tmp_path / "src"
    src.mkdir()
    cmake = Path(native.__file__).resolve().parent.parent / "tf_ops" / "cpu" / "native.cmake"
    if not cmake.exists():
        cmake = native._package_dir("bridge.tf_ops") / "cpu" / "native.cmake"
    (src / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.18)\nproject(flagged CXX)\nadd_library(flagged SHARED flagged.cc)\n"
        f"include({cmake.as_posix()})\nbridge_cpu_target(flagged)\n")
    (src / "flagged.cc").write_text('extern "C" int answer() { return 42; }\n')
    return native.Build(name="flagged", source_dir=src, binds_to="test", target_file="libflagged.so")


def test_flags_are_in_the_cache_key_and_the_build_record(tmp_path, monkeypatch):
    b = _project(tmp_path, monkeypatch)
    monkeypatch.setenv("BRIDGE_CPU_FLAGS", "-O2")
    lib_a = b.library(quiet=True)
    info = native.read_build_info(lib_a)
    assert info["cpu_flags"] == ["-O2"] and info["cpu_mode"] == "forced" and info["cpu"]
    monkeypatch.setenv("BRIDGE_CPU_FLAGS", "-O1")
    b2 = native.Build(name=b.name, source_dir=b.source_dir, binds_to=b.binds_to, target_file=b.target_file)
    lib_b = b2.library(quiet=True)
    assert lib_b != lib_a  # a library built with other flags is never reused
    assert native.read_build_info(lib_b)["cpu_flags"] == ["-O1"]
    assert "-O1" in (lib_b.parent / "build.log").read_text()


def test_a_failing_native_build_is_retried_portable_once_and_remembered(tmp_path, monkeypatch, capfd):
    b = _project(tmp_path, monkeypatch)
    bad = cpu_flags.CpuFlags(["-mthis-cpu-flag-does-not-exist"], "native")
    monkeypatch.setattr(cpu_flags, "decide", lambda *a, **k: bad)
    lib = b.library()
    err = capfd.readouterr().err
    assert "retrying portable" in err and "BRIDGE_PORTABLE=1" in err and "BRIDGE_CPU_FLAGS" in err
    assert native.read_build_info(lib)["cpu_mode"] == "portable"
    assert "-portable-" in lib.parent.name
    # The next request goes straight to the portable library, without building.
    again = native.Build(name=b.name, source_dir=b.source_dir, binds_to=b.binds_to, target_file=b.target_file)
    monkeypatch.setattr(native.Build, "_build", lambda *a, **k: pytest.fail("rebuilt"))
    assert again.library() == lib


def test_forced_flags_that_fail_are_not_silently_replaced(tmp_path, monkeypatch):
    b = _project(tmp_path, monkeypatch)
    monkeypatch.setenv("BRIDGE_CPU_FLAGS", "-mthis-cpu-flag-does-not-exist")
    with pytest.raises(native.BuildError, match="this-cpu-flag-does-not-exist"):
        b.library(quiet=True)


def test_portable_env_means_no_cpu_flags(tmp_path, monkeypatch):
    b = _project(tmp_path, monkeypatch)
    monkeypatch.setenv("BRIDGE_PORTABLE", "1")
    lib = b.library(quiet=True)
    assert native.read_build_info(lib)["cpu_flags"] == [] and "-portable-" in lib.parent.name


def test_the_probe_result_is_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("BRIDGE_CACHE", str(tmp_path))
    calls = []
    real = cpu_flags.probe_compiles

    def counting(*a):
        inner = real(*a)
        return lambda flags: calls.append(flags) or inner(flags)
    monkeypatch.setattr(cpu_flags, "probe_compiles", counting)
    cxx = native.cxx_compiler()
    first = cpu_flags.decide(cxx, "id", "cpu", "int f();\n", [], tmp_path)
    n = len(calls)
    assert n >= 1
    assert cpu_flags.decide(cxx, "id", "cpu", "int f();\n", [], tmp_path) == first
    assert len(calls) == n  # no second probe


def test_a_build_chooses_its_flags_once_and_a_replaced_one_again(tmp_path, monkeypatch):
    """Build.cpu is chosen on first use and kept (the cache key, the folder and the
    build record all read it); `replace(build, portable=True)` chooses afresh."""
    from dataclasses import replace
    b = _project(tmp_path, monkeypatch)
    chosen = []
    monkeypatch.setattr(cpu_flags, "decide", lambda *a, **k: chosen.append(a) or cpu_flags.CpuFlags(["-O2"], "native"))
    assert b.folder() == b.folder() and b.key() and b.cpu.flags == ["-O2"]
    assert len(chosen) == 1
    portable = replace(b, portable=True)
    assert portable.cpu.mode == "portable" and portable.cpu.flags == [] and len(chosen) == 1
    assert b.cpu.mode == "native"  # the original keeps its own choice


# -- the CLI ------------------------------------------------------------------------

def test_a_build_error_wrapped_by_keras_is_found():
    from bridge.cli import _build_error
    try:
        try:
            raise native.BuildError("building the TensorFlow ops failed (exit 1)")
        except native.BuildError as inner:
            raise ValueError("Exception encountered when calling FusedConvBnLeaky.call(): " + str(inner)) from None
    except ValueError as outer:
        found = _build_error(outer)
    assert isinstance(found, native.BuildError) and str(found).startswith("building the TensorFlow ops")
    assert _build_error(ValueError("unrelated")) is None


@pytest.mark.skipif(shutil.which("g++") is None and not os.environ.get("CXX"), reason="needs a compiler")
def test_a_failed_first_use_build_in_export_is_a_short_message(tmp_path):
    env = dict(os.environ, BRIDGE_CACHE=str(tmp_path / "cache"), BRIDGE_CPU_FLAGS="-mthis-cpu-flag-does-not-exist")
    done = subprocess.run([sys.executable, "-m", "bridge", "export", "yolov3-tiny", "--to", "onnx",
                           "-o", str(tmp_path / "m.onnx"), "--config", "input_size=64"],
                          capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 1, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and "Exception encountered" not in done.stderr, done.stderr[-2000:]
    assert "bridge export: building the TensorFlow ops" in done.stderr
    assert "this-cpu-flag-does-not-exist" in done.stderr
    assert not (tmp_path / "m.onnx").exists()


def test_cpu_features_agree_with_what_the_compiler_sees_here():
    """cpu_features reads /proc/cpuinfo's names; on x86 they must agree with
    -march=native's predefined macros on the features the roads depend on."""
    feats = cpu_flags.cpu_features()
    if not cpu_flags.is_x86(platform.machine()) or not Path("/proc/cpuinfo").is_file():
        pytest.skip("an x86 Linux check")
    assert "sse2" in feats, sorted(feats)[:20]
    cxx = native.cxx_compiler()
    macros = set(cpu_flags.predefined_macros(cxx, ["-march=native"]))
    assert ("avx2" in feats) == ("__AVX2__" in macros)
    assert cpu_flags.has_avx512_core() == ({"__AVX512F__", "__AVX512BW__", "__AVX512VL__", "__AVX512DQ__"} <= macros)
    assert cpu_flags.has_vnni() == bool({"__AVX512VNNI__", "__AVXVNNI__"} & macros)
