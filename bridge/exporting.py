"""What every exporter (bridge.converters.export_<to>) returns and raises, and the
stage lines it prints. The interface itself is written at the top of
bridge/commands/export.py.
"""
from __future__ import annotations

import contextlib
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List


class ExportError(RuntimeError):
    """The export failed (unsupported op, failed check); the message says why and
    what to do. The CLI prints it and exits 1."""


class OptionError(ValueError):
    """An option this exporter cannot use (bad opset, mode...); the CLI exits 2."""


@dataclass
class Check:
    """One output verified: the exported model against TensorFlow on the same inputs."""

    output: str
    max_abs_error: float
    allowed: float              # the bound the error was held to
    passed: bool
    note: str = ""
    # pass | FAIL | ill-conditioned: TF float32 itself is as far from the model's float64
    # answer (bridge.parity.conditioning); such an output passes, and the note says why
    status: str = ""

    def __post_init__(self):
        if not self.status:
            self.status = "pass" if self.passed else "FAIL"


@dataclass
class ExportResult:
    output: str                                         # the main file (or folder) written
    format: str                                         # onnx | tflite | ge
    files: List[str] = field(default_factory=list)      # every file written
    summary: List[str] = field(default_factory=list)    # lines for people (what was exported)
    checks: List[Check] = field(default_factory=list)   # empty: nothing was verified
    seconds: Dict[str, float] = field(default_factory=dict)  # per stage
    details: Dict[str, Any] = field(default_factory=dict)    # JSON-able extras (fusion report, opset, ...)
    # why `checks` is empty although verification was asked for (e.g. no runtime
    # here can run the file); the command reports --no-verify itself
    not_verified: str = ""

    @property
    def ok(self) -> bool:
        return all(c.passed for c in self.checks)


class Progress:
    """Stage lines with elapsed seconds on stderr, so a long export shows where it is:

        with progress.stage("converting"):
            ...
    """

    def __init__(self, enabled: bool = True, stream=None, prefix: str = "bridge export"):
        self.enabled = enabled
        self.stream = stream
        self.prefix = prefix
        self.start = time.perf_counter()
        self.seconds: Dict[str, float] = {}

    def _print(self, text: str) -> None:
        if self.enabled:
            stream = self.stream or sys.stderr
            print(f"{self.prefix} [{time.perf_counter() - self.start:7.1f}s] {text}", file=stream, flush=True)

    def note(self, text: str) -> None:
        self._print(text)

    @contextlib.contextmanager
    def stage(self, name: str):
        self._print(f"{name} ...")
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0
        self._print(f"{name} done in {self.seconds[name]:.1f} s")


def quiet() -> Progress:
    return Progress(enabled=False)
