"""The CUDA kernels (each op folder's CUDA core, bridge/ops/<op>/kernel.cuh)
through the C-ABI harness (bridge.cuda), against the numpy float64 references of
bridge.ops.

What runs everywhere: the harness and the TensorFlow GPU kernels compile with
nvcc (skipped, with the reason, where nvcc is absent), the geometry handed to the
convolution kernel, the test's own backward reference against finite differences,
and the benchmark's message on a machine without a GPU.

Every test that launches kernels runs twice: on a CUDA device seen by PyTorch or
CuPy (skipped without one), and on the CPU emulator (bridge.cuda.emulator(): the
same kernel sources compiled as C++, blocks of fiber threads with __syncthreads and
warp shuffles checked, warps racing ahead of each other in a seeded order, a
stand-in cuBLASLt that checks shapes, alignment and the epilogue). The emulator
shows the kernels compute the right thing; only the GPU run says how fast.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from bridge import cuda, native
from bridge import ops as specs
# The gradients' bounds, the arrays on either side and the conv inputs, as `bridge cuda` has them.
from bridge.cuda_check import Device
from bridge.ops import OpError
from bridge.ops.fused_layer_norm import BACKWARD_SCALE, reference_backward

from conftest import assert_close

ROOT = Path(__file__).resolve().parent.parent
GPU, GPU_WHY = cuda.gpu_status()

FLN = specs.get("FusedLayerNorm")
CONV = specs.get("YoloConvBnLeaky")
DECODE = specs.get("YoloDecode")
ANCHORS_13 = [116, 90, 156, 198, 373, 326]  # docs/ops.md, the stride-32 head
CONV_HARNESS = cuda.companion("YoloConvBnLeaky").module  # conv_geometry, conv_inputs
conv_inputs = CONV_HARNESS.conv_inputs


def _nvcc_or_skip():
    try:
        return native.nvcc_exe()
    except native.BuildError as e:
        pytest.skip(f"nvcc absent: {e}")


# -- runs everywhere -----------------------------------------------------------

def test_harness_and_tf_gpu_kernels_compile(tmp_path):
    """The harness builds through its real recipe (CMake + nvcc) and exports the C
    ABI; the three TensorFlow GPU kernel files compile with nvcc as the
    BRIDGE_CUDA=ON build compiles them (one translation unit here, to parse
    TensorFlow's headers once)."""
    nvcc = _nvcc_or_skip()
    result = {}

    def build_harness():
        try:
            result["lib"] = native.cuda_harness_build().library(quiet=True)
        except Exception as e:  # reported below, from the test's thread
            result["error"] = e

    worker = threading.Thread(target=build_harness)
    worker.start()
    try:
        tf_obj = _compile_tf_gpu_kernels(nvcc, tmp_path)
    finally:
        worker.join()
    if "error" in result:
        raise result["error"]
    import ctypes
    lib = ctypes.CDLL(str(result["lib"]))
    assert lib.bridge_cuda_abi_version() == cuda.ABI_VERSION
    for spec in specs.all_specs():
        for suffix in ("f32", "f16"):
            assert hasattr(lib, f"bridge_{spec.module}_{suffix}"), f"harness lacks bridge_{spec.module}_{suffix}"
    assert hasattr(lib, "bridge_fused_layer_norm_backward_f32")
    _c_abi_refuses_bad_calls(cuda.Harness(result["lib"]))
    if tf_obj is not None:
        symbols = subprocess.run(["nm", "-C", str(tf_obj)], capture_output=True, text=True).stdout
        for op in ("FusedLayerNormGpuOp", "FusedLayerNormGradGpuOp", "YoloConvBnLeakyGpuOp", "YoloDecodeGpuOp"):
            assert op in symbols, f"{op} missing from the compiled TF GPU kernels"


def _c_abi_refuses_bad_calls(k):
    """What the C side guards itself comes back as a message, never a crash;
    these are refused before any device is touched, so they run without a GPU."""
    import ctypes

    def refused(name, *args):
        assert getattr(k.lib, name)(*args) != 0, name
        return k.lib.bridge_cuda_last_error().decode()

    assert refused("bridge_fused_layer_norm_f32", None, None, None, None, 3, 0, 1e-5, None) == (
        "FusedLayerNorm: argument 'x': H must be >= 1 when there are rows, got rows=3, H=0")
    geometry = (ctypes.c_int64 * 15)(1, 5, 5, 3, 3, 3, 4, 5, 5, 0, 1, 1, 1, 1, 1)
    assert refused("bridge_yolo_conv_bn_leaky_f32", *[None] * 8, geometry, 1e-5, 0.1, 0, None).startswith(
        "YoloConvBnLeaky: argument 'strides': strides and dilations must be positive, got x [1,5,5,3]")
    anchors = (ctypes.c_float * 66)(*[1.0] * 66)
    assert refused("bridge_yolo_decode_f32", None, None, None, None, 1, 1, 1, anchors, 33, 1, 8, 1.0, None) == (
        "YoloDecode: argument 'anchors': the CUDA kernel takes 1..32 anchors (2...64 values), got 66 values")
    # a host pointer: without a GPU the driver check fails, with one the pointer check
    x = np.ones(8, np.float32)
    p = x.ctypes.data_as(ctypes.c_void_p)
    message = refused("bridge_fused_layer_norm_f32", p, p, p, p, 2, 4, 1e-5, None)
    assert "host memory" in message or "cudaPointerGetAttributes: CUDA error" in message, message
    with pytest.raises(RuntimeError, match=r"^FusedLayerNorm \(CUDA\): "):
        k._call("FusedLayerNorm", "bridge_fused_layer_norm", "float32", p, p, p, p, 2, 4, 1e-5, None)


def _compile_tf_gpu_kernels(nvcc, tmp_path):
    """nvcc on each CUDA core's tf_gpu.cu.cc (bridge.native.cuda_sources) with
    TensorFlow's flags, the include shim and paths of tf_ops/CMakeLists.txt and
    GOOGLE_CUDA=1. None (after a skip message) without TF."""
    try:
        import importlib.util
        if importlib.util.find_spec("tensorflow") is None:
            raise ImportError
    except ImportError:
        return None
    flags = subprocess.run([sys.executable, "-c", "import tensorflow as tf; print('\\n'.join(tf.sysconfig.get_compile_flags()))"],
                           capture_output=True, text=True, timeout=300,
                           env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}).stdout.split()
    include = native.cuda_include(nvcc)
    assert include is not None, "nvcc's include folder (cuda_runtime.h) not found"
    shim = tmp_path / "shim" / "third_party" / "gpus" / "cuda"
    shim.mkdir(parents=True)
    (shim / "include").symlink_to(include)
    sources = native.cuda_sources(native.TF_GPU_SOURCE)
    assert len(sources) == len(specs.all_specs()), [str(s) for s in sources]
    unity = tmp_path / "tf_gpu_kernels.cu.cc"
    unity.write_text("".join(f'#include "{s}"\n' for s in sources))
    cmd = [nvcc, "-x", "cu", "-std=c++17", "-O0", "--expt-relaxed-constexpr", "-arch=sm_90", "-DGOOGLE_CUDA=1",
           "-Xcompiler", "-fPIC", f"-I{tmp_path / 'shim'}", f"-I{ROOT / 'tf_ops'}", f"-I{ROOT / 'tf_ops' / 'cuda'}"]
    for f in flags:
        if f.startswith("-I"):
            cmd += ["-isystem", f[2:]]
        elif f.startswith("-D"):
            cmd.append(f)
    cmd += ["-isystem", str(native.cublas_include(nvcc)), "-c", str(unity), "-o", str(tmp_path / "tf_gpu.o")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"nvcc failed on the TF GPU kernels:\n{done.stderr[-4000:]}"
    return tmp_path / "tf_gpu.o"


def test_conv_geometry_follows_the_spec():
    shapes = [(1, 5, 7, 3), (3, 3, 3, 4)] + [(4,)] * 5
    geometry, out = CONV_HARNESS.conv_geometry(shapes, strides=[1, 2, 2, 1], padding="SAME")
    # SAME, stride 2: OH = ceil(5/2) = 3, OW = ceil(7/2) = 4; the padding totals
    # (2 and 2) split with the odd pixel at the end: 1 before on each axis.
    assert out == (1, 3, 4, 4)
    assert geometry == (1, 5, 7, 3, 3, 3, 4, 3, 4, 2, 2, 1, 1, 1, 1)
    geometry, out = CONV_HARNESS.conv_geometry(shapes, padding="EXPLICIT", explicit_paddings=[0, 0, 2, 0, 0, 1, 0, 0],
                                       dilations=[1, 2, 1, 1])
    assert out == (1, 3, 6, 4) and geometry[-2:] == (2, 0) and geometry[11:13] == (2, 1)
    shapes = [(1, 6, 6, 4), (1, 1, 4, 8)] + [(8,)] * 5
    assert CONV_HARNESS.conv_geometry(shapes, padding="VALID")[0][-2:] == (0, 0)


def test_conv_geometry_rejects_what_the_spec_rejects():
    with pytest.raises(OpError, match=r"YoloConvBnLeaky: argument 'filter': Cin mismatch"):
        CONV_HARNESS.conv_geometry([(1, 5, 5, 3), (3, 3, 2, 4)] + [(4,)] * 5)
    with pytest.raises(OpError, match=r"YoloConvBnLeaky: argument 'strides'"):
        CONV_HARNESS.conv_geometry([(1, 5, 5, 3), (3, 3, 3, 4)] + [(4,)] * 5, strides=[1, 0, 1, 1])


def test_backward_reference_matches_finite_differences(rng):
    """The formula the GPU backward is judged by, checked against central
    differences of the spec's own forward reference."""
    x = rng.normal(size=(3, 5)) * 2 + 1
    gamma, beta, dy = rng.normal(size=5), rng.normal(size=5), rng.normal(size=(3, 5))
    eps, step = 1e-3, 1e-6
    loss = lambda x_, g_, b_: float(np.sum(dy * FLN.reference(x_, g_, b_, epsilon=eps)))
    dx, dgamma, dbeta = reference_backward(dy, x, gamma, epsilon=eps)
    for value, grad, which in ((x, dx, 0), (gamma, dgamma, 1), (beta, dbeta, 2)):
        numeric = np.zeros_like(value)
        for i in np.ndindex(value.shape):
            args = [x.copy(), gamma.copy(), beta.copy()]
            args[which][i] += step
            up = loss(*args)
            args[which][i] -= 2 * step
            numeric[i] = (up - loss(*args)) / (2 * step)
        np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-7)


