"""`bridge.build(...)`: what `bridge build` does, as a function: the native
libraries built into the cache ahead of time, one record per library."""
from __future__ import annotations

import os
from typing import Dict, List, Optional, Sequence, Union

from bridge.api.progress import ProgressArg, sink

TARGETS = ("tf_ops", "ort")
# Built on request only: the CUDA kernels behind a C ABI (needs nvcc), and the same
# kernels for the CPU emulator (needs the CUDA headers, no GPU).
ON_REQUEST = ("cuda_harness", "cuda_emulator", "tflite")  # tflite: the LiteRT kernels (ai-edge-litert)


def _is_folder(target: str) -> bool:
    from bridge.native import is_litert_folder
    return os.path.isfile(os.path.join(target, "CMakeLists.txt")) or is_litert_folder(target)


def build(targets: Union[None, str, Sequence[str]] = None, *, force: bool = False, portable: bool = False,
          cuda: bool = False, progress: ProgressArg = False) -> List[Dict]:
    """Builds (or finds in the cache) each target: "tf_ops", "ort" (the default
    pair), "cuda_harness", "cuda_emulator", "tflite", or the CMake folder of a
    team's TensorFlow or onnxruntime library, or its LiteRT op files' folder.
    Returns one record per library: {"target", "library", "cpu_flags",
    "cpu_mode", "compiler", ...} (`bridge build --json`). `force` rebuilds,
    `portable` drops the CPU flags, `cuda` adds TensorFlow's GPU kernels.
    `progress`: each library's line as it is built. Raises OptionError (an
    unknown target) or BuildError (a failed build, its cause and fix)."""
    from bridge import native
    from bridge.exporting import OptionError
    lines = sink(progress)
    targets = [targets] if isinstance(targets, str) else list(targets or TARGETS)
    unknown = [t for t in targets if t not in TARGETS + ON_REQUEST and not _is_folder(t)]
    if unknown:
        raise OptionError(f"unknown target {unknown[0]!r}; choose from {', '.join(TARGETS + ON_REQUEST)}, "
                          f"or give a team op library's CMake folder")
    mode: Optional[bool] = True if portable else None
    records = []
    for target in targets:
        if target == "tf_ops":
            b = native.tf_ops_build(cuda=cuda, portable=mode)
        elif target == "ort":
            b = native.ort_build(portable=mode)
        elif target == "cuda_harness":
            b = native.cuda_harness_build()
        elif target == "cuda_emulator":
            b = native.cuda_emulator_build()
        elif target == "tflite":
            b = native.litert_build(portable=mode)
        else:  # a team's TensorFlow or onnxruntime library: its CMake folder
            b = native.team_library_build(target, portable=mode)
        lib = b.library(force=force)
        info = native.read_build_info(lib)
        records.append({"target": target, "library": str(lib), **info})
        if lines is not None:
            flags = " ".join(info.get("cpu_flags", [])) or "no CPU flags"
            lines(f"{target}: {lib} ({info.get('cpu_mode', '?')}: {flags})")
    return records
