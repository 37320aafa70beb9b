"""The MODEL of a parity run, resolved once and shared by every runtime.

A `ModelSource` knows the model's kind ("keras", "savedmodel" or "onnx"), its
inputs and canonical output names (as bridge.modelsource resolved them, which
`bridge export` uses too), and memoises everything expensive (the fused model,
the ONNX export, files written for sessions) so each is built once per run
however many runtimes use it.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from bridge import atomic
from bridge.parity.inputs import InputError, TensorInfo
from bridge.parity import export
from bridge.parity.stages import StageLog, release_heap
from bridge.parity.unavailable import Unavailable

if TYPE_CHECKING:  # pragma: no cover
    from bridge import modelsource

KINDS = ("keras", "savedmodel", "onnx")


class ModelSource:
    def __init__(self, resolved: "modelsource.ResolvedModel", *, onnx_model=None):
        """`resolved`: the MODEL as bridge.modelsource resolved it (--input-shape
        applied); `onnx_model`: an export to use instead of bridge's own (--onnx)."""
        self.resolved = resolved
        # a frozen GraphDef runs where a SavedModel does (its GraphModel has the same signature)
        self.kind = "keras" if resolved.is_keras else ("savedmodel" if resolved.kind == "graphdef" else resolved.kind)
        assert self.kind in KINDS
        self.label = resolved.name
        self.builtin = resolved.name if resolved.kind == "builtin" else None
        self.config = dict(resolved.config)
        self._model = resolved.model
        self._cache: Dict[str, Any] = {}
        self._errors: Dict[str, BaseException] = {}
        self._lock = threading.RLock()
        self._workdir: Optional[str] = None
        self.stages = StageLog()   # time and peak memory of each build and each runtime's steps
        self.input_shapes: Optional[Dict[str, Tuple[int, ...]]] = None  # set by the runner before any export
        self.per_layer = False           # set by the runner: sessions are then made with the layers marked
        self.requested: set = set()      # runtimes named in --runtimes (set by the runner)
        self.ge_opset_note = ""          # why the GE export is above ATC's default opset, if it is
        self.tflite_from_cache: set = set()  # the TFLite memo keys read from bridge's conversion cache
        self.planted: set = set()            # memo keys seeded by `put`
        self.from_cache: set = set()         # memo keys of ONNX exports read from bridge's conversion cache
        if onnx_model is not None:  # a given export replaces bridge's own (--onnx)
            self._cache["onnx-custom"] = onnx_model
        self.inputs: List[TensorInfo] = list(resolved.inputs)
        self.output_names: List[str] = list(resolved.output_names)

    # -- memo ----------------------------------------------------------------
    def cached(self, key: str, build: Callable[[], Any], label: Optional[str] = None) -> Any:
        """`build()` once per run; a failure is remembered and re-raised for every
        runtime that asks (as Unavailable when it was one). `label` names the
        build as a stage in `stages` (time, peak memory)."""
        with self._lock:
            if key in self._cache:
                return self._cache[key]
            if key in self._errors:
                raise self._errors[key]
            try:
                if label:
                    t0 = time.perf_counter()
                    with self.stages.stage(label):
                        value = build()
                    # what the build freed (tf2onnx's and the converter's copies) goes back; after a long
                    # one (an export, a conversion) its graphs' reference cycles too, which a collection
                    # (~0.5 s with TensorFlow loaded) finds
                    release_heap(collect=time.perf_counter() - t0 > 5.0)
                else:
                    value = build()
            except BaseException as e:
                self._errors[key] = e
                raise
            self._cache[key] = value
            return value

    def has(self, key: str) -> bool:
        """Whether `key` was built (or failed, or was planted) in this run already."""
        with self._lock:
            return key in self._cache or key in self._errors

    def conversion_key(self, mode: str, quantize: str = "none", inputs=None, **extra) -> Optional[str]:
        """This model's key in bridge's conversion cache (bridge.converters.tflite_cache)
        for one conversion; None where there is none (an .onnx MODEL, an artefact
        planted by a test, the cache off). `inputs`: the signature converted at
        (the model's own by default)."""
        if self.kind not in ("keras", "savedmodel") or self.planted:
            return None
        from bridge.converters import tflite_cache
        digest = self.cached("model-digest", lambda: tflite_cache.model_digest(self.resolved), "hashing the model")
        return tflite_cache.key(self.resolved, mode=mode, quantize=quantize, fuse=True, inputs=inputs,
                                output_names=self.output_names, digest=digest, extra=extra)

    def put(self, key: str, value: Any) -> None:
        """Seeds the memo (tests plant altered exports this way). A run with a
        planted artefact converts its TFLite files itself: bridge's conversion
        cache knows the model, not what was planted in its place."""
        self._cache[key] = value
        self.planted.add(key)

    @property
    def workdir(self) -> str:
        if self._workdir is None:
            self._workdir = tempfile.mkdtemp(prefix="bridge-parity-")
        return self._workdir

    def close(self) -> None:
        if self._workdir:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    # -- the model in its forms ----------------------------------------------
    def keras_model(self):
        if self.kind != "keras":
            raise Unavailable(f"needs a Keras model; MODEL is {self.kind}")
        return self._model

    def saved_model(self):
        if self.kind != "savedmodel":
            raise Unavailable(f"needs a SavedModel; MODEL is {self.kind}")
        return self._model

    def serving_signature(self):
        """The SavedModel's serving signature, which its inputs and outputs are read from."""
        self.saved_model()
        return self.resolved.serving_signature

    def output_precision(self) -> Dict[str, Tuple[str, str]]:
        """{output: (dtype whose bounds judge it, why)} for the outputs of a Keras
        model computed below float32 (bridge.precision); {} otherwise."""
        def build():
            if self.kind != "keras":
                return {}
            from bridge import precision
            model = self.keras_model()
            return {k: (d, precision.note(d, model))
                    for k, d in precision.output_precision(model, self.output_names).items()}
        return self.cached("output-precision", build)

    def frozen_graph(self):
        """A SavedModel's serving signature frozen (a GraphModel; a frozen GraphDef
        is one already), once a run: graph fusion and the float64 twin read it."""
        from bridge.converters.graph_model import load
        return self.cached("frozen-graph", lambda: load(self._model), "freezing the graph")

    def fused_model(self):
        """(fused Keras model, fusion report) from bridge.converters.fuse; for a
        SavedModel or frozen graph, (fused GraphModel, report) from graph_fuse."""
        def build():
            if self.kind == "savedmodel":
                from bridge.converters.graph_fuse import fuse_graph
                try:
                    graph = self.frozen_graph()
                except Exception:  # noqa: BLE001 - fuse_graph says why the graph passes through unfused
                    graph = self._model
                return fuse_graph(graph)
            model = self.keras_model()
            try:
                from bridge.converters import fuse
            except ImportError as e:
                raise Unavailable(f"bridge.converters.fuse is not available ({e})") from None
            return fuse(model)
        return self.cached("fused", build, "fusing")

    def onnx_custom(self):
        """The com.bridge ONNX export (fused ops as custom-domain nodes with their
        model-local functions), or the .onnx MODEL itself."""
        if self.kind == "onnx":
            return self._model
        return self.cached("onnx-custom", lambda: export.onnx_custom(self),
                           f"exporting ONNX (com.bridge, opset {export.custom_opset()})")

    def onnx_lowered(self):
        """Standard ops only: the custom export with every com.bridge node inlined."""
        return self.cached("onnx-lowered", lambda: export.inline(self.onnx_custom()), "inlining com.bridge nodes")

    def onnx_ge(self):
        """The GE-bound model.onnx `bridge export --to ge` writes (ATC opset, static
        shapes, no functions, the custom nodes plain in com.bridge)."""
        return self.cached("onnx-ge", lambda: export.onnx_ge(self), f"exporting for GE (opset {export.ge_opset()})")

    def onnx_path(self, key: str, model) -> str:
        """`model` saved once under the run's work folder: onnxruntime reads the
        file itself (one serialisation however many sessions use it)."""
        def write():
            return atomic.write_bytes(os.path.join(self.workdir, f"{key}.onnx"), model.SerializeToString())
        return self.cached(f"path:{key}", write, f"writing {key}.onnx")

    # -- inputs, layers -------------------------------------------------------
    def layer_order(self) -> List[str]:
        """Canonical intermediate names in topological order: the Keras layer
        outputs (a multi-output layer as name:i), or every node output of an .onnx
        MODEL."""
        if self.kind == "keras":
            return [n for n, _ in keras_layer_outputs(self._model)]
        if self.kind == "onnx":
            return [o for node in self._model.graph.node for o in node.output if o]
        return []

    def sample_inputs(self, batch: int, seed: int) -> Dict[str, np.ndarray]:
        """Seeded inputs, as `bridge export` verifies with (modelsource's
        sample_inputs: a built-in model's own sampler when its shapes fit, else
        floats in (0, 1] and ids within the vocabulary)."""
        return self.resolved.sample_inputs(batch, seed)


