"""Where a parity run spends its time and memory: every memoised build of the
source (fusing, each export, each conversion) and each runtime's prepare and
run, with wall time and the peak resident memory reached during the stage.

Peak memory is Linux's VmHWM (ru_maxrss elsewhere): by default the process's
peak so far at the end of each stage, so the stage where it jumps is the one
to blame. With `per_stage_peaks` (benchmarks/parity.py) each stage resets the
counter through `/proc/self/clear_refs` and reports its own peak; that also
resets what /usr/bin/time and getrusage report, hence opt-in; the log itself
keeps the process's overall peak (`peak_mb`). Stages nest (an export runs inside the prepare of the
first runtime that needs it): a stage's peak covers its inner stages.
"""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import time
from dataclasses import dataclass
from typing import Iterator, List, Optional


@dataclass
class Stage:
    name: str
    seconds: float
    peak_rss_mb: Optional[float]   # None where the platform does not say
    depth: int = 0                 # nesting level (0: top)
    cpu_seconds: float = 0.0       # the process's CPU time (every thread) during the stage: load on a shared
    #                                machine stretches the wall time, much less this

    def to_json(self) -> dict:
        return {"stage": self.name, "seconds": round(self.seconds, 3), "cpu_seconds": round(self.cpu_seconds, 3),
                "depth": self.depth, "peak_rss_mb": None if self.peak_rss_mb is None else round(self.peak_rss_mb, 1)}


def _status_kb(field: str) -> Optional[int]:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def peak_rss_mb() -> Optional[float]:
    """The process's peak resident memory since the last reset, in MB."""
    kb = _status_kb("VmHWM")
    if kb is not None:
        return kb / 1024
    try:
        import resource
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux
    except (ImportError, OSError):
        return None


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # 5: reset the peak RSS (VmHWM) to the current RSS
        return True
    except OSError:
        return False


class StageLog:
    def __init__(self, per_stage_peaks: bool = False) -> None:
        self.per_stage_peaks = per_stage_peaks
        self.stages: List[Stage] = []
        self._open: List[float] = []   # the peak seen so far by each open stage
        self.process_peak_mb: Optional[float] = peak_rss_mb()

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        if self._open:  # the enclosing stage keeps what it reached before this one resets the counter
            self._open[-1] = max(self._open[-1], peak_rss_mb() or 0.0)
        self._note_process_peak()
        if self.per_stage_peaks:
            _reset_peak()
        row = Stage(name, 0.0, None, len(self._open))
        self.stages.append(row)  # in start order: an outer stage above its inner ones
        self._open.append(0.0)
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            row.seconds = time.perf_counter() - t0
            row.cpu_seconds = time.process_time() - c0
            now = peak_rss_mb()
            row.peak_rss_mb = max(self._open.pop(), now) if now is not None else None
            if self._open and row.peak_rss_mb is not None:
                self._open[-1] = max(self._open[-1], row.peak_rss_mb)
            self._note_process_peak(row.peak_rss_mb)

    def _note_process_peak(self, value: Optional[float] = None) -> None:
        value = value if value is not None else peak_rss_mb()
        if value is not None:
            self.process_peak_mb = max(self.process_peak_mb or 0.0, value)

    def peak_mb(self) -> Optional[float]:
        """The highest resident memory seen in any stage (or before)."""
        self._note_process_peak()
        return self.process_peak_mb

    def to_json(self) -> List[dict]:
        return [s.to_json() for s in self.stages]


_LIBC = None


def release_heap(collect: bool = False) -> None:
    """Gives the heap pages freed so far back to the system (glibc's
    malloc_trim; nothing elsewhere). glibc keeps freed memory mapped: after a
    TFLite conversion of YOLOv3-416, ~5 GB that every later stage would
    otherwise sit on top of. `collect`: a garbage collection first, for what
    only reference cycles still hold (Keras models, traced graphs)."""
    global _LIBC
    if collect:
        import gc
        gc.collect()
    try:
        if _LIBC is None:
            _LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        _LIBC.malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        _LIBC = False