def test_host_arrays_are_refused_naming_op_and_argument(rng):
    """Checked before any device work, so it runs without a GPU too."""
    _nvcc_or_skip()
    k = cuda.harness()
    x, g = rng.normal(size=(2, 3)).astype(np.float32), rng.normal(size=3).astype(np.float32)
    with pytest.raises(OpError, match=r"^FusedLayerNorm: argument 'x': must be on a CUDA device, got cpu "
                                      r"\(a numpy array of shape \[2, 3\]\)"):
        k.fused_layer_norm(x, g, g)
    with pytest.raises(OpError, match=r"^YoloDecode: argument 'raw': must be a torch.Tensor or cupy.ndarray"):
        k.yolo_decode([[1.0]], anchors=ANCHORS_13, num_classes=1, stride=8)
    torch = pytest.importorskip("torch")
    if not GPU:
        with pytest.raises(OpError, match=r"^YoloConvBnLeaky: argument 'x': must be on a CUDA device, got cpu "
                                          r"\(shape \[1, 5, 5, 3\]\)"):
            k.yolo_conv_bn_leaky(torch.ones(1, 5, 5, 3), torch.ones(3, 3, 3, 4), *[torch.ones(4)] * 5)


def test_benchmark_rehearses_on_the_emulator():
    """benchmarks/cuda.py end to end at small shapes on CPU PyTorch and the
    emulator, so the GPU run finds a script that works; every row's agreement
    with PyTorch's float32 result within the dtype's bound."""
    pytest.importorskip("torch")
    _emulator_or_skip()
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "cuda.py"), "--emulate", "--repeat", "1",
                           "--inner", "1", "--json"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    import json
    doc = json.loads(done.stdout)
    assert doc["device"].startswith("CUDA emulator")
    ops_seen = {r["op"] for r in doc["rows"]}
    assert ops_seen == {"FusedLayerNorm", "FusedLayerNorm bwd", "YoloConvBnLeaky", "YoloConvBnLeaky tensor cores",
                        "YoloDecode"}, ops_seen
    bound = {"float32": 1e-5, "tf32": 2e-3, "float16": 4e-3}
    for r in doc["rows"]:
        assert r["target"] is None and r["ours_ms"] > 0 and r["base_ms"] > 0, r
        if r["versus"] != "d2d copy (floor)":
            assert r["err"] is not None and r["err"] <= bound[r["dtype"]], r


