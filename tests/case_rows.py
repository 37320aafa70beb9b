"""The built-in ops' case-table rows (bridge/ops/<op>/cases.py `examples()`) as test
parameters: a parametrised per-op test or an Ascend case list reads its rows
here, so a fourth built-in op is covered with no edit. Where a backend is slow
per row, `per_op` caps the rows to the op's first row, a seeded pick of the
others and, last, its first empty row (the full table runs elsewhere)."""
from __future__ import annotations

import random

import pytest

from bridge import ops


def builtin_specs():
    return [s for s in ops.all_specs() if ops.is_builtin(s)]


def is_empty(example) -> bool:
    return any(0 in s for s in example.shapes)


def example_rows(spec, *, dtype="float32", every_dtype=False, empty=True, per_op=None, seed="rows"):
    """`every_dtype`: only rows every dtype of the op takes (not the float32-only
    stress rows, e.g. large means); large rows never."""
    rows = [e for e in spec.examples() if dtype in e.dtypes and not e.large
            and (not every_dtype or set(spec.dtypes) <= set(e.dtypes)) and (empty or not is_empty(e))]
    if per_op is None or len(rows) <= per_op:
        return rows
    empties = [e for e in rows if is_empty(e)][:1]
    rest = [e for e in rows[1:] if not is_empty(e)]
    random.Random(f"{spec.name}-{seed}").shuffle(rest)
    return rows[:1] + rest[:per_op - 1 - len(empties)] + empties


def example_params(**kw):
    """pytest params (spec, example), id "<op>-<row id>", over every built-in op."""
    return [pytest.param(spec, e, id=f"{spec.name}-{e.id}") for spec in builtin_specs()
            for e in example_rows(spec, **kw)]


def outputs(ref):
    """The reference's outputs as a tuple (one array for a one-output op)."""
    return ref if isinstance(ref, tuple) else (ref,)

