"""The MODEL of a parity run, resolved once and shared by every runtime.

A `ModelSource` knows the model's kind ("keras", "savedmodel" or "onnx"), its
inputs and canonical output names, and memoises everything expensive (the
fused model, the ONNX export, files written for sessions) so each is built once
per run however many runtimes use it.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import threading
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from bridge.parity.inputs import InputError, InputSpec
from bridge.parity.runtime import Unavailable
from bridge.parity.stages import StageLog, release_heap

KINDS = ("keras", "savedmodel", "onnx")


class ModelSource:
    def __init__(self, kind: str, model: Any, *, label: str, onnx_model=None, builtin: Optional[str] = None,
                 config: Optional[dict] = None):
        assert kind in KINDS
        self.kind = kind
        self.label = label
        self.builtin = builtin
        self.config = dict(config or {})
        self._model = model
        self._cache: Dict[str, Any] = {}
        self._errors: Dict[str, BaseException] = {}
        self._lock = threading.RLock()
        self._workdir: Optional[str] = None
        self.stages = StageLog()   # time and peak memory of each build and each runtime's steps
        self.input_shapes: Optional[Dict[str, Tuple[int, ...]]] = None  # set by the runner before any export
        self.per_layer = False           # set by the runner: sessions are then made with the layers marked
        self.requested: set = set()      # runtimes named in --runtimes (set by the runner)
        self.ge_opset_note = ""          # why the GE export is above ATC's default opset, if it is
        if onnx_model is not None:  # a given export replaces bridge's own (--onnx)
            self._cache["onnx-custom"] = onnx_model
        self.inputs: List[InputSpec] = self._input_specs()
        self.output_names: List[str] = self._output_names()

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
                    with self.stages.stage(label):
                        value = build()
                    release_heap()  # what the build freed (tf2onnx's and the converter's copies) goes back
                else:
                    value = build()
            except BaseException as e:
                self._errors[key] = e
                raise
            self._cache[key] = value
            return value

    def put(self, key: str, value: Any) -> None:
        """Seeds the memo (tests plant altered exports this way)."""
        self._cache[key] = value

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

    def fused_model(self):
        """(fused Keras model, fusion report) from bridge.converters.fuse."""
        def build():
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
        from bridge.parity import export
        return self.cached("onnx-custom", lambda: export.onnx_custom(self),
                           f"exporting ONNX (com.bridge, opset {export.custom_opset()})")

    def onnx_lowered(self):
        """Standard ops only: the custom export with every com.bridge node inlined."""
        from bridge.parity import export
        return self.cached("onnx-lowered", lambda: export.inline(self.onnx_custom()), "inlining com.bridge nodes")

    def onnx_ge(self):
        """The GE-bound model.onnx `bridge export --to ge` writes (ATC opset, static
        shapes, no functions, the custom nodes plain in com.bridge)."""
        from bridge.parity import export
        return self.cached("onnx-ge", lambda: export.onnx_ge(self), f"exporting for GE (opset {export.ge_opset()})")

    def onnx_path(self, key: str, model) -> str:
        """`model` saved once under the run's work folder: onnxruntime reads the
        file itself (one serialisation however many sessions use it)."""
        def write():
            path = os.path.join(self.workdir, f"{key}.onnx")
            with open(path, "wb") as f:
                f.write(model.SerializeToString())
            return path
        return self.cached(f"path:{key}", write, f"writing {key}.onnx")

    # -- inputs, outputs, layers -------------------------------------------
    def _input_specs(self) -> List[InputSpec]:
        if self.kind == "keras":
            return _keras_inputs(self._model)
        if self.kind == "savedmodel":
            return _saved_model_inputs(self._model)
        return _onnx_inputs(self._model)

    def _output_names(self) -> List[str]:
        if self.kind == "keras":
            names = list(getattr(self._model, "output_names", None) or [])
            if len(names) != len(self._model.outputs):
                names = [f"output_{i}" for i in range(len(self._model.outputs))]
            return names
        if self.kind == "savedmodel":
            return list(_signature(self._model).structured_outputs)
        return [o.name for o in self._model.graph.output]

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
        """Seeded inputs: the built-in model's own sampler when its shapes fit,
        else `inputs.generate` (floats in [0,1], ids within the vocabulary)."""
        from bridge.parity import inputs as inputs_mod
        concrete = {s.name: s.concrete(batch) for s in self.inputs}
        if self.builtin:
            arrays = _builtin_sample(self.builtin, self._model, batch, seed)
            if arrays is not None and {k: tuple(np.shape(v)) for k, v in arrays.items()} == concrete:
                return inputs_mod.check(self.inputs, arrays, f"bridge.models.sample_inputs({self.builtin!r})")
        return inputs_mod.generate(self.inputs, concrete, seed)


# -- helpers per kind -----------------------------------------------------------
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


def _keras_inputs(model) -> List[InputSpec]:
    vocab = _embedding_sizes(model)
    specs = []
    for t in model.inputs:
        dtype = np.dtype(getattr(t.dtype, "name", t.dtype)).name
        specs.append(InputSpec(t.name, tuple(t.shape), dtype, vocab.get(id(t))))
    return specs


def _embedding_sizes(model) -> Dict[int, int]:
    """id(input tensor) -> vocabulary size of the Embedding it feeds directly."""
    sizes: Dict[int, int] = {}
    ids = {id(t) for t in model.inputs}
    for layer in model.layers:
        if type(layer).__name__ != "Embedding":
            continue
        try:
            src = layer.input
        except Exception:
            continue
        if id(src) in ids:
            sizes[id(src)] = min(sizes.get(id(src), layer.input_dim), layer.input_dim)
    return sizes


def _signature(obj):
    sigs = getattr(obj, "signatures", None) or {}
    if "serving_default" in sigs:
        return sigs["serving_default"]
    if sigs:
        return next(iter(sigs.values()))
    raise InputError("the SavedModel has no serving signature; export it with a signature "
                     "(tf.saved_model.save(obj, path, signatures=...) or keras model.export(path))")


def _saved_model_inputs(obj) -> List[InputSpec]:
    _, kwargs = _signature(obj).structured_input_signature
    return [InputSpec(name, tuple(spec.shape.as_list()), spec.dtype.as_numpy_dtype().dtype.name)
            for name, spec in kwargs.items()]


def _onnx_inputs(model) -> List[InputSpec]:
    import onnx
    from onnx import helper
    init = {i.name: i for i in model.graph.initializer}
    vocab = {}
    for node in model.graph.node:  # an integer input used as Gather indices into a table
        if node.op_type == "Gather" and len(node.input) == 2 and node.input[0] in init:
            axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
            vocab[node.input[1]] = int(init[node.input[0]].dims[axis])
    specs = []
    for vi in model.graph.input:
        if vi.name in init:
            continue
        tt = vi.type.tensor_type
        dims = tuple(d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim)
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type)).name
        specs.append(InputSpec(vi.name, dims, dtype, vocab.get(vi.name)))
    del onnx
    return specs


def _builtin_sample(name, model, batch, seed) -> Optional[Dict[str, np.ndarray]]:
    try:
        from bridge import models
        fn = models.sample_inputs
    except (ImportError, AttributeError):
        return None
    data = fn(model, batch=batch, seed=seed)
    if isinstance(data, dict):
        return {k: np.asarray(v) for k, v in data.items()}
    if not isinstance(data, (list, tuple)):
        data = [data]
    return {t.name: np.asarray(a) for t, a in zip(model.inputs, data)}


# -- resolving the MODEL argument -------------------------------------------------
def open_source(model, *, config: Optional[dict] = None, onnx_file: Optional[str] = None,
                input_shapes=None) -> ModelSource:
    """`model`: a built-in name, a .keras file, a SavedModel folder, an .onnx file
    (resolved by bridge.modelsource, as `bridge export` does), a Keras model or an
    onnx.ModelProto. `onnx_file`: use this export for the ONNX runtimes instead of
    exporting (a file exported earlier, or one altered on purpose)."""
    from bridge import modelsource as ms
    config = dict(config or {})
    given = _load_onnx(onnx_file, "--onnx") if onnx_file else None
    try:
        if not isinstance(model, (str, os.PathLike)):
            if type(model).__name__ == "ModelProto":
                src = ModelSource("onnx", model, label=model.graph.name or "onnx model")
                return _shaped(src, ms.apply_shapes(src.inputs, ms.parse_input_shapes(input_shapes), None))
            resolved = ms.from_object(model, input_shapes=input_shapes)
            label = getattr(model, "name", "model")
        else:
            arg = os.fspath(model)
            weights_seed = config.pop("seed", 0)
            resolved = ms.resolve(arg, input_shapes=input_shapes, batch=None, seed=weights_seed, config=config)
            label = resolved.name
    except ms.ModelSourceError as e:
        raise InputError(str(e)) from None
    if resolved.kind == "onnx":
        if given is not None:
            raise InputError("--onnx applies to TensorFlow models; the MODEL is already an .onnx file")
        if resolved.path:  # external data next to the file must come along
            resolved.model = _load_onnx(resolved.path, "MODEL")
        src = ModelSource("onnx", resolved.model, label=label)
    else:
        kind = "savedmodel" if resolved.kind == "savedmodel" else "keras"
        src = ModelSource(kind, resolved.model, label=label, onnx_model=given,
                          builtin=resolved.name if resolved.kind == "builtin" else None, config=resolved.config)
    src.output_names = list(resolved.output_names)
    return _shaped(src, resolved.inputs)


def _shaped(src: ModelSource, infos) -> ModelSource:
    """Takes the input shapes as resolved (--input-shape applied), keeping the
    vocabulary bounds found in the model."""
    high = {s.name: s.high for s in src.inputs}
    src.inputs = [InputSpec(i.name, tuple(i.shape), i.dtype, high.get(i.name)) for i in infos]
    return src


def _load_onnx(path: str, what: str):
    import onnx
    if not os.path.isfile(path):
        raise InputError(f"{what} {path}: no such file")
    try:
        return onnx.load(path)
    except Exception as e:
        raise InputError(f"{what} {path} is not a readable ONNX model ({type(e).__name__}: {e})") from None