def test_without_a_gpu_the_reason_is_given():
    if GPU:
        pytest.skip(f"a GPU is here ({GPU_WHY})")
    assert GPU_WHY.startswith("no CUDA GPU: ")
    with pytest.raises(cuda.CudaUnavailable, match="no CUDA GPU"):
        cuda.require_gpu()
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "cuda.py")], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "needs a CUDA GPU" in done.stderr and "no CUDA GPU" in done.stderr


# -- on a GPU, and on the CPU emulator ------------------------------------------

def _emulator_or_skip():
    try:
        return cuda.emulator()
    except native.BuildError as e:
        pytest.skip(f"the CUDA emulator cannot be built here: {e}")


@pytest.fixture(scope="module", params=["gpu", "emulator"])
def backend(request):
    if request.param == "gpu":
        if not GPU:
            pytest.skip(GPU_WHY)
        return cuda.harness(), Device(emulated=False)
    return _emulator_or_skip(), Device(emulated=True)


@pytest.fixture
def k(backend):
    return backend[0]


@pytest.fixture
def dev(backend):
    return backend[1]


def _inputs(rng, dtype, *shapes):
    return [rng.normal(size=s).astype(dtype) for s in shapes]


def _table(spec, *, large=True):
    """(example, dtype) for each row of the op's case table (bridge/ops/<op>.py)."""
    return [pytest.param(e, dtype, id=f"{e.id}-{dtype}")
            for e in spec.examples() for dtype in e.dtypes if large or not e.large]


@pytest.mark.parametrize("example,dtype", _table(FLN))
def test_fused_layer_norm(k, dev, example, dtype):
    """The op's case table, large means among its rows."""
    x, gamma, beta = example.cast(dtype)
    y = dev.get(k.fused_layer_norm(dev.put(x), dev.put(gamma), dev.put(beta), **example.attrs))
    assert y.dtype == np.dtype(dtype)
    assert_close("FusedLayerNorm", y, FLN.reference(x, gamma, beta, **example.attrs), dtype, what=example.id)


