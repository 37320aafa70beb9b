"""The package's shape: one namespace, every folder installed, layering kept."""
from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
TOP = {"bridge": "bridge", "tf_ops": "bridge.tf_ops", "onnx_plugins": "bridge.onnx_plugins",
       "converters": "bridge.converters", "models": "bridge.models", "litert": "bridge.litert", "ascend": "bridge.ascend"}


OP_FOLDERS = ROOT / "bridge" / "ops"  # bridge/ops/<op>/: shipped whole as package data ("ops/*/*")


def _is_op_folder(path: Path) -> bool:
    return path.parent == OP_FOLDERS


def _packages_on_disk():
    found = set()
    for folder, name in TOP.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            if "__pycache__" in rel.parts or _is_op_folder(init.parent):
                continue
            found.add(".".join([name, *rel.parts]))
    return found


def test_every_package_is_installed_under_bridge():
    listed = set(PYPROJECT["tool"]["setuptools"]["packages"])
    missing = _packages_on_disk() - listed
    assert not missing, f"packages on disk but not in pyproject.toml: {sorted(missing)}"
    assert all(p == "bridge" or p.startswith("bridge.") for p in listed)
    assert PYPROJECT["tool"]["setuptools"]["package-dir"] == {v: k for k, v in TOP.items()}
    assert not [p for p in listed if p.startswith("bridge.ops.")], "op folders ship without a line of their own"


def test_op_folders_need_no_line_in_pyproject():
    """Every op folder is found by the registry and shipped by the one package-data glob."""
    from bridge import ops
    from bridge.ops import registry
    folders = {p.name for p in OP_FOLDERS.iterdir() if (p / "__init__.py").is_file()}
    assert folders and folders == {registry.op_folder(s).name for s in ops.all_specs() if registry.op_folder(s)}
    assert "ops/*/*" in PYPROJECT["tool"]["setuptools"]["package-data"]["*"]


def _import_blocking(module: str, blocked: str) -> subprocess.CompletedProcess:
    code = f"""
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name == {blocked!r} or name.startswith({blocked!r} + "."):
            raise ImportError("blocked for the test: " + name)
sys.meta_path.insert(0, Block())
import {module}
print("ok")
"""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("heavy", ["tensorflow", "onnx", "onnxruntime"])
def test_specs_import_nothing_heavier_than_numpy(heavy):
    r = _import_blocking("bridge.ops", heavy)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-2000:]


def test_cli_runs_as_module():
    r = subprocess.run([sys.executable, "-m", "bridge", "--help"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    for command in ("build", "ops", "export", "parity"):
        assert command in r.stdout


def test_the_wheel_carries_every_file_the_packages_need(tmp_path):
    """A non-editable install must find the C++ sources, CMake files and data it builds from."""
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(ROOT)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    import zipfile
    (wheel,) = tmp_path.glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    if not tracked:
        pytest.skip("not a git checkout")
    prefix = {folder: name.replace(".", "/") for folder, name in TOP.items()}
    missing = [f for f in tracked if f.split("/")[0] in prefix
               and prefix[f.split("/")[0]] + f[len(f.split("/")[0]):] not in names]
    assert not missing, f"tracked files missing from the wheel: {missing}"
    for folder in (p for p in OP_FOLDERS.iterdir() if (p / "__init__.py").is_file()):  # tracked or not yet
        rel = folder.relative_to(ROOT).as_posix()
        want = {f"{rel}/{f.name}" for f in folder.iterdir() if f.is_file()}
        assert want <= names, f"op folder files missing from the wheel: {sorted(want - names)}"
