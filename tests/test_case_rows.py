"""The case rows every parametrised per-op test reads (case_rows.py) cover each
built-in op, a fourth one too, with no edit of a test."""
from __future__ import annotations

from dataclasses import replace

from bridge import ops
from case_rows import builtin_specs, example_params, example_rows, is_empty


def _ops_in(params):
    return {p.values[0].name for p in params}


def test_every_builtin_op_has_a_case_table_with_awkward_rows():
    for spec in builtin_specs():
        rows = spec.examples()
        assert rows and spec.bad_inputs(), spec.name
        assert any(is_empty(e) for e in rows), f"{spec.name}: no empty row"
        assert any(1 in s for e in rows for s in e.shapes), f"{spec.name}: no size-1 dim"


def test_a_capped_pick_keeps_the_first_and_an_empty_row():
    for spec in builtin_specs():
        picked = example_rows(spec, per_op=4, seed="t")
        assert len(picked) == 4 and picked[0].id == spec.examples()[0].id and is_empty(picked[-1]), spec.name
        assert [e.id for e in picked] == [e.id for e in example_rows(spec, per_op=4, seed="t")]  # seeded


def test_a_fourth_builtin_op_is_in_every_parametrised_table(monkeypatch):
    assert _ops_in(example_params()) == {s.name for s in ops.all_specs() if ops.is_builtin(s)}
    spec = replace(ops.get("FusedLayerNorm"), name="ScratchNorm", module="scratch_norm")
    monkeypatch.setitem(ops.SPECS, spec.name, spec)
    monkeypatch.setitem(ops.ORIGINS, spec.name, "bridge")
    assert "ScratchNorm" in _ops_in(example_params()) and "ScratchNorm" in _ops_in(example_params(per_op=2))
    monkeypatch.setitem(ops.ORIGINS, spec.name, "/team/ops.py")   # a team's op: its own tests, not bridge's
    assert "ScratchNorm" not in _ops_in(example_params())
