"""`tflite`: the lowered TFLite export (builtins only) on ai_edge_litert.

The fused model is exported once per run with `bridge.converters.export_tflite`
(the quantised variants, opt-in, share its trace and freezing through
`source.cached`), at the model's own input signature; the signature runner resizes the inputs to the run's shapes, and
outputs come back keyed by the signature's output names, which are the model's.
`tf.lite.Interpreter` serves only when ai_edge_litert is not installed.

What is converted is what `bridge export --to tflite` converts: the fused
Keras model, or a SavedModel's graph-fused graph (lowered mode: its fused ops
called as their composites, export_tflite.lowered_graph). Both look the
conversion up in bridge.converters.tflite_cache under the same key, so a file
either one converted serves the other.
"""
from __future__ import annotations

from typing import Dict, Mapping

import numpy as np

from bridge.parity.runtime import Runtime, Unavailable


def interpreter_class():
    """(Interpreter class, where it came from); Unavailable when there is none."""
    try:
        from ai_edge_litert.interpreter import Interpreter
        return Interpreter, "ai_edge_litert"
    except ImportError:
        pass
    try:
        import tensorflow as tf
        return tf.lite.Interpreter, "tf.lite"
    except ImportError:
        raise Unavailable("no TFLite interpreter: pip install ai-edge-litert") from None


def run_tflite(data: bytes, feeds: Mapping[str, np.ndarray], delegates: bool = True) -> Dict[str, np.ndarray]:
    """One run of a TFLite file through its signature (inputs resized to the
    feeds' shapes); {output name: array}. `delegates=False`: TFLite's own builtin
    kernels, without the default XNNPack delegate."""
    cls, origin = interpreter_class()
    kwargs = {}
    if not delegates:
        if origin == "ai_edge_litert":
            from ai_edge_litert.interpreter import OpResolverType
        else:
            import tensorflow as tf
            OpResolverType = tf.lite.experimental.OpResolverType
        kwargs["experimental_op_resolver_type"] = OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
    runner = cls(model_content=data, **kwargs).get_signature_runner()
    return {k: np.asarray(v) for k, v in runner(**{k: np.ascontiguousarray(v) for k, v in feeds.items()}).items()}


def exported(source, mode: str = "lowered", quantize: str = "none", static: bool = False) -> bytes:
    """The run's TFLite file for (mode, quantize), converted once. The trace and
    the freezing (half of a conversion) are shared by every quantisation.
    `static`: converted at the run's input shapes instead of the model's own
    signature (for a runtime that cannot resize a model's open dims)."""
    from bridge.converters import export_tflite, tflite_cache
    at = ":static" if static else ""
    memo = f"tflite:{mode}:{quantize}{at}"
    if source.has(memo):  # converted (or failed, or planted by a test) already in this run
        return source.cached(memo, lambda: None)

    def frozen():
        model, specs, names = _model_of(source, static, mode)
        try:
            return export_tflite.frozen_function(export_tflite.function(model, specs, names), mode)
        except export_tflite.TFLiteExportError as e:
            raise Unavailable(str(e)) from None

    def convert():
        cf = source.cached(f"tflite-frozen:{mode}{at}", frozen,
                           f"tracing and freezing for TFLite ({mode}{', at the run shapes' if static else ''})")
        try:
            return export_tflite.convert_frozen(cf, mode, quantize)
        except export_tflite.TFLiteExportError as e:
            raise Unavailable(str(e)) from None

    key = cache_key(source, mode, quantize, static)
    hit = tflite_cache.load(key)
    if hit is not None:
        source.tflite_from_cache.add(memo)
        return source.cached(memo, lambda: hit, f"TFLite ({mode}, quantize {quantize}) from bridge's cache")

    def build():
        data = convert()
        tflite_cache.store(key, data)
        return data
    return source.cached(memo, build, f"converting to TFLite ({mode}, quantize {quantize})")


def cache_key(source, mode: str, quantize: str, static: bool = False):
    """The conversion's key in bridge.converters.tflite_cache: `bridge export
    --to tflite` of the same model with the same options has the same one."""
    return source.conversion_key(mode, quantize, inputs=_specs(source, static))


def _model_of(source, static: bool = False, mode: str = "lowered"):
    """What to export, as `bridge export --to tflite` exports it: the fused Keras
    model (the unfused one while fusion is not available), or a SavedModel's
    graph-fused graph (graph_fuse), whose fused ops stay in `mode` custom and
    are called as their composites in lowered (export_tflite.lowered_graph:
    builtins only); with the run's input shapes when `static`."""
    if source.kind == "keras":
        try:
            model, _ = source.fused_model()
        except Unavailable:
            model = source.keras_model()
    elif source.kind == "savedmodel" and mode == "custom":
        fused, _ = source.fused_model()
        model = fused.signatures["serving_default"]
    elif source.kind == "savedmodel":
        model = lowered_savedmodel(source).signatures["serving_default"]
    else:
        raise Unavailable(f"TFLite exports TensorFlow models, not {source.kind}")
    if source.kind == "keras":  # TFLite's float kernels are float32: a mixed_float16 model rebuilt in float32
        from bridge.converters.road_limits import float32_model
        try:
            model, _ = float32_model(model)
        except ValueError as e:
            raise Unavailable(str(e)) from None
    return model, _specs(source, static), list(source.output_names)


