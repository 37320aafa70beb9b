"""bridge's TFLite kernels as LiteRT custom ops (native/: the C++ library,
built by bridge.native.litert_build; runtime.py: running a .tflite with them)."""
from __future__ import annotations

from typing import Dict


def backend_status(spec) -> Dict[str, str]:
    """The TFLite column of `bridge ops`: every op lowers to builtins; "yes" where
    the LiteRT kernel library is built, self-tested and runs the op as a custom
    op. Reads the cache only (never builds)."""
    from bridge import ops
    lowered = "lowered only"
    try:
        from bridge.litert import runtime
        lib = runtime.library(build=False)
        why = runtime.served_ops(lib).get(spec.name, "not in the library")
    except Exception as e:  # not built, failed self-test, no LiteRT: the lowered road still runs
        return {"tflite": f"{lowered} (custom kernels: {str(e).splitlines()[0][:70]})"}
    from bridge.litert import team_libraries
    if why is None and spec.name in team_libraries.served():  # where from, as the ORT column says
        return {"tflite": f"yes ({team_libraries.folder().name}/)"}
    if why == "not in the library" and not ops.is_builtin(spec):
        why += f"; a team's own: {team_libraries.FLAG} DIR"
    return {"tflite": "yes" if why is None else f"{lowered} (custom kernel: {why})"}
