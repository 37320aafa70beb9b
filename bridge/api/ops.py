"""`bridge.ops()`: one row per op, one column per backend, read from what is
registered (what `bridge ops --json` prints)."""
from __future__ import annotations

from typing import Dict, List, Sequence, Union


def ops(imports: Sequence = ()) -> Dict[str, Union[Dict[str, Dict[str, str]], List[str]]]:
    """{"ops": {op: {column: cell}}, "holes": [what an op lacks that others have]};
    a cell is "yes" (or "yes (where from)") or the short reason why not. The
    columns are bridge.backends.COLUMNS. Reading the TensorFlow columns imports
    TensorFlow (and builds bridge's op library on first use). `imports`: as
    `--import` (a team's modules with op specs, imported first)."""
    from bridge.api import team_ops
    team_ops.load_imports(imports)
    from bridge import backends
    table = backends.table()
    return {"ops": table, "holes": backends.holes(table)}
