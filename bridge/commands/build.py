"""`bridge build`: build the native libraries ahead of time."""
from __future__ import annotations

import json
import sys

NAME = "build"
TAKES_IMPORTS = False  # loads no model: --import is for the commands that do
HELP = "build the native libraries (TensorFlow ops, onnxruntime kernels) into the cache"
TARGETS = ("tf_ops", "ort")
# Built on request only: the CUDA kernels behind a C ABI (needs nvcc), and the same
# kernels for the CPU emulator (needs the CUDA headers, no GPU).
ON_REQUEST = ("cuda_harness", "cuda_emulator", "tflite")  # tflite: the LiteRT kernels (ai-edge-litert)


def add_arguments(p):
    p.add_argument("targets", nargs="*", metavar="TARGET",
                   help=f"what to build: {', '.join(TARGETS + ON_REQUEST)} (default: {', '.join(TARGETS)}), or the "
                        f"CMake folder of a team's TensorFlow or onnxruntime kernel library, or the folder of its LiteRT op files")
    p.add_argument("--force", action="store_true", help="rebuild even when the cache has the library")
    p.add_argument("--portable", action="store_true",
                   help="build without CPU-specific flags (-march=native), for other machines of this architecture")
    p.add_argument("--cuda", action="store_true", help="also build the TensorFlow GPU kernels (needs nvcc)")
    p.add_argument("--json", action="store_true",
                   help="print each library's build record (path, CPU flags, compiler, ...) as JSON")


def _is_folder(target: str) -> bool:
    import os
    from bridge.native import is_litert_folder
    return os.path.isfile(os.path.join(target, "CMakeLists.txt")) or is_litert_folder(target)


def run(args) -> int:
    from bridge import native
    from bridge.cli import UsageError
    targets = args.targets or list(TARGETS)
    unknown = [t for t in targets if t not in TARGETS + ON_REQUEST and not _is_folder(t)]
    if unknown:
        raise UsageError(f"unknown target {unknown[0]!r}; choose from {', '.join(TARGETS + ON_REQUEST)}, "
                         f"or give a team op library's CMake folder")
    portable = True if args.portable else None
    records = []
    try:
        for target in targets:
            if target == "tf_ops":
                b = native.tf_ops_build(cuda=args.cuda, portable=portable)
            elif target == "ort":
                b = native.ort_build(portable=portable)
            elif target == "cuda_harness":
                b = native.cuda_harness_build()
            elif target == "cuda_emulator":
                b = native.cuda_emulator_build()
            elif target == "tflite":
                b = native.litert_build(portable=portable)
            else:  # a team's TensorFlow or onnxruntime library: its CMake folder
                b = native.team_library_build(target, portable=portable)
            lib = b.library(force=args.force)
            info = native.read_build_info(lib)
            records.append({"target": target, "library": str(lib), **info})
            if not args.json:
                flags = " ".join(info.get("cpu_flags", [])) or "no CPU flags"
                print(f"{target}: {lib} ({info.get('cpu_mode', '?')}: {flags})")
    except native.BuildError as e:
        print(f"bridge build: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(records, indent=1))
    return 0
