"""The native build cache: failures name their cause and the command that fixes them."""
from __future__ import annotations

import re
import subprocess

import pytest

from bridge import native
from conftest import run_cli


def test_a_missing_compiler_names_the_fix(monkeypatch):
    monkeypatch.setenv("CXX", "/nonexistent/g++")
    with pytest.raises(native.BuildError, match=r"CXX=/nonexistent/g\+\+ is not an executable C\+\+ compiler.*apt-get install g\+\+"):
        native.cxx_compiler()


def _project(tmp_path, monkeypatch, name, source):
    """A one-file CMake library project in tmp_path, built into a cache of its own."""
    monkeypatch.setenv("BRIDGE_CACHE", str(tmp_path / "cache"))
    src = tmp_path / "src"
    src.mkdir()
    (src / "CMakeLists.txt").write_text(
        f"cmake_minimum_required(VERSION 3.18)\nproject({name} CXX)\nadd_library({name} SHARED {name}.cc)\n")
    (src / f"{name}.cc").write_text(source)
    return src, native.Build(name=name, source_dir=src, binds_to="test", target_file=f"lib{name}.so")


def test_a_failed_compile_shows_the_log_and_the_fix(tmp_path, monkeypatch):
    _, b = _project(tmp_path, monkeypatch, "broken", "int f() { return this_is_not_declared; }\n")
    with pytest.raises(native.BuildError) as e:
        b.library(quiet=True)
    assert "this_is_not_declared" in str(e.value)
    assert "bridge build broken --force" in str(e.value)
    assert not b.folder().exists()  # no half-built library is left in the cache


def test_a_build_is_cached_by_its_inputs(tmp_path, monkeypatch):
    src, b = _project(tmp_path, monkeypatch, "ok", "extern \"C\" int answer() { return 42; }\n")
    lib = b.library(quiet=True)
    assert lib.exists() and native.read_build_info(lib)["binds_to"] == "test"
    assert b.library(quiet=True) == lib  # the second call finds it
    (src / "ok.cc").write_text("extern \"C\" int answer() { return 43; }\n")
    assert b.library(quiet=True) != lib  # a changed source is another build


def test_the_key_leaves_out_nested_projects_and_builds_but_not_the_projects_own_folders(tmp_path, monkeypatch):
    """A team's ort/ kernel (a CMake project of its own), its litert/ op files or
    an in-tree build/ (CMakeCache.txt) beside its TensorFlow op do not change the
    op library's key; a header in a plain subfolder of the project does."""
    src, b = _project(tmp_path, monkeypatch, "keyed", "extern \"C\" int answer() { return 42; }\n")
    key = b.key()
    for sub, marker in (("ort", "CMakeLists.txt"), ("build", "CMakeCache.txt")):
        (src / sub).mkdir()
        (src / sub / marker).write_text("# another project\n")
        (src / sub / "kernel.cc").write_text("int other() { return 1; }\n")
        assert b.key() == key, sub
    (src / "litert").mkdir()  # LiteRT op files (--litert-library): built into bridge's LiteRT kernels
    (src / "litert" / "op.cc").write_text("const int kRegistered = register_op(&kDef);\n")
    assert b.key() == key
    (src / "include").mkdir()
    (src / "include" / "shared.h").write_text("#define VALUE 1\n")
    assert b.key() != key


def test_a_failed_build_names_a_target_bridge_build_accepts():
    """The fix a build error prints (`bridge build NAME --force`) must be a command
    that runs: every Build's name is a target of `bridge build`."""
    import re
    from bridge.commands import build
    from pathlib import Path
    source = Path(native.__file__).read_text()
    names = set(re.findall(r'Build\(name="([a-z_]+)"', source))
    assert names >= {"tf_ops", "ort", "cuda_harness", "cuda_emulator"}, names
    assert names <= set(build.TARGETS + build.ON_REQUEST), names - set(build.TARGETS + build.ON_REQUEST)


def test_bridge_build_refuses_an_unknown_target_naming_the_choices(capsys):
    # in this process: `python -m bridge`'s own exit codes are tests/test_export_onnx.py's test_python_dash_m
    rc, _, err = run_cli(capsys, "build", "nope")
    assert rc == 2, err
    assert "unknown target 'nope'; choose from tf_ops, ort, cuda_harness, cuda_emulator" in err


def test_missing_cuda_headers_name_the_fix(monkeypatch, tmp_path):
    """Without the CUDA headers the emulator's build stops with the fix, not a compiler error."""
    def no_nvcc(nvcc=None):
        raise native.BuildError("nvcc (the CUDA compiler) not found")
    monkeypatch.setattr(native, "cuda_include", no_nvcc)
    monkeypatch.setenv("BRIDGE_CUDA_INCLUDE", str(tmp_path))  # no cuda_runtime.h there
    monkeypatch.setattr(native.sys, "path", [str(tmp_path)])
    with pytest.raises(native.BuildError, match=r"the CUDA headers \(cuda_runtime.h, cuda_fp16.h\) were not found\. "
                                                r"Fix: install the CUDA toolkit"):
        native.cuda_emulator_build()


def test_the_kernel_cores_come_from_one_cmake_function(tmp_path, monkeypatch):
    """bridge_use_kernels (tf_ops/cpu/native.cmake) puts bridge/kernels on a
    library's include path, found beside native.cmake by default; a wrong
    BRIDGE_KERNELS_DIR stops the configure step naming it. The three libraries
    take the cores that way, none by a path of its own."""
    cmake = native._package_dir("bridge.tf_ops") / "cpu" / "native.cmake"
    src, b = _project(tmp_path, monkeypatch, "cores", '#include "kernels/op_failure.h"\n'
                      'extern "C" int width() { return static_cast<int>(bridge::dims({2, 3}).size()); }\n')
    lists = src / "CMakeLists.txt"
    lists.write_text(lists.read_text() + f"include({cmake.as_posix()})\nbridge_use_kernels(cores)\n")
    assert b.library(quiet=True).exists()
    configure = subprocess.run([native.cmake_exe(), "-S", str(src), "-B", str(tmp_path / "wrong"),
                                f"-DCMAKE_CXX_COMPILER={native.cxx_compiler()}", f"-DBRIDGE_KERNELS_DIR={tmp_path}"],
                               capture_output=True, text=True, timeout=120)
    assert configure.returncode != 0
    assert re.search(r"BRIDGE_KERNELS_DIR=\S+\s+is not bridge/kernels", configure.stderr), configure.stderr
    for package, folder in (("bridge.tf_ops", ""), ("bridge.onnx_plugins", "native"), ("bridge.litert", "native")):
        text = (native._package_dir(package) / folder / "CMakeLists.txt").read_text()
        assert "bridge_use_kernels(" in text and "BRIDGE_KERNELS_DIR" not in text, package
