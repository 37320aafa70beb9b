"""docs/ops.md states each built-in op's tensors, attributes (types, defaults)
and tolerances in words; the specs (bridge/ops) are the source of truth. This
fails when the two part ways, so the page cannot drift from the code."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from bridge import ops

DOC = Path(__file__).resolve().parents[1] / "docs" / "ops.md"


def _section(text: str, name: str) -> str:
    found = re.search(rf"^## {re.escape(name)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert found, f"docs/ops.md has no section '## {name}'"
    return found.group(1)


def _rows(section: str, header: str):
    """The rows of the table whose first header cell is `header`."""
    lines = section.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {header} |"))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


def _default(attr) -> str:
    if attr.required:
        return "required"
    if attr.is_list:
        return str(list(attr.default))
    return f"{attr.default:g}" if isinstance(attr.default, float) and attr.default < 1e-3 else str(attr.default)


def documented(text: str, spec) -> dict:
    section = _section(text, spec.name)
    tensors = [(r[0], r[1]) for r in _rows(section, "tensor")]
    attrs = [(r[0], r[1], r[2]) for r in _rows(section, "attribute")]
    tol = re.search(r"Tolerance \(atol, per element\): (.*?)\.(?:\s|$)", section)
    return {"tensors": tensors, "attrs": attrs, "tolerance": tol.group(1) if tol else None}


def stated(spec) -> dict:
    return {"tensors": [(a.name, "input") for a in spec.inputs] + [(a.name, "output") for a in spec.outputs],
            "attrs": [(a.name, a.type, _default(a)) for a in spec.attrs],
            "tolerance": ", ".join(f"{d} {spec.tolerance[d].atol:g}" for d in spec.dtypes)}


BUILTINS = [s for s in ops.all_specs() if ops.is_builtin(s) and s.name != "FusedLayerNormGrad"]


@pytest.mark.parametrize("spec", BUILTINS, ids=lambda s: s.name)
def test_the_page_states_what_the_spec_says(spec):
    assert documented(DOC.read_text(), spec) == stated(spec)


def test_a_changed_default_fails_it():
    """Planted: the page's FusedLayerNorm epsilon default 1e-06 written as 1e-05."""
    spec = next(s for s in BUILTINS if s.name == "FusedLayerNorm")
    text = DOC.read_text().replace("| epsilon | float | 1e-06 |", "| epsilon | float | 1e-05 |")
    assert documented(text, spec) != stated(spec)
    text = DOC.read_text().replace("float32 0.0001, float16 0.004", "float32 0.001, float16 0.004")
    conv = next(s for s in BUILTINS if s.name == "YoloConvBnLeaky")
    assert documented(text, conv) != stated(conv)
