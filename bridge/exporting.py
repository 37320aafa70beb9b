"""What every exporter (bridge.converters.export_<to>) returns and raises, and the
stage lines it prints. The interface itself is written at the top of
bridge/commands/export.py.
"""
from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

from bridge.errors import BridgeError


class ExportError(BridgeError, RuntimeError):
    """The export failed (unsupported op, failed check); the message says why and
    what to do. The CLI prints it and exits 1."""

    exit_code = 1


class OptionError(BridgeError, ValueError):
    """An option this exporter cannot use (bad opset, mode...); the CLI exits 2."""


@dataclass
class Check:
    """One output verified: the exported model against TensorFlow on the same inputs."""

    output: str
    max_abs_error: float
    allowed: float              # the bound the error was held to
    passed: bool
    note: str = ""
    # pass | FAIL, or beyond the bound against TF float32 judged again against the model run in
    # float64 by bridge parity's rule (the note gives those numbers); ill-conditioned only where no
    # float64 run decides a saturated softmax whose arg-max flips (bridge.parity.conditioning)
    status: str = ""

    def __post_init__(self):
        if not self.status:
            self.status = "pass" if self.passed else "FAIL"


@dataclass
class ExportResult:
    """What `bridge.export(...)` (and each exporter) returns: the files written,
    what fusion did, the verification against TensorFlow and the time per stage."""

    output: str                                         # the main file (or folder) written
    format: str                                         # onnx | tflite | ge
    files: List[str] = field(default_factory=list)      # every file written
    summary: List[str] = field(default_factory=list)    # lines for people (what was exported)
    checks: List[Check] = field(default_factory=list)   # empty: nothing was verified
    seconds: Dict[str, float] = field(default_factory=dict)  # per stage
    details: Dict[str, Any] = field(default_factory=dict)    # JSON-able extras (fusion report, opset, ...)
    # why `checks` is empty although verification was asked for (e.g. no runtime
    # here can run the file); bridge.export says "--no-verify" where it was off
    not_verified: str = ""
    # why nothing was written (the verification failed: a file that fails its check
    # is not left where a deployment would pick it up); the render's last line says it
    not_written: str = ""

    @property
    def ok(self) -> bool:
        """Every output verified passes (within its bound, or as close to float64 as TF
        float32 itself; or ill-conditioned, with a note)."""
        return all(c.passed for c in self.checks)

    @property
    def timings(self) -> Dict[str, float]:
        """Seconds per stage (loading, fusing, converting, verifying, ...)."""
        return dict(self.seconds)

    @property
    def fusion(self) -> Optional[dict]:
        """The fusion report as a dict (bridge.converters.fuse_report.FuseReport.to_dict);
        None when the model was not fused (--no-fuse, or not a Keras model)."""
        report = self.details.get("fusion")
        if isinstance(report, str):
            try:
                report = json.loads(report)
            except ValueError:
                return None
        return report if isinstance(report, dict) else None

    @property
    def fused_ops(self) -> Dict[str, int]:
        """{fusion pattern: how many matches were fused}, patterns with none left out."""
        patterns = (self.fusion or {}).get("patterns", {})
        return {k: int(v.get("fused", 0)) for k, v in patterns.items() if v.get("fused")}

    @property
    def verification(self) -> List[Dict[str, Any]]:
        """One row per output: {output, max_error, bound, verdict, note}; verdict is
        pass, FAIL or ill-conditioned (as in the CLI's table)."""
        return [{"output": c.output, "max_error": c.max_abs_error, "bound": c.allowed, "verdict": c.status,
                 "note": c.note} for c in self.checks]

    @property
    def proto(self):
        """The ONNX model written (an onnx.ModelProto, as tf2onnx returns it, its
        external data loaded); None for targets that write no ONNX file."""
        path = self.output if self.format == "onnx" else self.details.get("onnx_file")
        if self.format == "ge" and not path:
            path = os.path.join(self.output, "model.onnx")
        if not path or not os.path.isfile(path):
            return None
        if getattr(self, "_proto", None) is None:
            import onnx
            self._proto = onnx.load(path)
        return self._proto

    def to_json(self) -> Dict[str, Any]:
        """What `bridge export --json` prints."""
        return {"output": self.output, "format": self.format, "files": self.files, "ok": self.ok,
                "checks": [dict(vars(c)) for c in self.checks],
                "not_verified": None if self.checks else (self.not_verified or "the exporter ran no checks"),
                "seconds": self.seconds, "details": self.details, "written": not self.not_written,
                "not_written": self.not_written or None}

    def render(self, colour: Optional[bool] = None) -> str:
        """What `bridge export` prints: the summary lines and the verification table."""
        from bridge.table import render
        lines = list(self.summary)
        if not self.checks:
            lines.append(f"not verified ({self.to_json()['not_verified']})")
            return "\n".join(lines)
        verdicts = {"pass": ("ok", "green"), "FAIL": ("FAILED", "red")}
        shown = [verdicts.get(c.status, (c.status, "yellow")) for c in self.checks]
        rows = [[c.output, c.max_abs_error, c.allowed, v] for c, (v, _) in zip(self.checks, shown)]
        colours = [[None, None, None, paint] for _, paint in shown]
        lines.append(render(["output", "max abs error vs TF", "allowed", "verdict"], rows, colours, colour=colour))
        for c in self.checks:
            # why it failed, or passes although beyond the bound against TF (the float64 verdict)
            if c.note and (c.status != "pass" or not c.max_abs_error <= c.allowed):
                lines.append(f"  {c.output}: {c.note}")
        if self.not_written:
            lines.append(f"{self.output}: not written: {self.not_written}")
        return "\n".join(lines)

    def table(self, colour: Optional[bool] = None) -> str:
        return self.render(colour)

    def __str__(self) -> str:
        return self.render(colour=False)


NOT_WRITTEN = "the verification failed (a file that fails its check is not written; --no-verify writes it unchecked)"


class Progress:
    """Stage lines with elapsed seconds on stderr, so a long export shows where it is:

        with progress.stage("converting"):
            ...
    """

    def __init__(self, enabled: bool = True, stream=None, prefix: str = "bridge export",
                 sink: Optional[Callable[[str], None]] = None):
        self.enabled = enabled
        self.stream = stream
        self.sink = sink            # receives each line instead of the stream
        self.prefix = prefix
        self.start = time.perf_counter()
        self.seconds: Dict[str, float] = {}

    def _print(self, text: str) -> None:
        if self.enabled:
            line = f"{self.prefix} [{time.perf_counter() - self.start:7.1f}s] {text}"
            if self.sink is not None:
                self.sink(line)
            else:
                print(line, file=self.stream or sys.stderr, flush=True)

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
