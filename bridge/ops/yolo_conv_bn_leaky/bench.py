"""YoloConvBnLeaky's benchmark rows and its onnxruntime road (numbers: benchmarks/RESULTS.md).

Rows: (label, input shapes, attributes, in --quick), YOLOv3's layers; ORT_ rows
take the ONNX node's attributes (benchmarks/onnx_ops.py), LITERT_ rows
TensorFlow's (benchmarks/tflite.py)."""

# onnxruntime road for kernels="fastest" (onnx_plugins/__init__.py): the native
# kernel on oneDNN; without oneDNN it is the library's own GEMM, slower than the function
FASTEST = "native"
FASTEST_WITHOUT_ONEDNN = "function"
# On a CPU without AVX-512 (bridge.cpu_flags.AVX512_CORE) oneDNN has no f32 brgemm, so no
# Winograd road, and its AVX2 direct convolutions are behind onnxruntime's NCHWc ones: AMD
# Zen 3, 2 threads, whole YOLOv3-416 function 434-459 ms vs native 526-550; per layer 3x3 s1
# 0.83-0.90x, s2 and 1x1 1.04-1.07x, and a mix loses more in transposes than it gains
FASTEST_WITHOUT_AVX512 = "function"


def litert_prefers_builtins(input_shapes, attrs, avx512=True) -> bool:
    """The TFLite export's `fastest` mode (converters/export_tflite.py): whether this
    convolution goes to builtins, on a CPU with AVX-512 or without it (`avx512`:
    bridge.cpu_flags.has_avx512_core). With AVX-512 only a pointwise one: there
    XNNPack's f32 GEMM beats oneDNN's brgconv_1x1 (custom vs XNNPack 0.87-0.96x on AMD
    Zen 5 and Intel Sapphire Rapids), while 3x3 layers run 1.5-1.75x faster custom.
    Without it (AVX2: oneDNN's AVX2 kernels) every layer of YOLOv3-416 but the first
    runs at 0.65-1.02x XNNPack's speed on AMD Zen 3, weighted 0.90x; the first, 3 input
    channels, runs 2.56x faster custom (benchmarks/RESULTS.md, issue 28)."""
    filt = input_shapes[1] if len(input_shapes) > 1 else None
    if filt is None or len(filt) != 4:
        return False
    if tuple(filt[:2]) == (1, 1):
        return True
    return not avx512 and filt[2] is not None and filt[2] >= 8


# benchmarks/onnx_ops.py's extra native roads: oneDNN on its own OpenMP team (the
# road before its pieces ran on the session's threads), beside the default
ORT_BENCH_NATIVE_VARIANTS = {"native-openmp": {"BRIDGE_DNNL_THREADS": "openmp"}}


def _ort_row(x, cout, k, s, pads, quick):
    label = f"{'x'.join(map(str, x))}->{cout} {k}x{k}" + (f" s{s}" if s > 1 else "")
    attrs = {"strides": [s, s], "pads": pads, "dilations": [1, 1], "epsilon": 1e-5, "alpha": 0.1}
    return label, [x, (k, k, x[-1], cout)] + [(cout,)] * 5, attrs, quick


ORT_BENCH_SHAPES = [_ort_row((1, 416, 416, 32), 64, 3, 2, [1, 1, 0, 0], True),
                    _ort_row((1, 104, 104, 128), 128, 3, 1, [1, 1, 1, 1], True),
                    _ort_row((1, 13, 13, 512), 1024, 3, 1, [1, 1, 1, 1], False),
                    _ort_row((1, 52, 52, 256), 128, 1, 1, [0, 0, 0, 0], False)]

LITERT_BENCH_SHAPES = [(f"{n}x{n}x{cin}->{cout} k{k} s{s}", [(1, n, n, cin), (k, k, cin, cout)] + [(cout,)] * 5,
                        {"strides": [1, s, s, 1], "padding": "SAME"}, quick)
                       for n, cin, cout, k, s, quick in [(52, 256, 512, 3, 1, True), (26, 512, 256, 1, 1, True),
                                                         (104, 128, 256, 3, 1, False), (208, 64, 128, 3, 2, False)]]