# The kernel's roads beyond the table's rows: warp per row (H <= 256 vectors), block
# per row, the re-reading kernel, and H = 0.
FLN_ROAD_SHAPES = [(6, 768), (7, 1024), (2, 3000), (2, 40000), (5, 0)]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("shape", FLN_ROAD_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_fused_layer_norm_roads(k, dev, rng, shape, dtype):
    x, gamma, beta = _inputs(rng, dtype, shape, shape[-1:], shape[-1:])
    x = (rng.normal(size=shape) * 2 + 3).astype(dtype)
    y = dev.get(k.fused_layer_norm(dev.put(x), dev.put(gamma), dev.put(beta), epsilon=1e-5))
    assert_close("FusedLayerNorm", y, FLN.reference(x, gamma, beta, epsilon=1e-5), dtype)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_fused_layer_norm_unaligned_takes_the_scalar_road(k, dev, rng, dtype):
    x, gamma, beta = _inputs(rng, dtype, (6, 512), (512,), (512,))
    y = dev.get(k.fused_layer_norm(dev.misaligned(x), dev.put(gamma), dev.misaligned(beta)))
    assert_close("FusedLayerNorm", y, FLN.reference(x, gamma, beta), dtype)



@pytest.mark.parametrize("example,dtype", _table(FLN) + [
    pytest.param(e, "float32", id="65x1024-float32") for e in [None]])
def test_fused_layer_norm_backward(k, dev, rng, example, dtype):
    """The op's case table (and 65 rows: several blocks of the dgamma/dbeta sums)."""
    if example is None:
        x, gamma = rng.normal(size=(65, 1024)).astype(dtype), rng.normal(size=1024).astype(dtype)
        epsilon = 1e-5
    else:
        x, gamma, _ = example.cast(dtype)
        epsilon = FLN.resolve(example.attrs)["epsilon"]
    dy = rng.normal(size=x.shape).astype(dtype)
    dx, dgamma, dbeta = (dev.get(a) for a in k.fused_layer_norm_backward(dev.put(dy), dev.put(x), dev.put(gamma),
                                                                          epsilon=epsilon))
    ref = reference_backward(dy, x, gamma, epsilon=epsilon)
    for got, want, what in zip((dx, dgamma, dbeta), ref, ("dx", "dgamma", "dbeta")):
        assert_close("FusedLayerNorm", got, want, dtype, scale=BACKWARD_SCALE[dtype], what=what)


def test_fused_layer_norm_backward_is_deterministic(k, dev, rng):
    x, gamma, dy = (dev.put(a) for a in _inputs(rng, "float32", (300, 768), (768,), (300, 768)))
    first = [dev.get(a) for a in k.fused_layer_norm_backward(dy, x, gamma)]
    again = [dev.get(a) for a in k.fused_layer_norm_backward(dy, x, gamma)]
    for a, b in zip(first, again):
        assert np.array_equal(a, b)


# The kernel's roads beyond the table's rows: a 1x1 strided conv (im2col), and
# im2col in two chunks.
CONV_ROAD_CASES = [
    ((1, 6, 6, 4), (1, 1, 4, 8), {"strides": [1, 2, 2, 1]}),
    ((1, 160, 160, 96), (3, 3, 96, 16), {}),
]


def _conv_rows(*, large=True, roads=CONV_ROAD_CASES):
    """(arrays-maker, attrs, dtype): the op's case table, then the road cases."""
    rows = [pytest.param(lambda rng, dtype, e=e: list(e.cast(dtype)), e.attrs, dtype, id=f"{e.id}-{dtype}")
            for e in CONV.examples() for dtype in e.dtypes if large or not e.large]
    for xs, fs, attrs in roads:
        for dtype in ("float32", "float16"):
            rows.append(pytest.param(lambda rng, dtype, xs=xs, fs=fs: conv_inputs(rng, dtype, xs, fs), attrs, dtype,
                                     id=f"{'x'.join(map(str, xs))}-{'x'.join(map(str, fs))}-{dtype}"))
    return rows


@pytest.mark.parametrize("epilogue", [True, False], ids=["bias-epilogue", "bias-in-leaky-pass"])
@pytest.mark.parametrize("make,attrs,dtype", _conv_rows())
def test_yolo_conv_bn_leaky(k, dev, rng, make, attrs, dtype, epilogue):
    arrays = make(rng, dtype)
    y = dev.get(k.yolo_conv_bn_leaky(*(dev.put(a) for a in arrays), bias_epilogue=epilogue, **attrs))
    assert_close("YoloConvBnLeaky", y, CONV.reference(*arrays, **attrs), dtype)


def assert_tf32_close(y, arrays, attrs, what):
    """TF32 keeps 10 mantissa bits of each operand, so its products may differ from
    the exact ones by up to tf32_error_bound (2^-9 * sum |x| |w'|) on top of docs/ops.md's
    float32 bound: a bound no TF32 product can exceed and a wrong kernel cannot meet."""
    from bridge.ops.yolo_conv_bn_leaky import tf32_error_bound
    ref = CONV.reference(*arrays, **attrs)
    excess = CONV.tolerance["float32"].excess(y, ref, extra=tf32_error_bound(*arrays, **CONV.resolve(attrs)))
    assert excess <= 1, f"YoloConvBnLeaky {what}: error {excess:.2f}x the TF32 bound"


def test_tf32_bound_holds_and_is_not_vacuous(rng):
    """The TF32 bound the GPU results are held to, checked against operands
    truncated to TF32 by hand (the worst rounding), in float64."""
    from bridge.ops.yolo_conv_bn_leaky import conv2d_nhwc, fold, resolve_pads, tf32_error_bound
    arrays = conv_inputs(rng, "float32", (2, 9, 11, 16), (3, 3, 16, 8))
    attrs = CONV.resolve({"strides": [1, 2, 1, 1]})
    truncate = lambda a: (np.asarray(a, np.float32).view(np.uint32) & np.uint32(0xffffe000)).view(np.float32)
    x = np.asarray(arrays[0], np.float64)
    w, b = fold(*(np.asarray(a, np.float64) for a in arrays[1:]), attrs["epsilon"])
    pads, _ = resolve_pads(x.shape, w.shape, attrs["strides"], attrs["padding"], attrs["explicit_paddings"],
                           attrs["dilations"])
    z = conv2d_nhwc(truncate(x).astype(np.float64), truncate(w).astype(np.float64), pads, attrs["strides"][1:3],
                    attrs["dilations"][1:3]) + b
    y = np.where(z > 0, z, attrs["alpha"] * z)
    exact = CONV.reference(*arrays, **attrs)
    bound = tf32_error_bound(*arrays, **attrs)
    ratio = np.abs(y - exact) / bound
    assert ratio.max() <= 1.0, ratio.max()
    assert ratio.max() > 0.05, f"the bound is vacuous here: the worst error is {ratio.max():.3f} of it"


def test_yolo_conv_bn_leaky_tf32(k, dev, rng):
    """TF32 (opt-in) through cuBLASLt, within TF32's own error bound."""
    xs, fs = (1, 26, 26, 64), (3, 3, 64, 32)
    arrays = conv_inputs(rng, "float32", xs, fs)
    y = dev.get(k.yolo_conv_bn_leaky(*(dev.put(a) for a in arrays), allow_tf32=True))
    assert_tf32_close(y, arrays, {}, "TF32")


# The tensor-core road: the table (but its large row: long on the emulator), and
# several tiles along pixels and channels and several K slices (1x12x13x40 -> 70).
@pytest.mark.parametrize("make,attrs,dtype", _conv_rows(large=False, roads=[((1, 12, 13, 40), (3, 3, 40, 70), {})]))
def test_yolo_conv_bn_leaky_tensor_cores(k, dev, rng, make, attrs, dtype):
    """The implicit GEMM on tensor cores: float16 within docs/ops.md's bound; float32
    runs it in TF32 (the road needs TF32 allowed), so within TF32's bound."""
    arrays = make(rng, dtype)
    if k.emulated:
        k.emulator_stats(reset=True)
    y = dev.get(k.yolo_conv_bn_leaky(*(dev.put(a) for a in arrays), tensor_cores=True,
                                     allow_tf32=dtype == "float32", **attrs))
    if k.emulated and arrays[0].size and arrays[1].size:
        stats = k.emulator_stats()
        assert stats["gemms"] == 0 and stats["shuffles"] > 0, stats  # the warp matrix road ran, not cuBLASLt
    if dtype == "float32":
        assert_tf32_close(y, arrays, attrs, "tensor cores TF32")
    else:
        assert_close("YoloConvBnLeaky", y, CONV.reference(*arrays, **attrs), dtype, what="tensor cores")


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_yolo_conv_bn_leaky_tensor_cores_unaligned_input(k, dev, rng, dtype):
    """x one element off a 16-byte boundary: the gather takes scalar loads (a
    vector load there faults on a GPU; the emulator checks it)."""
    arrays = conv_inputs(rng, dtype, (1, 9, 10, 16), (3, 3, 16, 24))
    y = dev.get(k.yolo_conv_bn_leaky(dev.misaligned(arrays[0]), *(dev.put(a) for a in arrays[1:]),
                                     tensor_cores=True, allow_tf32=dtype == "float32"))
    if dtype == "float32":
        assert_tf32_close(y, arrays, {}, "tensor cores TF32, unaligned x")
    else:
        assert_close("YoloConvBnLeaky", y, CONV.reference(*arrays), dtype, what="tensor cores, unaligned x")


@pytest.mark.parametrize("example,dtype", _table(DECODE))
def test_yolo_decode(k, dev, example, dtype):
    (raw,) = example.cast(dtype)
    got = [dev.get(o) for o in k.yolo_decode(dev.put(raw), **example.attrs)]
    for g, want, what in zip(got, DECODE.reference(raw, **example.attrs), ("boxes", "objectness", "class_probs")):
        assert_close("YoloDecode", g, want, dtype, what=f"{example.id} {what}")


def test_bad_input_is_refused_with_the_op_and_argument(k, dev, rng):
    x, gamma, beta = _inputs(rng, "float32", (4, 8), (8,), (8,))
    if k.emulated:
        with pytest.raises(OpError, match=r"FusedLayerNorm: argument 'gamma': must be a numpy array for the CUDA "
                                          r"emulator, got list"):
            k.fused_layer_norm(dev.put(x), gamma.tolist(), dev.put(beta))
    else:
        with pytest.raises(OpError, match=r"FusedLayerNorm: argument 'gamma': must be on a CUDA device, got cpu"):
            k.fused_layer_norm(dev.put(x), gamma if dev.torch is None else dev.torch.from_numpy(gamma), dev.put(beta))
    with pytest.raises(OpError, match=r"FusedLayerNorm: argument 'beta': dtype float16 differs from x's float32"):
        k.fused_layer_norm(dev.put(x), dev.put(gamma), dev.put(beta.astype(np.float16)))
    with pytest.raises(OpError, match=r"FusedLayerNorm: argument 'gamma': must have shape \[H\]=\[8\]"):
        k.fused_layer_norm(dev.put(x), dev.put(gamma[:5]), dev.put(beta))
    with pytest.raises(OpError, match=r"FusedLayerNorm: argument 'T': dtype float64 is not one of"):
        k.fused_layer_norm(*(dev.put(a.astype(np.float64)) for a in (x, gamma, beta)))
    with pytest.raises(OpError, match=r"FusedLayerNorm: argument 'dy': must have the shape of x \[4, 8\]"):
        k.fused_layer_norm_backward(dev.put(x[:2]), dev.put(x), dev.put(gamma))
    with pytest.raises(OpError, match=r"YoloDecode: argument 'raw': last dim must be A\*\(5\+C\)"):
        k.yolo_decode(dev.put(np.ones((1, 2, 2, 7), np.float32)), anchors=ANCHORS_13, num_classes=2, stride=8)
    # past the CUDA kernel's own limit (anchors travel in its parameters)
    with pytest.raises(RuntimeError, match=r"YoloDecode \(CUDA\): YoloDecode: argument 'anchors': the CUDA kernel "
                                           r"takes 1..32 anchors"):
        k.yolo_decode(dev.put(np.ones((1, 1, 1, 33 * 6), np.float32)), anchors=[1.0] * 66, num_classes=1, stride=8)


# -- the emulator itself ---------------------------------------------------------

def test_emulator_runs_the_conv_fallback_road_when_cublaslt_refuses_the_epilogue(rng):
    """Where cuBLASLt offers no algorithm with the bias epilogue, the kernel asks
    again without it and adds the bias in the LeakyReLU pass."""
    e = _emulator_or_skip()
    # a shape no other test multiplies: the kernel caches the algorithm per shape
    arrays = conv_inputs(rng, "float32", (1, 9, 13, 5), (3, 3, 5, 7))
    e.emulator_stats(reset=True)
    e.emulator_refuse_bias_epilogue(True)
    try:
        y = e.yolo_conv_bn_leaky(*arrays, strides=[1, 2, 2, 1])
    finally:
        e.emulator_refuse_bias_epilogue(False)
    stats = e.emulator_stats()
    assert (stats["gemm_queries"], stats["gemms"], stats["gemms_with_bias"]) == (2, 1, 0), stats
    assert_close("YoloConvBnLeaky", y, CONV.reference(*arrays, strides=[1, 2, 2, 1]), "float32")
    e.yolo_conv_bn_leaky(*arrays, strides=[1, 2, 2, 1])
    assert e.emulator_stats()["gemms_with_bias"] == 1


@pytest.mark.parametrize("shape,mode", [((6, 768), "warp"), ((3, 1025), "block"), ((2, 40000), "re-read")])
def test_emulator_reductions_agree_whatever_warp_order(rng, shape, mode):
    """Each seed lets the warps run ahead of each other in another order; a
    reduction that depends on the order would differ between seeds."""
    e = _emulator_or_skip()
    x, gamma, beta = _inputs(rng, "float32", shape, shape[-1:], shape[-1:])
    results = []
    for seed in (1, 2, 3):
        e.emulator_seed(seed)
        e.emulator_stats(reset=True)
        results.append(e.fused_layer_norm(x, gamma, beta))
        stats = e.emulator_stats()
        assert stats["fiber_blocks"] >= 1 and stats["shuffles"] > 0, stats
        assert (stats["barriers"] > 0) == (mode != "warp"), stats  # a warp per row needs no block barrier
        assert stats["live_allocations"] == 0
    assert_close("FusedLayerNorm", results[0], FLN.reference(x, gamma, beta), "float32")
    for again in results[1:]:
        assert np.array_equal(results[0], again)


# Faults planted in a copy of the kernels (paths below tf_ops/cuda/, or below the
# op folders as ops/<op>/...), each one the emulator must expose. The faults of
# one library touch different kernels or roads, so they do not mask each other;
# the divergent shuffle breaks every reduction and gets its own.
PLANTED = {
    "races": [
        # GroupSum's leading barrier: a fast warp overwrites the block's partial
        # sums while a slow one still reads the previous reduction's (block road).
        ("common.cuh", "  __syncthreads();\n  if (lane == 0) scratch[warp] = v;", "  if (lane == 0) scratch[warp] = v;"),
        # The plan trusting any pointer to be 16-byte aligned (vector road).
        ("ops/fused_layer_norm/kernel.cuh", "for (const void* q : pointers) aligned = aligned && Aligned(q, 16);", ""),
        # The tensor-core gather trusting x to be 16-byte aligned.
        ("ops/yolo_conv_bn_leaky/tensor_cores.cuh", "g.cin % V == 0 && Aligned(x, 16)", "g.cin % V == 0"),
        # A class probability written one place further on: the last one lands past the end.
        ("ops/yolo_decode/kernel.cuh", "class_probs[row * p.num_classes + (k - 5)]",
         "class_probs[row * p.num_classes + (k - 4)]"),
    ],
    # Half a warp skipping a full-mask shuffle: a hang on a GPU.
    "divergence": [("common.cuh", "v += __shfl_xor_sync(0xffffffffu, v, offset);",
                    "if ((threadIdx.x & 31) < 16) v += __shfl_xor_sync(0xffffffffu, v, offset);")],
}


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """One emulator library per entry of PLANTED, built in parallel from a copy
    of tf_ops/'s CUDA folders and of the op folders' CUDA cores with the faults
    written in."""
    _emulator_or_skip()  # the real one builds: the headers and compiler are here
    jobs = []
    for name, faults in PLANTED.items():
        root = tmp_path_factory.mktemp(name)
        for folder in ("cuda", "cuda_harness", "cuda_emulator"):
            shutil.copytree(ROOT / "tf_ops" / folder, root / folder)
        for _, core in native.cuda_cores():
            shutil.copytree(core, root / "ops" / core.name)
        for file, old, new in faults:
            target = root / file if file.startswith("ops/") else root / "cuda" / file
            text = target.read_text()
            assert text.count(old) == 1, f"the planted fault no longer matches {file}: {old!r}"
            target.write_text(text.replace(old, new))
        lib = root / "libplanted.so"
        em = root / "cuda_emulator"
        on_cpu = []  # what cuda_emulator/CMakeLists.txt writes: each harness file after emulator.h
        harness_files = [root / "cuda_harness" / "harness.cu"] + [
            root / "ops" / core.name / native.HARNESS_SOURCE for _, core in native.cuda_cores()]
        for source in harness_files:
            on_cpu.append(root / f"on_cpu_{source.parent.name}_{source.stem}.cc")
            on_cpu[-1].write_text(f'#include "emulator.h"\n#include "{source}"\n')
        cmd = [native.cxx_compiler(), "-std=c++17", "-O1", "-w", "-fPIC", "-shared", f"-I{em}", f"-I{root / 'cuda'}",
               f"-I{root / 'cuda_harness'}", "-isystem", str(native.cuda_headers()), "-isystem",
               str(native.cublas_include()), *map(str, on_cpu), str(em / "emulator.cc"),
               str(em / "cublaslt.cc"), "-o", str(lib), "-ldl", "-Wl,-Bsymbolic"]
        jobs.append((name, lib, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)))
    out = {}
    for name, lib, job in jobs:
        log, _ = job.communicate(timeout=600)
        assert job.returncode == 0, f"building the {name!r} emulator failed:\n{log[-3000:]}"
        out[name] = cuda.Harness(lib, emulated=True)
    return out


