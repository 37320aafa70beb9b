"""Which backend each op has, read from what is actually registered.

Each column is answered by the layer that owns it, through that layer's
`backend_status(spec) -> {column: cell}`; a layer that cannot be imported here
fills its columns with the reason. A cell is "yes" (or "yes (where from)", e.g.
a team's own library), or a short reason why not.
"""
from __future__ import annotations

import importlib
from typing import Dict, List

from bridge import ops

# column key -> (title, the module whose backend_status answers it)
COLUMNS = {
    "tf_cpu": ("TF CPU kernel", "bridge.tf_ops"),
    "tf_gpu": ("TF GPU kernel", "bridge.tf_ops"),
    "gradient": ("gradient", "bridge.tf_ops"),
    "composite": ("composite", "bridge.tf_ops"),
    "onnx_schema": ("ONNX schema", "bridge.onnx_plugins"),
    "onnx_function": ("ONNX function", "bridge.onnx_plugins"),
    "tf2onnx": ("tf2onnx handler", "bridge.converters"),
    "ort_kernel": ("ORT kernel", "bridge.onnx_plugins"),
    "tflite": ("TFLite", "bridge.litert"),
    "ascend": ("Ascend plugin", "bridge.ascend"),
}
# Columns whose library is built on request only (`bridge build --cuda`, `bridge
# build tflite`): where it is not built no op has them, and that is no hole.
ON_REQUEST = ("tf_gpu", "tflite")


def table() -> Dict[str, Dict[str, str]]:
    """{op name: {column: cell}} for every op and every column."""
    answers: Dict[str, Dict[str, Dict[str, str]]] = {}
    for module in dict.fromkeys(m for _, m in COLUMNS.values()):
        try:
            mod = importlib.import_module(module)
            probe = getattr(mod, "backend_status")
        except Exception as e:  # the column says why instead of failing the table
            reason = f"unavailable: {type(e).__name__}: {str(e).splitlines()[0][:60] if str(e) else ''}"
            answers[module] = {s.name: {k: reason for k, (_, m) in COLUMNS.items() if m == module}
                               for s in ops.all_specs()}
            continue
        answers[module] = {}
        for spec in ops.all_specs():
            try:
                answers[module][spec.name] = dict(probe(spec))
            except Exception as e:
                answers[module][spec.name] = {k: f"error: {e}" for k, (_, m) in COLUMNS.items() if m == module}
    out = {}
    for spec in ops.all_specs():
        out[spec.name] = {k: answers[m][spec.name].get(k, "no") for k, (_, m) in COLUMNS.items()}
    return out


def is_yes(cell: str) -> bool:
    return cell == "yes" or cell.startswith("yes (")


def holes(t: Dict[str, Dict[str, str]]) -> List[str]:
    """Columns where one of bridge's own ops has the backend and another lacks it,
    and columns that none of them has (outside ON_REQUEST). A team's op shows
    what it lacks in its row; it is no hole of bridge's."""
    t = {op: row for op, row in t.items() if op not in ops.SPECS or ops.is_builtin(ops.SPECS[op])}
    problems = []
    for key in COLUMNS:
        have = {op for op, row in t.items() if is_yes(row[key])}
        if have and have != set(t):
            problems.append(f"{COLUMNS[key][0]}: {sorted(have)} have it, {sorted(set(t) - have)} do not")
        elif t and not have and key not in ON_REQUEST:
            op = min(t)
            problems.append(f"{COLUMNS[key][0]}: no op has it ({op}: {t[op][key]})")
    return problems
