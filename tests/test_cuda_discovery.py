"""The CUDA layer finds its ops instead of listing them: each op's C entry
points are its own file (tf_ops/cuda_harness/<op module>.cu, found by CMake),
and their signatures, the harness calls and the `bridge cuda` roads its
companion (<op module>.py next to it), with the device pointers taken from the
spec. Checked against the C side: the .cu files' declarations and the symbols
the built library exports."""
from __future__ import annotations

import ctypes
import re
from pathlib import Path

import pytest

from bridge import cuda, native
from bridge import ops as specs
from bridge.ops import Arg, OpSpec, Tolerance

ROOT = Path(__file__).resolve().parent.parent
HARNESS = ROOT / "tf_ops" / "cuda_harness"
# entry points of the harness itself, not of an op
ABI_OWN = re.compile(r"^bridge_cuda_")


def _c_kind(param: str) -> str:
    param = param.strip()
    if "*" in param:
        return "pointer"
    words = param.split()
    return {"int64_t": "int64", "float": "float", "int": "int"}[words[-2]]


def _ctypes_kind(t) -> str:
    if t is ctypes.c_void_p or (isinstance(t, type) and issubclass(t, ctypes._Pointer)):
        return "pointer"
    return {ctypes.c_int64: "int64", ctypes.c_float: "float", ctypes.c_int: "int"}[t]


def _declared():
    """{entry: (file stem, [argument kinds])} for every BRIDGE_API function of the harness's .cu files."""
    found = {}
    for source in sorted(HARNESS.glob("*.cu")):
        for name, params in re.findall(r"BRIDGE_API\s+\w[\w\s\*]*?\b(\w+)\s*\(([^)]*)\)", source.read_text()):
            params = [p for p in params.split(",") if p.strip() and p.strip() != "void"]
            assert name not in found, f"{name} is declared in {found[name][0]}.cu and {source.name}"
            found[name] = (source.stem, [_c_kind(p) for p in params])
    return found


def test_every_companion_entry_matches_its_c_file():
    declared = _declared()
    assert declared, f"no BRIDGE_API declarations parsed from {HARNESS}/*.cu"
    covered = set()
    for c in cuda.companions():
        for entry in c.entries:
            want = [_ctypes_kind(t) for t in c.argtypes(entry)]
            for suffix in cuda.SUFFIXES.values():
                name = f"{entry.name}_{suffix}"
                assert name in declared, f"{c.path} declares {name}, no .cu file there does"
                stem, kinds = declared[name]
                assert stem == c.spec.module, f"{name} is in {stem}.cu, not beside its companion {c.path.name}"
                assert kinds == want, f"{name}: {stem}.cu takes {kinds}, {c.path} says {want}"
                covered.add(name)
    orphans = sorted(n for n in declared if not ABI_OWN.match(n) and n not in covered)
    assert not orphans, f"entry points no op's companion declares: {orphans}"
    assert {stem for stem, _ in declared.values()} - {c.spec.module for c in cuda.companions()} == {"harness"}


def test_every_op_with_cuda_kernels_has_a_companion_and_nothing_else_does():
    names = {c.spec.module for c in cuda.companions()}
    files = {p.stem for p in cuda.companions_dir().glob("*.py")}
    assert files == names, f"companions without a spec: {sorted(files - names)}"
    c_files = {p.stem for p in cuda.companions_dir().glob("*.cu")} - {"harness"}
    assert c_files == names, f"entry-point files and companions differ: {sorted(c_files ^ names)}"
    cuh = {p.stem for p in (ROOT / "tf_ops" / "cuda").glob("*.cuh")}
    assert names <= cuh, f"a companion without its kernel header: {sorted(names - cuh)}"


def test_the_built_library_exports_what_the_companions_declare():
    """The loaded emulator library: every declared entry bound with the spec-derived
    signature, every exported op entry declared by a companion."""
    try:
        k = cuda.emulator()
    except native.BuildError as e:
        pytest.skip(f"the CUDA emulator cannot be built here: {e}")
    import subprocess
    exported = set(subprocess.run(["nm", "-D", "--defined-only", k.path], capture_output=True, text=True,
                                  check=True).stdout.split())
    declared = set()
    for c in cuda.companions():
        for entry in c.entries:
            for suffix in cuda.SUFFIXES.values():
                name = f"{entry.name}_{suffix}"
                assert name in exported, f"{k.path} does not export {name}"
                assert getattr(k.lib, name).argtypes == c.argtypes(entry)
                declared.add(name)
        for call in c.calls:
            assert getattr(k, call.__name__).__func__ is call
    ops_exported = {s for s in exported if s.startswith("bridge_") and not ABI_OWN.match(s)
                    and re.search(r"_f(32|16)$", s)}
    assert ops_exported == declared, sorted(ops_exported ^ declared)


def _scratch_spec():
    return OpSpec(name="ScratchCudaOp", module="scratch_cuda_op", doc="a test-only op", inputs=(Arg("x", "any"),),
                  outputs=(Arg("y", "like x"),), attrs=(), onnx_attrs=(), dtypes=("float32",),
                  tolerance={"float32": Tolerance(1e-6)}, _reference=lambda x: x, _infer=lambda x: (x,),
                  _to_onnx=lambda _shapes=None, **a: dict(a), _from_onnx=lambda **a: dict(a))


def test_a_fourth_op_is_its_own_companion_file(tmp_path, monkeypatch):
    """A test-only op with a companion in another folder joins the harness's
    calls and `bridge cuda`'s roads with no edit of bridge; a library lacking its
    entry point is refused naming the entry and the companion."""
    from bridge import cuda_check
    folder = tmp_path / "cuda_harness"
    folder.mkdir()
    for p in cuda.companions_dir().glob("*.py"):
        (folder / p.name).write_text(p.read_text())
    (folder / "scratch_cuda_op.py").write_text(
        "from bridge.cuda import I64, Entry\n"
        "ENTRIES = [Entry('bridge_scratch_cuda_op', (I64,))]\n"
        "def scratch_cuda_op(k, x):\n    return x\n"
        "CALLS = (scratch_cuda_op,)\n"
        "CHECKS = [('copy', ('float32',), lambda k, dev, rng, example, dtype: 0.0)]\n")
    spec = _scratch_spec()
    monkeypatch.setitem(specs.SPECS, spec.name, spec)
    monkeypatch.setattr(cuda, "companions_dir", lambda: folder)
    c = cuda.companion("ScratchCudaOp")
    assert c.argtypes(c.entries[0]) == [ctypes.c_void_p] * 2 + [
        ctypes.c_int64, ctypes.c_void_p]  # x, y from the spec; the scalar; the stream
    assert ("ScratchCudaOp", "copy", ("float32",)) in [row[:3] for row in cuda_check.CHECKS]
    try:
        lib = native.cuda_emulator_build().library(quiet=True)
    except native.BuildError as e:
        pytest.skip(f"the CUDA emulator cannot be built here: {e}")
    with pytest.raises(cuda.CudaUnavailable, match=r"lacks bridge_scratch_cuda_op_f32 \(ScratchCudaOp, declared in "):
        cuda.Harness(lib, emulated=True)


def test_no_op_is_named_in_the_cuda_layer():
    """bridge/cuda.py and bridge/cuda_check.py list no op: every name they use
    comes from the companions (the functional side is the tests above)."""
    for path in (ROOT / "bridge" / "cuda.py", ROOT / "bridge" / "cuda_check.py"):
        text = path.read_text()
        for spec in specs.all_specs():
            for word in (spec.name, spec.module):
                assert word not in text, f"{path.name} names {word}"
