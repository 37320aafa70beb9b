"""`bridge parity --csv FILE`: one row per runtime x output and runtime x
layer, under the column names Ascend's msit `debug compare` (and msaccucmp)
writes where a number means the same (CosineSimilarity, MaxAbsoluteError,
RMSE, MeanRelativeError, RelativeEuclideanDistance), and plain names for
the rest (Polygraphy's error quantiles, bridge's verdict and bound)."""
from __future__ import annotations

import csv
import io
import math
from typing import Iterator, List

from bridge import atomic

# column -> Comparison field (None: the row's own columns, filled below)
COLUMNS = {
    "Runtime": None, "Kind": None, "Name": None, "Tensor": None, "Node": None, "Covers": None,
    "Shape": None, "DType": "dtype", "Status": "status",
    "CosineSimilarity": "cosine", "MaxAbsoluteError": "max_abs_error", "MaxRelativeError": "max_rel_error",
    "MeanAbsoluteError": "mean_abs_error", "MeanRelativeError": "mean_rel_error", "RMSE": "rmse",
    "RelativeEuclideanDistance": "rel_euclidean", "ErrorP50": "p50", "ErrorP99": "p99", "ErrorP99.9": "p999",
    "ElementsPastBound": "past_bound", "ElementsFailing": "failing", "Elements": "size",
    "Atol": "atol", "Rtol": "rtol", "Floor": "floor", "FloorCap": "floor_cap", "Excess": "excess",
    "Note": "note",
}


def _cell(value):
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return f"{value:.6g}"
    return value


def rows(report) -> Iterator[List]:
    """The rows, header first."""
    yield list(COLUMNS)
    for r in report.runtimes:
        items = [("output", name, "", "", [], c) for name, c in r.outputs.items()]
        if r.layers is not None:
            items += [("layer", k.name, k.tensor, k.node, k.covers, k.comparison) for k in r.layers.checks]
        for kind, name, tensor, node, covers, c in items:
            own = [r.name, kind, name, tensor, node, "+".join(covers), "x".join(map(str, c.shape))]
            yield own + [_cell(getattr(c, f)) for f in COLUMNS.values() if f is not None]


def text(report) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows(report))
    return buf.getvalue()


def write(path: str, report) -> None:
    atomic.write_text(path, text(report))