def _specs(source, static: bool):
    """The input signature converted at: the model's own, or the run's shapes when `static`."""
    specs = list(source.inputs)
    if static:
        from dataclasses import replace
        specs = [replace(i, shape=tuple(source.input_shapes[i.name])) for i in specs]
    return specs


def lowered_savedmodel(source):
    """The graph-fused SavedModel with its fused ops called as their composites:
    what `bridge export --to tflite` (mode lowered) converts."""
    def build():
        from bridge.converters import export_tflite
        fused, _ = source.fused_model()
        try:
            return export_tflite.lowered_graph(fused)
        except export_tflite.TFLiteExportError as e:
            raise Unavailable(str(e)) from None
    return source.cached("graph-lowered", build, "lowering the fused graph's ops to their composites")


FLOAT32_NOTE = "its float16 layers rebuilt in float32 (TFLite's float kernels are float32)"
FROM_CACHE = "the conversion read from bridge's TFLite cache (converted earlier from the same model and options)"


def graph_fused_note(source, lowered: bool = False) -> str:
    """Which graph a TFLite row of a SavedModel converted: the graph-fused one,
    with its counts (`lowered`: its fused ops as their composites)."""
    _, report = source.fused_model()
    counts = {k: report.fused(k) for k in sorted({b.pattern for b in report.blocks} | set(report.folds))}
    what = ", ".join(f"{k} x{n}" for k, n in counts.items() if n) or "no fused ops"
    how = ", the fused ops lowered to their composites as bridge export --to tflite does" if lowered else ""
    return f"from the graph-fused SavedModel (bridge fuse: {what}{how})"


def cache_note(source, mode: str, quantize: str, static: bool = False) -> str:
    at = ":static" if static else ""
    return FROM_CACHE if f"tflite:{mode}:{quantize}{at}" in source.tflite_from_cache else ""


class TFLite(Runtime):
    name = "tflite"
    description = "lowered TFLite export (builtins only) on ai_edge_litert"
    order = 60
    kinds = ("keras", "savedmodel")
    quantize = "none"

    def prepare(self, source):
        super().prepare(source)
        cls, self.origin = interpreter_class()
        from bridge.converters import road_limits
        static = False
        try:
            data = exported(source, "lowered", self.quantize)
        except Unavailable as e:  # tensor lists, and some flex ops, lower only at static shapes
            if not road_limits.static_may_help(e):
                raise
            static = True
            try:
                data = exported(source, "lowered", self.quantize, static=True)
            except Unavailable:
                raise e from None
            self.description = f"{self.description}; {road_limits.static_note(source.input_shapes, e)}"
        if source.kind == "keras" and source.output_precision():
            self.description = f"{self.description}; {FLOAT32_NOTE}"
        if source.kind == "savedmodel":
            self.description = f"{self.description}; {graph_fused_note(source, lowered=True)}"
        note = cache_note(source, "lowered", self.quantize, static)
        if note:
            self.description = f"{self.description}; {note}"
        self._load(cls, data)

    def attach(self, source, data: bytes, path=None) -> None:
        """This row on a given TFLite file, not the source's export: how
        `bridge export` verifies what it wrote (bridge.parity.verify)."""
        Runtime.prepare(self, source)
        cls, self.origin = interpreter_class()
        self._load(cls, data)

    def _load(self, cls, data: bytes) -> None:
        self.interpreter = cls(model_content=data)
        signatures = self.interpreter.get_signature_list()
        if not signatures:
            raise Unavailable("the TFLite file has no signature (input/output names)")
        self.key = next(iter(signatures))
        self.output_order = list(signatures[self.key]["outputs"])
        self.runner = self.interpreter.get_signature_runner(self.key)

    def run(self, inputs: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
        # The signature runner resizes every input whose shape differs from the
        # file's (a dynamic batch exports as 1) before it allocates.
        own = self.runner(**{k: np.ascontiguousarray(v) for k, v in inputs.items()})
        return self.outputs_by_name(own, self.output_order)


class QuantizedTFLite(TFLite):
    """A post-training-quantised variant (a subclass sets `quantize`): opt-in,
    since each is one more conversion, and judged by the bound the exporter
    states for its quantisation instead of the float32 default."""
    default = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        from bridge.converters.export_tflite import QUANTIZE_BOUND
        bound = QUANTIZE_BOUND[cls.quantize]
        cls.tolerance = (bound, bound)  # (atol, rtol) for every float output


RUNTIME = TFLite
