"""`bridge parity --report DIR`: one self-contained HTML page (DIR/report.html;
no script, no network, no file besides it; plots as inline SVG made with
matplotlib, the `report` extra).

What it shows: the verdict and the judge; the verdict table; the first
divergence per runtime; per runtime its error against float64 by layer depth
(max error / bound, log scale) over TF float32's own curve (the floor) and
the FACTOR x band a runtime may reach; per output a histogram of each
runtime's error, and for image-like outputs (N,H,W,C) a heatmap of where the
error is (mean over N and C of error / allowed per pixel).

Every name in the page comes from the model (untrusted: bridge/untrusted.py)
and is HTML-escaped; none is drawn into a plot (matplotlib would read `$` as
math), where layers are numbered by depth instead.
"""
from __future__ import annotations

import html
import io
import os
from typing import List

import numpy as np

from bridge import atomic
from bridge.parity import compare as cmp
from bridge.parity.report import HEADERS, _numbers, _result, verdict
from bridge.parity.truth import FACTOR, NAME as FLOAT64, RULE

FILE = "report.html"

STYLE = """
body{font-family:sans-serif;margin:24px;color:#222;max-width:1400px}
h1{font-size:22px} h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ccc}
table{border-collapse:collapse;font-size:12px} td,th{border:1px solid #ddd;padding:3px 6px;text-align:right}
td.l,th.l{text-align:left} .pass{background:#e3f6e3} .FAIL{background:#fbe0e0} .other{background:#fff6d6}
.verdict{font-size:16px;padding:8px;border-radius:4px} .grid{display:flex;flex-wrap:wrap;gap:12px}
.grid figure{margin:0} figcaption{font-size:12px;text-align:center}
"""


class ReportError(RuntimeError):
    """The report cannot be made here (matplotlib missing); the message says how to get it."""


def require() -> None:
    """ReportError unless the page can be drawn here."""
    try:
        import matplotlib.figure  # noqa: F401
    except ImportError:
        raise ReportError("--report needs matplotlib: pip install 'bridge-ops[report]' (or pip install matplotlib)") \
            from None


def _figure(width: float, height: float):
    require()
    from matplotlib.figure import Figure
    return Figure(figsize=(width, height), dpi=96)


def _svg(fig) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    text = buf.getvalue()
    return text[text.index("<svg"):]  # inline: no XML prolog or DOCTYPE


def _e(text) -> str:
    return html.escape(str(text), quote=True)


def _cell(v) -> str:
    if isinstance(v, float):
        return _e(f"{v:.3g}")
    return _e(v)


