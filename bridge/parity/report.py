"""A ParityReport for people: one row per runtime x output, the per-layer
summary, and a one-line verdict. Where the model ran in float64 every number
is against that run (bridge.parity.truth), and its row (tf-float64) holds TF
float32's own distance from it: the floor each runtime is held to."""
from __future__ import annotations

from typing import List, Optional

from bridge.parity.conditioning import ILL_CONDITIONED
from bridge.parity.truth import NAME as FLOAT64, RULE
from bridge.table import render


def _short(text: str, width: int = 100) -> str:
    """The table keeps reasons to one short line; the JSON has them whole."""
    return text if len(text) <= width else text[:width - 3] + "..."


def _idx(index) -> str:
    return "-" if index is None else "[" + ",".join(map(str, index)) + "]"


HEADERS = ["runtime", "output", "shape", "max abs", "max rel", "rmse", "p99", "cosine", "past bound", "worst at",
           "got / ref", "allowed", "result"]


def _numbers(c) -> list:
    return [c.max_abs_error, c.max_rel_error, c.rmse, c.p99, c.cosine, f"{c.past_bound}/{c.size}",
            _idx(c.worst_index), _got_ref(c), c.allowed]


def outputs_table(report, colour: Optional[bool] = None) -> str:
    rows: List[list] = []
    paints: List[list] = []
    blank = [None] * (len(HEADERS) - 1)
    for r in report.runtimes:
        if r.status == "reference" and r.outputs:  # the float64 run: TF float32's own distance from it
            for out, c in r.outputs.items():
                rows.append([r.name, out, "x".join(map(str, c.shape)) or "scalar", *_numbers(c),
                             f"TF float32 vs float64, the floor ({r.run_s:.2f}s)"])
                paints.append(blank + ["dim"])
            continue
        if r.status == "reference":
            rows.append([r.name, "(all)"] + [""] * (len(HEADERS) - 3) + [f"reference ({r.run_s:.2f}s)"])
            paints.append(blank + ["dim"])
            continue
        if not r.outputs:
            rows.append([r.name, "-"] + [""] * (len(HEADERS) - 3) + [_short(f"{r.status}: {r.reason}")])
            bad = r.status == "error" or r.required
            paints.append(blank + ["red" if bad else "yellow"])
            continue
        for out, c in r.outputs.items():
            rows.append([r.name, out, "x".join(map(str, c.shape)) or "scalar", *_numbers(c), _result(c)])
            paints.append(blank + ["yellow" if c.status == ILL_CONDITIONED else "green" if c.passed else "red"])
    return render(HEADERS, rows, paints, colour=colour, align="llrrrrrrrlrrl")


def _got_ref(c) -> str:
    return "" if c.worst_got is None else f"{c.worst_got:.6g} / {c.worst_ref:.6g}"


def _result(c) -> str:
    """pass / FAIL with the count, and what the note adds (a NaN or Inf, and on which side)."""
    if c.status == ILL_CONDITIONED:
        return _short(c.note if c.note.startswith(ILL_CONDITIONED) else f"{ILL_CONDITIONED}: {c.note}")
    if c.passed:
        return f"pass ({c.note})" if c.note else "pass"
    return _short(f"FAIL: {c.note}") if c.note else f"FAIL ({c.failing} el., {c.excess:.3g}x allowed)"


def _layer(check) -> str:
    """A layer, and the source layers it covers when a fused op stands for several."""
    if len(check.covers) > 1:
        return f"{check.name} (fused: {'+'.join(check.covers)})"
    return check.name


