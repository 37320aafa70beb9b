"""`tflite-dynamic`: the lowered TFLite export with dynamic-range post-training quantisation
(see converters/export_tflite.py), on ai_edge_litert. Its tolerance is the bound
the exporter states for that quantisation, not the float32 default."""
from __future__ import annotations

from bridge.converters.export_tflite import QUANTIZE_BOUND
from bridge.parity.runtimes.tflite import TFLite


class TFLiteDynamic(TFLite):
    name = "tflite-dynamic"
    description = "lowered TFLite export, dynamic-range quantised, on ai_edge_litert"
    order = 62
    quantize = "dynamic"
    tolerance = (QUANTIZE_BOUND["dynamic"], QUANTIZE_BOUND["dynamic"])  # (atol, rtol) for every float output
    default = False  # opt-in (--runtimes): each variant is one more conversion


RUNTIME = TFLiteDynamic
