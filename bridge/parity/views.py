"""What a ParityReport offers code: its numbers as rows (one per runtime x
output), the per-layer summaries, the first layer each runtime diverges at,
the CLI's text and a pandas DataFrame. A mixin of runner.ParityReport (its
fields: runtimes, per_layer, ...)."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

# Comparison fields a row carries (every number the CLI's table shows, and a few more)
ROW_FIELDS = ("shape", "dtype", "max_abs_error", "max_rel_error", "mean_abs_error", "cosine", "rmse", "allowed",
              "atol", "rtol", "failing", "worst_index", "worst_got", "worst_ref", "note")


class ReportViews:
    runtimes: list
    per_layer: bool

    @property
    def rows(self) -> List[Dict[str, Any]]:
        """One dict per runtime x output: runtime, status (the runtime's: reference,
        ok, loaded, unavailable, error), output, verdict (pass, FAIL,
        ill-conditioned; for a runtime that did not run, its status), passed, the
        metrics and `bound` (the error allowed at the worst element). A runtime
        without outputs (not run here, failed) is one row with output None and its
        reason."""
        out = []
        for r in self.runtimes:
            if not r.outputs:
                out.append({"runtime": r.name, "status": r.status, "output": None, "verdict": r.status,
                            "passed": r.passed, "bound": None, "reason": r.reason})
                continue
            for name, c in r.outputs.items():
                row = {"runtime": r.name, "status": r.status, "output": name, "verdict": c.status,
                       "passed": bool(c.passed), "bound": c.allowed, "reason": r.reason}
                row.update({k: getattr(c, k) for k in ROW_FIELDS})
                out.append(row)
        return out

    @property
    def layers(self) -> Dict[str, Any]:
        """{runtime: its LayerSummary (compared, failed, first_fail, last_pass,
        checks)} for the runtimes compared layer by layer (per_layer=True)."""
        return {r.name: r.layers for r in self.runtimes if r.layers is not None}

    @property
    def first_divergence(self) -> Dict[str, str]:
        """{runtime: the first layer (in the reference's order) beyond its bound},
        for each runtime whose per-layer comparison found one; {} when none did
        (or per_layer was off)."""
        return {name: s.first_fail.name for name, s in self.layers.items() if s.first_fail is not None}

    def table(self, colour: Optional[bool] = None) -> str:
        """The text `bridge parity` prints (colour: None = only on a terminal)."""
        from bridge.parity.report import render_report
        return render_report(self, colour)

    def to_pandas(self):
        """`rows` as a pandas DataFrame (pandas is optional: ImportError says so)."""
        try:
            import pandas
        except ImportError:
            raise ImportError("ParityReport.to_pandas needs pandas (pip install pandas); .rows has the same "
                              "numbers as dicts") from None
        return pandas.DataFrame(self.rows)

    def __str__(self) -> str:
        return self.table(colour=False)
