"""`tflite-float16`: the lowered TFLite export with float16 post-training
quantisation (see converters/export_tflite.py)."""
from __future__ import annotations

from bridge.parity.runtimes.tflite import QuantizedTFLite


class TFLiteFloat16(QuantizedTFLite):
    name = "tflite-float16"
    description = "lowered TFLite export, float16-quantised, on ai_edge_litert"
    order = 61
    quantize = "float16"


RUNTIME = TFLiteFloat16
