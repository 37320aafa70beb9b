"""`bridge ops`: one row per op, one column per backend, read from the registries."""
from __future__ import annotations

import json

from bridge.table import render

NAME = "ops"
HELP = "show which backends each fused op has (read from what is registered)"


def add_arguments(p):
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def run(args) -> int:
    from bridge import backends
    from bridge.api.ops import ops
    found = ops()
    if args.json:
        print(json.dumps(found, indent=1))
        return 0
    t = found["ops"]
    keys = list(backends.COLUMNS)
    rows, colours = [], []
    for op, row in t.items():
        rows.append([op] + [row[k] for k in keys])
        colours.append([None] + ["green" if backends.is_yes(row[k]) else "yellow" for k in keys])
    print(render(["op"] + [backends.COLUMNS[k][0] for k in keys], rows, colours, align="l" * (len(keys) + 1)))
    for hole in found["holes"]:
        print(f"hole: {hole}")
    return 0
