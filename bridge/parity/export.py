"""The ONNX exports the ONNX runtimes of one parity run share, each made once.

The project's exporters do the work: bridge.converters.export_onnx converts
the fused Keras model (the one tf-fused runs) at the run's input shapes, and
bridge.converters.export_ge lays a conversion at ATC's opset out as the
model.onnx `bridge export --to ge` writes. The standard-ops model is the custom
export with its com.bridge nodes inlined (the graph `--mode lowered` writes).

Conversions take tf2onnx's large-model road: the weights skip TensorFlow's
second freezing pass and grappler, which on YOLOv3-416 halves the conversion
time and keeps its peak memory near 2.5 GB instead of 6 GB; the graph is the
same. The weights then go back into the one ModelProto every runtime shares.
"""
from __future__ import annotations

from typing import Any, Dict, Tuple

from bridge.parity.unavailable import Unavailable


def custom_opset() -> int:
    from bridge.converters.export_onnx import DEFAULT_OPSET
    return DEFAULT_OPSET


def ge_opset() -> int:
    from bridge.ascend.origins import DEFAULT_OPSET
    return DEFAULT_OPSET


def _tf_function(source, float32: bool = False) -> Tuple[Any, list, list]:
    """(tf.function, input signature, output names) of what the ONNX runtimes run:
    the fused Keras model (source.fused_model, shared with tf-fused; the model
    itself when nothing can be fused), or a SavedModel's fused graph. Traced once
    per run, whatever the opset. `float32`: a Keras model computing below float32
    rebuilt in float32 (what `bridge export --to ge` converts for GE's float32-only
    built-in expansion; bridge.converters.road_limits.float32_model)."""
    shapes = getattr(source, "input_shapes", None)
    if not shapes:
        raise RuntimeError("the run's input shapes must be set before exporting")

    def build():
        from bridge import modelsource
        if source.kind == "keras":
            try:
                model, _ = source.fused_model()
            except Unavailable:
                model = source.keras_model()  # nothing fused: the plain export still checks the ONNX road
            if float32:
                from bridge.converters.road_limits import float32_model
                model, _ = float32_model(model, "ge")
        else:
            try:
                model, _ = source.fused_model()  # the graph rewritten onto the fused ops (graph_fuse)
            except Unavailable:
                model = source.saved_model()
        ms = modelsource.from_object(model, input_shapes=dict(shapes))
        return ms.function(model if ms.is_keras else None), ms.signature(), list(ms.output_names)
    return source.cached("tf-function" + ("-float32" if float32 else ""), build)


def _converters():
    try:
        from bridge.converters import export_onnx
    except ImportError as e:
        raise Unavailable(f"bridge.converters.export_onnx is not available ({e})") from None
    return export_onnx


def onnx_custom(source) -> Any:
    """The com.bridge export (custom nodes with their model-local functions) at
    export_onnx's default opset."""
    eo = _converters()

    def convert():
        fn, signature, names = _tf_function(source)
        model, external = eo.convert(fn, signature, opset=custom_opset(), mode="custom", output_names=names,
                                     large=True)
        return with_data(model, external), {}
    model, _ = _disk_cached(source, "onnx-custom", {"opset": custom_opset()}, convert)
    return model


META_KEY = "bridge.parity.cache"   # what the conversion said besides the model (JSON), in the cached file only


def _disk_cached(source, road: str, options: dict, convert):
    """(ModelProto, meta) of `convert()` (which returns both; meta: JSON), kept
    in bridge's conversion cache (bridge.converters.tflite_cache, `.onnx`) under
    the model, the run's input shapes and `options`: a run of the same model
    converts once. A model past protobuf's 2 GiB is converted every time."""
    import json
    import onnx
    from dataclasses import replace
    from bridge.converters import tflite_cache
    shapes = getattr(source, "input_shapes", None) or {}
    inputs = [replace(i, shape=tuple(shapes.get(i.name, i.shape))) for i in source.inputs]
    key = source.conversion_key(road, inputs=inputs, **options)
    data = tflite_cache.load(key, tflite_cache.ONNX)
    if data is not None:
        with source.stages.stage(f"{road} read from bridge's cache"):
            model = onnx.load_from_string(data)
            del data
            meta = None
            for i, prop in enumerate(model.metadata_props):
                if prop.key == META_KEY:
                    meta = json.loads(prop.value)
                    del model.metadata_props[i]
                    break
        if meta is not None:
            source.from_cache.add(road)
            return model, meta
    model, meta = convert()
    if key is not None and model.ByteSize() < (2 << 30) - (1 << 20):
        prop = model.metadata_props.add()
        prop.key, prop.value = META_KEY, json.dumps(meta)
        try:
            data = model.SerializeToString()
        finally:
            del model.metadata_props[-1]
        tflite_cache.store(key, data, tflite_cache.ONNX)
    return model, meta


