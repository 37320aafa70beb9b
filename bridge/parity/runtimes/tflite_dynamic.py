"""`tflite-dynamic`: the lowered TFLite export with dynamic-range post-training
quantisation (see converters/export_tflite.py)."""
from __future__ import annotations

from bridge.parity.runtimes.tflite import QuantizedTFLite


class TFLiteDynamic(QuantizedTFLite):
    name = "tflite-dynamic"
    description = "lowered TFLite export, dynamic-range quantised, on ai_edge_litert"
    order = 62
    quantize = "dynamic"


RUNTIME = TFLiteDynamic
