"""The CUDA layer finds its ops instead of listing them: an op's CUDA core is
its op folder (bridge/ops/<op module>/: kernel.cuh, the TensorFlow GPU kernels
tf_gpu.cu.cc, the harness's C entry points cuda_harness.cu), found by
bridge.native.cuda_cores() for TensorFlow's GPU build, the harness and the
emulator; the entry points' signatures, the harness calls and the `bridge cuda`
roads are its companion (cuda_harness.py beside them), with the device pointers
taken from the spec. Checked against the C side: the .cu files' declarations and
the symbols the built library exports."""
from __future__ import annotations

import ctypes
import re
from pathlib import Path

import numpy as np
import pytest

from bridge import cuda, native
from bridge import ops as specs
from bridge.ops import Arg, OpSpec, Tolerance, registry

ROOT = Path(__file__).resolve().parent.parent
HARNESS = ROOT / "tf_ops" / "cuda_harness"
OPS = ROOT / "bridge" / "ops"
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


def _c_files():
    """(owner, file): the harness's own .cu files ("harness"), and every op folder's
    entry points (owned by the folder), as they lie on disk."""
    return ([("harness", p) for p in sorted(HARNESS.glob("*.cu"))]
            + [(p.parent.name, p) for p in sorted(OPS.glob("*/*.cu"))])


def _declared():
    """{entry: (owner, [argument kinds])} for every BRIDGE_API function of the harness's .cu files."""
    found = {}
    for owner, source in _c_files():
        for name, params in re.findall(r"BRIDGE_API\s+\w[\w\s\*]*?\b(\w+)\s*\(([^)]*)\)", source.read_text()):
            params = [p for p in params.split(",") if p.strip() and p.strip() != "void"]
            assert name not in found, f"{name} is declared by {found[name][0]} and {source}"
            found[name] = (owner, [_c_kind(p) for p in params])
    return found


def test_every_companion_entry_matches_its_c_file():
    declared = _declared()
    assert declared, f"no BRIDGE_API declarations parsed from {HARNESS}/*.cu and {OPS}/*/*.cu"
    covered = set()
    for c in cuda.companions():
        for entry in c.entries:
            want = [_ctypes_kind(t) for t in c.argtypes(entry)]
            for suffix in cuda.SUFFIXES.values():
                name = f"{entry.name}_{suffix}"
                assert name in declared, f"{c.path} declares {name}, no .cu file does"
                owner, kinds = declared[name]
                assert owner == c.spec.module, f"{name} is in {owner}'s .cu, not beside its companion {c.path}"
                assert kinds == want, f"{name}: {owner}'s .cu takes {kinds}, {c.path} says {want}"
                covered.add(name)
    orphans = sorted(n for n in declared if not ABI_OWN.match(n) and n not in covered)
    assert not orphans, f"entry points no op's companion declares: {orphans}"
    assert {stem for stem, _ in declared.values()} - {c.spec.module for c in cuda.companions()} == {"harness"}


def test_every_op_with_cuda_kernels_has_a_companion_and_nothing_else_does():
    """The op folders on disk, the companions and bridge.native.cuda_cores() (what
    the CMake builds are given) name the same ops; no op's CUDA file is left in
    the hosts' folders."""
    names = {c.spec.module for c in cuda.companions()}
    files = {p.parent.name for p in OPS.glob(f"*/{native.HARNESS_COMPANION}")}
    assert files == names, f"companions without a spec: {sorted(files - names)}"
    c_files = {p.parent.name for p in OPS.glob(f"*/{native.HARNESS_SOURCE}")}
    assert c_files == names, f"entry-point files and companions differ: {sorted(c_files ^ names)}"
    cores = {p.parent.name for p in OPS.glob(f"*/{native.CUDA_CORE}")}
    assert names == cores, f"companions and kernel headers differ: {sorted(names ^ cores)}"
    assert {spec.module for spec, _ in native.cuda_cores()} == cores
    tf_gpu = {p.parent.name for p in OPS.glob(f"*/{native.TF_GPU_SOURCE}")}
    assert tf_gpu == cores, f"CUDA cores without TensorFlow GPU kernels or the reverse: {sorted(tf_gpu ^ cores)}"
    assert sorted(p.name for p in HARNESS.glob("*.cu*")) == ["harness.cu", "harness.cuh"]
    assert not list((ROOT / "tf_ops").glob("*.cu.cc")), "a TensorFlow GPU kernel outside its op folder"
    assert not any((ROOT / "tf_ops" / "cuda" / f"{m}.cuh").exists() for m in cores)