def onnx_ge(source) -> Any:
    """The GE-bound model: a conversion at ATC's default opset (bare com.bridge
    nodes: the function bodies need opset 13) laid out by export_ge.ge_model for
    the new ATC parser, at the run's (static) input shapes. For an .onnx MODEL,
    the model itself when its opset is one ATC takes."""
    from bridge.converters import export_ge
    from bridge.exporting import ExportError
    shapes = {k: tuple(v) for k, v in source.input_shapes.items()}
    if source.kind == "onnx":
        from bridge.ascend.expand import opset_of
        from bridge.ascend.origins import EXPORT_OPSETS
        model = source.onnx_custom()
        opset = opset_of(model)
        if opset not in EXPORT_OPSETS:
            raise Unavailable(f"the .onnx MODEL has opset {opset}; ATC takes {EXPORT_OPSETS[0]}..{EXPORT_OPSETS[-1]} "
                              f"(bridge export --to ge converts at 11)")
    else:
        model, opset = _convert_for_ge(source)
    try:
        return export_ge.ge_model(model, opset=opset, parser="new", shapes=shapes)
    except ExportError as e:
        raise Unavailable(f"the GE layout failed: {e}") from None


def _convert_for_ge(source):
    """(model, opset): the conversion at ATC's default opset, or at the first
    higher opset ATC takes when the model needs one (BERT's Einsum: 12;
    deberta-v3's GatherV2 with batch_dims: 12); `source.ge_opset_note` then
    says so."""
    from bridge.ascend.origins import EXPORT_OPSETS
    eo = _converters()
    # below float32 (mixed_float16): in float32, as the export writes it for the built-in route
    low = bool(source.kind == "keras" and source.output_precision())
    source.ge_float32 = low
    opsets = [o for o in EXPORT_OPSETS if o >= ge_opset()]

    def convert():
        fn, signature, names = _tf_function(source, float32=low)
        (model, external), opset, note = eo.at_lowest_opset(
            lambda o: _convert_raw(eo, fn, signature, o, names), opsets)
        return with_data(model, external), {"opset": opset, "note": note}
    model, meta = _disk_cached(source, "onnx-ge-raw", {"opsets": opsets, "float32": low}, convert)
    source.ge_opset_note = meta["note"]
    return model, meta["opset"]


def _convert_raw(eo, fn, signature, opset, names):
    from bridge.exporting import ExportError
    try:
        return eo.convert_raw(fn, signature, opset=opset, output_names=names, large=True)
    except ExportError as e:
        if isinstance(e, eo.OpsetTooLow) or "tf2onnx failed" not in str(e):
            raise
        # A tf2onnx optimizer pass failed (its einsum pass below opset 13, on BERT): tf2onnx
        # skips a failed pass, but not on the large-model road
        return eo.convert_raw(fn, signature, opset=opset, output_names=names, large=False)


def with_data(model, external: Dict[str, bytes]) -> Any:
    """`model` with tf2onnx's external tensors back inside it (export_onnx.embed_external)."""
    return _converters().embed_external(model, external)


def has_custom_nodes(model) -> bool:
    from bridge import ops
    return any(ops.for_node(n.domain, n.op_type) is not None for n in model.graph.node)


def inline(model) -> Any:
    """The model with every com.bridge node replaced by its function body."""
    if not has_custom_nodes(model) and not model.functions:
        return model
    try:
        from bridge import onnx_plugins
        fn = onnx_plugins.inline_custom_ops
    except (ImportError, AttributeError) as e:
        raise Unavailable(f"inlining com.bridge nodes needs bridge.onnx_plugins.inline_custom_ops ({e})") from None
    return fn(model)
