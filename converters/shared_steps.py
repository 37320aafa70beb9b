"""Steps every exporter (export_<to>.py) shares: fusing the model to export.
(The verification is bridge.parity.verify's: exporters only write.)

Cheap to import (nothing heavy at module level): the CLI imports every exporter,
and so this module, to build its --help.
"""
from __future__ import annotations

from typing import List

from bridge.exporting import ExportError, Progress


def fuse_model(model, progress: Progress, summary: List[str], details: dict, graph: bool = False):
    """`model` rewritten onto the fused ops (bridge.converters.fuse; a TensorFlow
    graph by graph_fuse.fuse_graph), as the "fusing" stage; the fusion report
    goes to `summary` (text) and `details["fusion"]` (JSON)."""
    from bridge import converters
    if graph:
        from .graph_fuse import fuse_graph as fuse
    else:
        fuse = getattr(converters, "fuse", None)
    if fuse is None:
        raise ExportError("the fusion rewriter (bridge.converters.fuse) is not available; --no-fuse exports the "
                          "model as it is")
    with progress.stage("fusing"):
        fused, report = fuse(model)
    text = report.summary() if callable(getattr(report, "summary", None)) else str(report)
    summary.append(text)
    to_json = getattr(report, "to_json", None)
    details["fusion"] = to_json() if callable(to_json) else text
    return fused


def model_to_export(source, fuse: bool, progress: Progress, summary: List[str], details: dict):
    """The source's model, fused when asked and possible (the rewriter takes
    Keras models only; anything else is exported as saved, and `summary` says so).
    Dims the model leaves open stay open in the export; the progress line says
    at which shape the verification runs (modelsource.ResolvedModel.sample_note)."""
    note = source.sample_note() if hasattr(source, "sample_note") else ""
    if note:
        progress.note(note)
    if fuse and source.is_keras:
        return fuse_model(source.model, progress, summary, details)
    if fuse and getattr(source, "is_graph", False):
        return fuse_model(source.model, progress, summary, details, graph=True)
    if fuse:
        summary.append(f"{source.kind}: exported as saved (fusion rewrites Keras models only)")
    return source.model
