"""Aligned text tables for people, with colour only on a terminal."""
from __future__ import annotations

import os
import sys
from typing import Iterable, List, Optional, Sequence

_COLOURS = {"green": "32", "red": "31", "yellow": "33", "dim": "2", "bold": "1"}


def use_colour(stream=None) -> bool:
    stream = stream or sys.stdout
    if os.environ.get("NO_COLOR"):
        return False
    return bool(getattr(stream, "isatty", lambda: False)()) or bool(os.environ.get("FORCE_COLOR"))


def paint(text: str, colour: Optional[str], enabled: bool) -> str:
    if not enabled or not colour:
        return text
    return f"\x1b[{_COLOURS[colour]}m{text}\x1b[0m"


def render(headers: Sequence[str], rows: Iterable[Sequence[object]], colours: Optional[List[List[Optional[str]]]] = None,
           colour: Optional[bool] = None, align: Optional[str] = None) -> str:
    """A table with a header rule. `colours[r][c]` paints one cell; `align` is a
    string of 'l'/'r' per column (numbers right-aligned by default)."""
    rows = [[_fmt(c) for c in r] for r in rows]
    colour = use_colour() if colour is None else colour
    widths = [len(h) for h in headers]
    for r in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, r)]
    if align is None:
        align = "".join("r" if rows and all(_numeric(r[i]) for r in rows) else "l" for i in range(len(headers)))
    def line(cells, paints=None):
        out = []
        for i, (c, w) in enumerate(zip(cells, widths)):
            padded = c.rjust(w) if align[i] == "r" else c.ljust(w)
            out.append(paint(padded, paints[i] if paints else None, colour))
        return "  ".join(out).rstrip()
    text = [line(headers), "  ".join("-" * w for w in widths)]
    for i, r in enumerate(rows):
        text.append(line(r, colours[i] if colours else None))
    return "\n".join(text)


def _fmt(value) -> str:
    if isinstance(value, float):
        if value != value:
            return "nan"
        if value == 0:
            return "0"
        if abs(value) >= 1e4 or abs(value) < 1e-3:
            return f"{value:.2e}"
        return f"{value:.4g}"
    return str(value)


def _numeric(text: str) -> bool:
    try:
        float(text.rstrip("x%"))
        return True
    except ValueError:
        return text in ("-", "")