def test_the_cuda_builds_take_the_cores_from_the_op_folders():
    """Each CUDA build is handed the files discovery found, and its cache key
    covers the cores' kernels (a changed kernel.cuh is another build)."""
    try:
        emulator = native.cuda_emulator_build()
    except native.BuildError as e:
        pytest.skip(f"the CUDA headers are not here: {e}")
    sources = emulator.options["BRIDGE_HARNESS_SOURCES"].split(";")
    assert sources == [str(f / native.HARNESS_SOURCE) for _, f in native.cuda_cores()]
    keyed = {Path(p) for p in emulator.extra_sources}
    for _, folder in native.cuda_cores():
        assert folder / native.CUDA_CORE in keyed and folder / native.HARNESS_SOURCE in keyed
    try:
        tf_gpu = native.tf_gpu_options()
    except native.BuildError as e:
        pytest.skip(f"nvcc is not here: {e}")
    assert tf_gpu["BRIDGE_TF_GPU_SOURCES"].split(";") == [str(f / native.TF_GPU_SOURCE)
                                                          for _, f in native.cuda_cores()]


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


def test_a_fourth_op_is_its_own_op_folder(tmp_path, monkeypatch):
    """A test-only op whose folder (in another tree of op folders) holds a CUDA
    core joins the CUDA builds' sources, the harness's calls and `bridge cuda`'s
    roads with no edit of bridge; a library lacking its entry point is refused
    naming the entry and the companion."""
    from bridge import cuda_check
    real = {f for _, f in native.cuda_cores()}
    folder = tmp_path / "ops" / "scratch_cuda_op"
    folder.mkdir(parents=True)
    (folder / native.CUDA_CORE).write_text("// the scratch op's kernels\n")
    (folder / native.HARNESS_SOURCE).write_text('#include "harness.cuh"\n#include "kernel.cuh"\n')
    (folder / native.HARNESS_COMPANION).write_text(
        "from bridge.cuda import I64, Entry\n"
        "ENTRIES = [Entry('bridge_scratch_cuda_op', (I64,))]\n"
        "def scratch_cuda_op(k, x):\n    return x\n"
        "CALLS = (scratch_cuda_op,)\n"
        "CHECKS = [('copy', ('float32',), lambda k, dev, rng, example, dtype: 0.0)]\n")
    spec = _scratch_spec()
    monkeypatch.setitem(specs.SPECS, spec.name, spec)
    monkeypatch.setitem(specs.ORIGINS, spec.name, "bridge")
    monkeypatch.setitem(registry._FOLDERS, spec.name, folder)
    assert {f for _, f in native.cuda_cores()} == real | {folder}
    assert folder / native.HARNESS_SOURCE in native.cuda_sources(native.HARNESS_SOURCE)
    assert folder / native.CUDA_CORE in native.cuda_core_files(native.HARNESS_SOURCE)
    c = cuda.companion("ScratchCudaOp")
    assert c.argtypes(c.entries[0]) == [ctypes.c_void_p] * 2 + [
        ctypes.c_int64, ctypes.c_void_p]  # x, y from the spec; the scalar; the stream
    assert ("ScratchCudaOp", "copy", ("float32",)) in [row[:3] for row in cuda_check.CHECKS]
    monkeypatch.delitem(registry._FOLDERS, spec.name)  # the real library, lacking the scratch op
    try:
        lib = native.cuda_emulator_build().library(quiet=True)
    except native.BuildError as e:
        pytest.skip(f"the CUDA emulator cannot be built here: {e}")
    monkeypatch.setitem(registry._FOLDERS, spec.name, folder)
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