def test_emulator_exposes_a_missing_barrier(planted, rng):
    e = planted["races"]
    x, gamma, beta = _inputs(rng, "float32", (4, 3000), (3000,), (3000,))
    want = FLN.reference(x, gamma, beta)
    errors = []
    for seed in (1, 2, 3, 4):
        e.emulator_seed(seed)
        errors.append(float(np.max(np.abs(e.fused_layer_norm(x, gamma, beta) - want))))
    assert max(errors) > 1e-2, f"the race went unseen: max errors {errors}"


def test_emulator_reports_a_misaligned_vector_access(planted, rng):
    e, dev = planted["races"], Device(emulated=True)
    x, gamma, beta = _inputs(rng, "float32", (3, 512), (512,), (512,))
    e.fused_layer_norm(x, gamma, beta)  # aligned: the planted plan is right by luck
    with pytest.raises(RuntimeError, match=r"FusedLayerNorm \(CUDA emulator\): kernel failed: ForwardKernel<.*: "
                                           r"misaligned 16-byte access at common.cuh:\d+ \(address % 16 = 4\)"):
        e.fused_layer_norm(dev.misaligned(x), gamma, beta)


def test_emulator_reports_a_misaligned_gather(planted, rng):
    e, dev = planted["races"], Device(emulated=True)
    arrays = conv_inputs(rng, "float16", (1, 5, 6, 16), (3, 3, 16, 8))
    with pytest.raises(RuntimeError, match=r"YoloConvBnLeaky \(CUDA emulator\): kernel failed: ImplicitGemmKernel<.*: "
                                           r"misaligned 16-byte access at common.cuh"):
        e.yolo_conv_bn_leaky(dev.misaligned(arrays[0]), *arrays[1:], tensor_cores=True)


