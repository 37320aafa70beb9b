"""`tflite-float16`: the lowered TFLite export with float16 post-training quantisation
(see converters/export_tflite.py), on ai_edge_litert. Its tolerance is the bound
the exporter states for that quantisation, not the float32 default."""
from __future__ import annotations

from bridge.converters.export_tflite import QUANTIZE_BOUND
from bridge.parity.runtimes.tflite import TFLite


class TFLiteFloat16(TFLite):
    name = "tflite-float16"
    description = "lowered TFLite export, float16-quantised, on ai_edge_litert"
    order = 61
    quantize = "float16"
    tolerance = (QUANTIZE_BOUND["float16"], QUANTIZE_BOUND["float16"])  # (atol, rtol) for every float output
    default = False  # opt-in (--runtimes): each variant is one more conversion


RUNTIME = TFLiteFloat16