def layers_table(report, colour: Optional[bool] = None) -> str:
    headers = ["runtime", "layers", "failed", "last pass", "first fail", "its max abs", "at node"]
    rows, paints = [], []
    for r in report.runtimes:
        if r.layers is None:
            continue
        s = r.layers
        ff = s.first_fail
        if r.name == FLOAT64:  # TF float32 against float64: where float32 itself leaves the bound
            past = [c for c in s.checks if c.comparison.past_bound]
            rows.append([r.name, s.compared, "-", "", f"(TF float32 itself past the bound at {len(past)} layers"
                         + (f", first {past[0].name})" if past else ")"), "", ""])
            paints.append([None] * 4 + ["dim", None, None])
            continue
        if not s.compared:
            rows.append([r.name, 0, 0, "-", f"(0 of {s.reference_layers} layers matched: the runtime exposes no "
                         f"intermediate tensors it shares with the reference)", "", ""])
            paints.append([None] * 7)
            continue
        rows.append([r.name, s.compared, s.failed, s.last_pass.name if s.last_pass else "-",
                     _layer(ff) if ff else "-", ff.comparison.max_abs_error if ff else "",
                     (ff.node or ff.tensor) if ff else ""])
        paints.append([None] * 4 + ["red" if ff else "green", None, None])
    if not rows:
        return "per layer: no runtime exposes intermediate tensors shared with the reference"
    return render(headers, rows, paints, colour=colour, align="lrrllrl")


def verdict(report) -> str:
    if report.problem:
        return f"FAIL: {report.problem}"
    compared = [r for r in report.runtimes if r.compared]
    failed = [r for r in report.runtimes if not r.passed]
    skipped = [r.name for r in report.runtimes if r.status == "unavailable" and not r.required]
    n_out = len(next(iter(compared)).outputs) if compared else 0
    tail = f"; not run here: {', '.join(skipped)}" if skipped else ""
    ill = [r for r in compared if any(c.status == ILL_CONDITIONED for c in r.outputs.values())]
    if not failed and ill:
        why = next(c.note for r in ill for c in r.outputs.values() if c.status == ILL_CONDITIONED)
        agree = len(compared) - len(ill)
        others = f" ({agree} other{'s agree' if agree != 1 else ' agrees'})" if agree else ""
        return (f"ILL-CONDITIONED: {', '.join(r.name for r in ill)} differ{'s' if len(ill) == 1 else ''} from "
                f"{report.reference} by what float32 rounding explains, not judged{others}; {why}{tail}")
    judged = any(r.name == FLOAT64 and r.status == "reference" for r in report.runtimes)
    if not failed and judged:
        return (f"PASS: {len(compared)} runtime{'s agree' if len(compared) != 1 else ' agrees'} with the model in "
                f"float64 ({FLOAT64}) on {n_out} output{'s' if n_out != 1 else ''}, each within the bound or {RULE}"
                f"{tail}")
    if not failed:
        return (f"PASS: {len(compared)} runtime{'s agree' if len(compared) != 1 else ' agrees'} with {report.reference} "
                f"on {n_out} output{'s' if n_out != 1 else ''}{tail}")
    parts = []
    for r in failed:
        if r.status in ("ok", "loaded"):
            bad = [k for k, c in r.outputs.items() if not c.passed]
            first = _layer(r.layers.first_fail) if r.layers and r.layers.first_fail else None
            parts.append(f"{r.name} differs on {', '.join(bad)}" + (f" (first at layer {first})" if first else ""))
        else:
            parts.append(f"{r.name} {r.status}")
    if ill:
        parts.append(f"{', '.join(r.name for r in ill)} {ILL_CONDITIONED}")
    return f"FAIL: {'; '.join(parts)}{tail}"


def render_report(report, colour: Optional[bool] = None) -> str:
    shapes = ", ".join(f"{k} {'x'.join(map(str, s))} {d}" for k, (s, d) in report.inputs.items())
    lines = [f"model {report.model} ({report.kind}), reference {report.reference or '-'}, seed {report.seed}, "
             f"inputs: {shapes}", "", outputs_table(report, colour)]
    judged = any(r.name == FLOAT64 and r.status == "reference" for r in report.runtimes)
    lines.insert(1, f"judge: the model in float64 ({FLOAT64}); an element passes within the bound or {RULE}"
                 if judged else f"judge: {report.reference or '-'} (no float64 run: "
                 f"{getattr(report, 'no_float64', '') or 'see the notes'})")
    if getattr(report, "task", None):  # --task: answer-level agreement (bridge.parity.task)
        lines += ["", report.task.table(colour)]
    if report.per_layer:
        lines += ["", layers_table(report, colour)]
    lines += ["", verdict(report) + f"  [{report.seconds:.1f}s]"]
    return "\n".join(lines)