def test_emulator_reports_a_write_past_the_output(planted, rng):
    e = planted["races"]
    raw = rng.normal(size=(1, 2, 2, 3 * 7)).astype(np.float32)
    with pytest.raises(RuntimeError, match=r"YoloDecode \(CUDA emulator\): a kernel wrote outside its output"):
        e.yolo_decode(raw, anchors=ANCHORS_13, num_classes=2, stride=32)


def test_emulator_reports_a_divergent_shuffle(planted, rng):
    e = planted["divergence"]
    x, gamma, beta = _inputs(rng, "float32", (2, 64), (64,), (64,))
    with pytest.raises(RuntimeError, match=r"FusedLayerNorm \(CUDA emulator\): kernel failed: ForwardKernel<.*"
                                           r"cannot go on: .*warp 0: 16 of 32 lanes at a shuffle"):
        e.fused_layer_norm(x, gamma, beta)


def test_emulator_keeps_its_own_runtime_next_to_tensorflow():
    """TensorFlow loads CUDA runtime stubs into the process; the emulator's
    stand-ins must still be the ones its kernels call (they bind inside it)."""
    pytest.importorskip("tensorflow")
    _emulator_or_skip()
    code = ("import tensorflow, numpy as np\n"
            "from bridge import cuda, ops\n"
            "x = np.random.default_rng(0).normal(size=(3, 5)).astype(np.float32); g = np.ones(5, np.float32)\n"
            "y = cuda.emulator().fused_layer_norm(x, g, g)\n"
            "print(float(np.abs(y - ops.get('FusedLayerNorm').reference(x, g, g)).max()))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert float(done.stdout.strip().splitlines()[-1]) < 1e-5, done.stdout


# -- bridge cuda -------------------------------------------------------------------

def test_bridge_cuda_checks_every_op_on_the_emulator():
    """`bridge cuda --emulate`: every op and road, all within bounds, as JSON; the
    table form ends with the count."""
    _emulator_or_skip()
    from bridge import cuda_check
    assert {c[0] for c in cuda_check.CHECKS} == {s.name for s in specs.all_specs()}, "an op without a CUDA check"
    done = subprocess.run([sys.executable, "-m", "bridge", "cuda", "--emulate", "--json"], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode in (0, 1) and done.stdout.startswith("{"), done.stdout[-3000:] + done.stderr[-3000:]
    import json
    doc = json.loads(done.stdout)
    seen = {(r["op"], r["road"], r["dtype"]) for r in doc["rows"]}
    for op, road, dtypes, _ in cuda_check.CHECKS:
        for dtype in dtypes:
            assert (op, road, dtype) in seen
    large_mean = [r for r in doc["rows"] if r["op"] == "FusedLayerNorm" and r["shape"].startswith("mean")]
    assert large_mean  # the rows of 3e4 + N(0,1) are checked too
    assert doc["emulated"] is True and doc["failed"] == 0 and done.returncode == 0
    assert all(r["verdict"] == "pass" and 0 <= r["excess"] <= 1 for r in doc["rows"])


def test_bridge_cuda_reports_broken_kernels_as_rows_on_the_emulator(planted):
    """On the kernels with planted faults the checks fail row by row (a wrong
    result as FAIL, a failed launch as an error), never with an exception."""
    from bridge import cuda_check
    rows = cuda_check.run_checks(planted["races"], cuda_check.Device(emulated=True))
    verdicts = {(r["op"], r["road"], r["dtype"], r["shape"]): r["verdict"] for r in rows}
    assert verdicts[("FusedLayerNorm", "forward", "float32", "odd-3x1025 3x1025")] == "FAIL"  # the missing barrier
    assert verdicts[("FusedLayerNorm", "forward", "float32", "eps-0.5 3x40")] == "pass"  # a warp per row needs none
    assert verdicts[("YoloDecode", "elementwise", "float32", "13x13-coco 1x13x13x255")].startswith(
        "error: YoloDecode (CUDA emulator): a kernel wrote outside its output")
    assert sum(r["verdict"] != "pass" for r in rows) < len(rows)


def test_bridge_cuda_says_why_it_cannot_build(monkeypatch, capsys):
    """A missing compiler or header ends `bridge cuda` with the build's message and status 1."""
    import argparse
    from bridge import cuda_check
    from bridge.commands import cuda as command

    def fail(emulate):
        raise native.BuildError("the CUDA headers (cuda_runtime.h, cuda_fp16.h) were not found. Fix: ...")
    monkeypatch.setattr(cuda_check, "choose", fail)
    assert command.run(argparse.Namespace(emulate=True, seed=0, json=False)) == 1
    assert capsys.readouterr().err.startswith("bridge cuda: the CUDA headers (cuda_runtime.h, cuda_fp16.h) were not found")
