"""A team's own LiteRT kernels (`--litert-library DIR`).

DIR holds one .cc per op, written like bridge's own op files
(litert/native/*.cc) against litert/native/common.h's Node API, or
is one kernel core (DIR/kernel.h, bridge's op ABI), served by the generic host.
LiteRT registers the custom ops of one library per compiled model, so the team's
files are compiled into a build of bridge's LiteRT library of their own
(bridge.native.litert_library_build: cached apart, keyed by the team's files),
which then holds bridge's ops and the team's. `add(...)` builds it, self-tests
it like bridge's own, and checks that it serves at least one of the team's ops
(specs not built into bridge); from then on everything that runs LiteRT custom
kernels in this process (bridge.litert.runtime.library(): `bridge export --to
tflite --mode custom`'s check, the `tflite-custom` parity runtime, `bridge ops`)
uses that build instead of bridge's own.
"""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional, Tuple

from bridge import ops as _specs
from bridge.errors import LibraryError

FLAG = "--litert-library"

_folder: Optional[Path] = None  # the team folder of the build in use; None: bridge's own
_ops: Tuple[str, ...] = ()       # the team's ops that build serves


class LiteRTLibraryError(LibraryError):
    """A team's LiteRT op folder that cannot be used as given."""


def team_specs() -> List:
    return [s for s in _specs.all_specs() if not _specs.is_builtin(s)]


def build(portable: Optional[bool] = None):
    """The bridge.native.Build of the team's folder (after add), else None."""
    if _folder is None:
        return None
    from bridge import native
    return native.litert_library_build(_folder, portable=portable)


def add(path) -> List[str]:
    """Builds bridge's LiteRT kernels with the op files in `path`, self-tested,
    and makes that build the one in use; returns the team's ops it serves."""
    global _folder, _ops
    from bridge import native
    from bridge.litert import runtime
    p = Path(path).expanduser()
    if not native.is_core_folder(p) and (not p.is_dir() or not any(p.glob("*.cc"))):
        raise LiteRTLibraryError(f"{FLAG} {path}: not a folder of .cc files (one per op, written against "
                                 f"litert/native/common.h) nor a kernel core (kernel.h)")
    previous = (_folder, _ops)
    _folder = p.resolve()
    runtime.use_build(build)  # build() follows _folder: bridge's own again once it is None
    try:
        served = runtime.served_ops(runtime.library())
    except (native.BuildError, runtime.LiteRTError) as e:
        _folder, _ops = previous
        raise LiteRTLibraryError(f"{FLAG} {path}: {e}") from None
    team = team_specs()
    found = [s.name for s in team if s.name in served and served[s.name] is None]
    if not found:
        _folder, _ops = previous
        wanted = ", ".join(s.name for s in team) or "none (give the op's spec with --op-spec)"
        own = {s.name for s in _specs.all_specs() if _specs.is_builtin(s)}
        theirs = ", ".join(f"{op} ({why})" if why else op for op, why in sorted(served.items()) if op not in own)
        raise LiteRTLibraryError(
            f"{FLAG} {path} serves no kernel for the team's ops: {wanted} (its files register: "
            f"{theirs or 'no op of their own'}). Each op file's OpDef must carry its spec's name")
    _ops = tuple(found)
    return found


def folder() -> Optional[Path]:
    """The team folder of the build in use, or None (bridge's own)."""
    return _folder


def served() -> Tuple[str, ...]:
    """The team's ops the build in use serves."""
    return _ops


def forget() -> None:
    """Back to bridge's own build (tests)."""
    global _folder, _ops
    _folder, _ops = None, ()


__all__ = ["FLAG", "LiteRTLibraryError", "add", "build", "folder", "forget", "served", "team_specs"]