SCRATCH_KERNEL = """// the scratch op's CUDA core: y = 2x + 1
#include "common.cuh"
namespace scratch_cuda_op {
template <typename T>
__global__ void AffineKernel(const T* x, T* y, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] = bridge_cuda::FromF<T>(2.0f * bridge_cuda::ToF(x[i]) + 1.0f);
  }
}
}  // namespace scratch_cuda_op
"""
SCRATCH_ENTRIES = """#include "harness.cuh"
#include "kernel.cuh"
template <typename T>
static int Affine(const void* x, void* y, int64_t n, void* stream) {
  BRIDGE_LAUNCH(bridge_cuda::LaunchBlocks(n, 128), 128, 0, bridge_harness::AsStream(stream),
                scratch_cuda_op::AffineKernel<T>)(static_cast<const T*>(x), static_cast<T*>(y), n);
  return bridge_harness::Report(bridge_cuda::CheckLaunch("scratch kernel"));
}
BRIDGE_API int bridge_scratch_cuda_op_f32(const void* x, void* y, int64_t n, void* s) { return Affine<float>(x, y, n, s); }
BRIDGE_API int bridge_scratch_cuda_op_f16(const void* x, void* y, int64_t n, void* s) { return Affine<__half>(x, y, n, s); }
"""
SCRATCH_COMPANION = """from bridge.cuda import I64, Call, Entry, numel, shapes_of
ENTRIES = [Entry('bridge_scratch_cuda_op', (I64,))]
def scratch_cuda_op(k, x):
    c = Call(k, 'ScratchCudaOp', (x,), {})
    (shape,) = c.spec.infer_shapes(shapes_of(c.arrays))
    y = c.empty(shape)
    if numel(shape):
        c.launch('bridge_scratch_cuda_op', *c.ptrs(*c.arrays, y), numel(shape))
    return y
CALLS = (scratch_cuda_op,)
CHECKS = []
"""


def test_a_fourth_op_runs_from_its_folder_on_the_emulator(tmp_path, monkeypatch, rng):
    """A scratch op folder with a real CUDA core (kernel.cuh, cuda_harness.cu,
    cuda_harness.py) and nothing else: the emulator build finds it, compiles it
    beside harness.cu, and the call the companion declares computes 2x + 1
    (numpy float64 the reference) on odd, size-1 and empty shapes."""
    folder = tmp_path / "ops" / "scratch_cuda_op"
    folder.mkdir(parents=True)
    (folder / native.CUDA_CORE).write_text(SCRATCH_KERNEL)
    (folder / native.HARNESS_SOURCE).write_text(SCRATCH_ENTRIES)
    (folder / native.HARNESS_COMPANION).write_text(SCRATCH_COMPANION)
    spec = _scratch_spec()
    monkeypatch.setitem(specs.SPECS, spec.name, spec)
    monkeypatch.setitem(specs.ORIGINS, spec.name, "bridge")
    monkeypatch.setattr(registry, "_FOLDERS", {spec.name: folder})  # the scratch op's core alone: a quick build
    monkeypatch.setenv("BRIDGE_CACHE", str(tmp_path / "cache"))
    try:
        build = native.cuda_emulator_build()
    except native.BuildError as e:
        pytest.skip(f"the CUDA emulator cannot be built here: {e}")
    assert build.options["BRIDGE_HARNESS_SOURCES"] == str(folder / native.HARNESS_SOURCE)
    k = cuda.Harness(build.library(quiet=True), emulated=True)
    for shape in [(1,), (7,), (3, 1025), (0, 4), (2, 0, 3)]:
        x = rng.normal(size=shape).astype(np.float32)
        y = k.scratch_cuda_op(x)
        want = 2.0 * x.astype(np.float64) + 1.0
        assert y.shape == x.shape and y.dtype == np.float32
        np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-6)