# -- Keras layer outputs -------------------------------------------------------
def keras_layer_outputs(model) -> List[Tuple[str, Any]]:
    """(canonical name, KerasTensor) for every layer output of a functional model,
    in the model's (topological) layer order. A layer shared with another model
    (the fused model calls the original's unfused layers on its own tensors)
    gives its output in this model's graph, not `layer.output` (its first call)."""
    own = _own_node_outputs(model)
    out = []
    for layer in model.layers:
        if type(layer).__name__ == "InputLayer":
            continue
        tensors = own.get(id(layer))
        if tensors is None:
            try:
                tensors = layer.output
            except Exception:  # a layer used twice has no single output
                continue
        if isinstance(tensors, (list, tuple)):
            out.extend((f"{layer.name}:{i}", t) for i, t in enumerate(tensors))
        elif isinstance(tensors, dict):
            out.extend((f"{layer.name}:{k}", t) for k, t in tensors.items())
        else:
            out.append((layer.name, tensors))
    return out


def _own_node_outputs(model) -> Dict[int, Any]:
    """{id(layer): its output in `model`'s own graph} for layers called once in
    it (Keras 3 functional models; {} for anything else)."""
    found: Dict[int, Any] = {}
    twice = set()
    for nodes in (getattr(model, "_nodes_by_depth", None) or {}).values():
        for node in nodes:
            op = getattr(node, "operation", None)
            if op is None or not hasattr(node, "outputs"):
                continue
            if id(op) in found:
                twice.add(id(op))
            outs = list(node.outputs)
            found[id(op)] = outs[0] if len(outs) == 1 else outs
    return {k: v for k, v in found.items() if k not in twice}