def _verdict_table(report) -> str:
    head = "".join(f"<th class='l'>{_e(h)}</th>" if i < 3 or i == len(HEADERS) - 1 else f"<th>{_e(h)}</th>"
                   for i, h in enumerate(HEADERS))
    rows = []
    for r in report.runtimes:
        if not r.outputs:
            what = "reference" if r.status == "reference" else f"{r.status}: {r.reason}"
            rows.append(f"<tr class='other'><td class='l'>{_e(r.name)}</td><td class='l' colspan='{len(HEADERS) - 1}'>"
                        f"{_e(what)}</td></tr>")
            continue
        for out, c in r.outputs.items():
            result = "TF float32 vs float64, the floor" if r.status == "reference" else _result(c)
            klass = "other" if r.status == "reference" else ("pass" if c.passed and c.status == "pass" else
                                                             "FAIL" if not c.passed else "other")
            cells = [r.name, out, "x".join(map(str, c.shape))] + _numbers(c) + [result]
            rows.append(f"<tr class='{klass}'>" + "".join(
                f"<td class='l'>{_cell(v)}</td>" if i < 3 or i == len(cells) - 1 else f"<td>{_cell(v)}</td>"
                for i, v in enumerate(cells)) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def _divergence(report) -> str:
    rows = []
    for r in report.runtimes:
        if r.layers is None or r.name == FLOAT64:
            continue
        s = r.layers
        if not s.compared:
            what = f"0 of {s.reference_layers} layers matched (no intermediate tensors shared with the reference)"
        elif s.first_fail is None:
            what = f"no layer fails ({s.compared} of {s.reference_layers} compared)"
        else:
            ff = s.first_fail
            covers = f" (fused: {' + '.join(ff.covers)})" if len(ff.covers) > 1 else ""
            what = (f"first fails at layer {ff.name}{covers}, node {ff.node or ff.tensor or '-'}: max error "
                    f"{ff.comparison.max_abs_error:.3g}, {ff.comparison.excess:.3g}x allowed; last pass before it: "
                    f"{s.last_pass.name if s.last_pass else '-'}; {s.failed} of {s.compared} layers fail")
        rows.append(f"<tr><td class='l'>{_e(r.name)}</td><td class='l'>{_e(what)}</td></tr>")
    if not rows:
        return "<p>Per-layer comparison not run (bridge parity --per-layer).</p>"
    return f"<table>{''.join(rows)}</table>"


def _by_depth(report) -> List[str]:
    """One plot per runtime: max error / bound per layer, by depth, over TF float32's curve."""
    floor_row = next((r for r in report.runtimes if r.name == FLOAT64 and r.layers), None)
    floor = {c.name: c.comparison for c in floor_row.layers.checks} if floor_row else {}
    order = list(floor) or None
    out = []
    for r in report.runtimes:
        if r.layers is None or r.name == FLOAT64 or not r.layers.checks:
            continue
        names = order or [c.name for c in r.layers.checks]
        depth = {n: i for i, n in enumerate(names)}
        fig = _figure(6.4, 2.8)
        ax = fig.add_subplot()
        if floor:
            xs = np.arange(len(names))
            tf = np.array([_ratio(floor[n]) for n in names])
            ax.plot(xs, tf, color="#888", lw=1, label="TF float32 (the floor)")
            ax.fill_between(xs, 1e-12, np.maximum(FACTOR * tf, 1.0), color="#ddd", label=f"allowed: bound or {FACTOR:g}x TF")
        checks = [c for c in r.layers.checks if c.name in depth]
        xs = [depth[c.name] for c in checks]
        ys = [_ratio(c.comparison) for c in checks]
        ax.plot(xs, ys, ".-", color="#1f77b4", lw=1, ms=3, label=r.name.replace("$", ""))
        bad = [(x, y) for x, y, c in zip(xs, ys, checks) if not c.comparison.passed]
        if bad:
            ax.plot(*zip(*bad), "o", color="#d62728", ms=5, label="fails")
        ax.axhline(1.0, color="#d62728", lw=0.8, ls="--")
        ax.set_yscale("log")
        ax.set_ylim(bottom=max(1e-6, min([y for y in ys if y > 0] + [1e-3]) / 3))
        ax.set_xlabel("layer depth (see the table)")
        ax.set_ylabel("max error / bound")
        ax.legend(fontsize=7, loc="upper left")
        out.append(f"<figure>{_svg(fig)}<figcaption>{_e(r.name)}</figcaption></figure>")
    return out


def _ratio(c: cmp.Comparison) -> float:
    """max over elements of |error| / the bound alone (atol * max(1, |ref|)): the plot's y."""
    if not np.isfinite(c.worst_norm) or c.nonfinite:
        return 1e6
    return max(c.worst_norm / max(c.atol, 1e-30), 1e-12)


def _histograms(report) -> List[str]:
    out = []
    rows = [r for r in report.runtimes if r.outputs]
    names = list(next((r.outputs for r in rows if r.status != "reference"), {}) or
                 next((r.outputs for r in rows), {}))
    edges = np.asarray(cmp.HIST_EDGES)
    centres = (edges[:-1] + edges[1:]) / 2
    for i, name in enumerate(names):
        fig = _figure(6.4, 2.8)
        ax = fig.add_subplot()
        drawn = False
        for r in rows:
            c = r.outputs.get(name)
            if c is None or not c.detail or "hist" not in c.detail:
                continue
            counts = np.asarray(c.detail["hist"], float)
            label = "TF float32" if r.name == FLOAT64 else r.name
            ax.step(centres, counts, where="mid", lw=1.5 if r.name == FLOAT64 else 1,
                    color="#444" if r.name == FLOAT64 else None, label=label.replace("$", ""))
            drawn = True
        if not drawn:
            continue
        atol = next(iter(r.outputs.values())).atol
        ax.axvline(np.log10(max(atol, 1e-30)), color="#d62728", ls="--", lw=0.8, label="bound (atol)")
        ax.set_xlabel("log10 |error| / max(1, |ref|)")
        ax.set_ylabel("elements")
        ax.legend(fontsize=7, ncol=2)
        out.append(f"<figure>{_svg(fig)}<figcaption>output {i + 1}: {_e(name)}</figcaption></figure>")
    return out


def _heatmaps(report) -> List[str]:
    out = []
    for r in report.runtimes:
        if r.status == "reference" and r.name != FLOAT64:
            continue
        for name, c in r.outputs.items():
            heat = (c.detail or {}).get("heat")
            if heat is None:
                continue
            fig = _figure(2.6, 2.4)
            ax = fig.add_subplot()
            top = float(np.nanmax(heat)) if np.isfinite(np.nanmax(heat)) else 1.0
            im = ax.imshow(np.asarray(heat), cmap="magma", vmin=0, vmax=max(top, 1e-12))  # its own scale: see the bar
            fig.colorbar(im, ax=ax, fraction=0.046)
            ax.set_xticks([])
            ax.set_yticks([])
            who = "TF float32" if r.name == FLOAT64 else r.name
            out.append(f"<figure>{_svg(fig)}<figcaption>{_e(who)} / {_e(name)}: error / allowed</figcaption></figure>")
    return out


def render(report) -> str:
    v = verdict(report)
    judged = any(r.name == FLOAT64 and r.status == "reference" for r in report.runtimes)
    judge = (f"The judge: the model run in float64 ({FLOAT64}). An element passes within the bound "
             f"(atol x max(1, |ref|), rtol x |ref|) or {RULE}." if judged else
             f"The judge: {report.reference or '-'} (no float64 run: "
             f"{getattr(report, 'no_float64', '') or 'the notes say why'}).")
    shapes = ", ".join(f"{k} {'x'.join(map(str, s))} {d}" for k, (s, d) in report.inputs.items())
    klass = "pass" if report.passed and v.startswith("PASS") else "FAIL" if not report.passed else "other"
    parts = [f"<h1>bridge parity: {_e(report.model)}</h1>",
             f"<p>{_e(report.kind)} model, inputs {_e(shapes)}, seed {report.seed}, {report.seconds:.1f} s</p>",
             f"<p class='verdict {klass}'>{_e(v)}</p>", f"<p>{_e(judge)}</p>",
             "<h2>Verdict per runtime and output</h2>", _verdict_table(report),
             "<h2>First divergence</h2>", _divergence(report)]
    depth = _by_depth(report)
    if depth:
        parts += ["<h2>Error against float64 by layer depth</h2>", f"<div class='grid'>{''.join(depth)}</div>"]
    hist = _histograms(report)
    if hist:
        parts += ["<h2>Error histograms per output</h2>", f"<div class='grid'>{''.join(hist)}</div>"]
    heat = _heatmaps(report)
    if heat:
        parts += ["<h2>Where the error is (N,H,W,C outputs)</h2>", f"<div class='grid'>{''.join(heat)}</div>"]
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>bridge parity: "
            f"{_e(report.model)}</title><style>{STYLE}</style></head><body>{''.join(parts)}</body></html>\n")


def write(folder: str, report) -> str:
    """Writes DIR/report.html (atomically; DIR made if missing); its path."""
    page = render(report)  # made before anything is written: a missing matplotlib leaves no file
    os.makedirs(folder, exist_ok=True)
    return atomic.write_text(os.path.join(folder, FILE), page)