# -- resolving the MODEL argument -------------------------------------------------
def open_source(model, *, config: Optional[dict] = None, onnx_file: Optional[str] = None,
                input_shapes=None) -> ModelSource:
    """`model`: a built-in name, a .keras file, a SavedModel folder, an .onnx file
    (resolved by bridge.modelsource, as `bridge export` does), a Keras model, an
    onnx.ModelProto or a modelsource.ResolvedModel. `onnx_file`: use this export for the ONNX runtimes instead of
    exporting (a file exported earlier, or one altered on purpose). A bad MODEL or
    shape raises InputError (modelsource's error)."""
    from bridge import modelsource as ms
    config = dict(config or {})
    given = _load_onnx(onnx_file, "--onnx") if onnx_file else None
    if isinstance(model, ms.ResolvedModel):  # resolved already (a frozen .pb with its tensor names)
        resolved = model
    elif isinstance(model, (str, os.PathLike)):
        weights_seed = config.pop("seed", 0)
        resolved = ms.resolve(os.fspath(model), input_shapes=input_shapes, batch=None, seed=weights_seed,
                              config=config)
    else:
        resolved = ms.from_object(model, input_shapes=input_shapes)
    if resolved.kind == "onnx":
        if given is not None:
            raise InputError("--onnx applies to TensorFlow models; the MODEL is already an .onnx file")
        if resolved.path:  # external data next to the file must come along
            resolved.model = _load_onnx(resolved.path, "MODEL")
    return ModelSource(resolved, onnx_model=given)


def _load_onnx(path: str, what: str):
    import onnx
    if not os.path.isfile(path):
        raise InputError(f"{what} {path}: no such file")
    from onnx.external_data_helper import load_external_data_for_model
    from bridge.untrusted import external_data_problems, first
    try:
        model = onnx.load(path, load_external_data=False)
    except Exception as e:
        raise InputError(f"{what} {path} is not a readable ONNX model ({type(e).__name__}: {e})") from None
    base = os.path.dirname(os.path.abspath(path))
    problems = external_data_problems(model, base)
    if problems:  # checked before any byte is read, as bridge.modelsource does for MODEL
        raise InputError(f"{what} {path}: refusing {first(problems)}; external data must be regular files inside "
                         f"the model's folder (onnx's own rule)")
    try:
        load_external_data_for_model(model, base)
    except Exception as e:
        raise InputError(f"{what} {path}: cannot read its external data ({type(e).__name__}: {e})") from None
    return model
