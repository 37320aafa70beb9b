"""The MODEL argument of `bridge export` / `bridge parity`, resolved once.

    from bridge import modelsource
    src = modelsource.resolve("yolov3-tiny", input_shapes=["1,96,96,3"], batch=None, seed=0)
    src.kind            # "builtin" | "keras" | "savedmodel" | "onnx"
    src.inputs          # [TensorInfo(name, shape with None for dynamic dims, dtype, vocabulary bound)]
    src.output_names    # in the model's own order (Keras output names)
    src.model           # keras.Model / the loaded SavedModel object / onnx.ModelProto
    fn = src.function()             # tf.function(input_signature=src.signature()) -> {output name: tensor}
    feeds = src.sample_inputs(seed=0)   # {input name: ndarray}, dynamic dims filled in

MODEL is a built-in name (bridge.models.names()), a `.keras` file, a SavedModel
directory (its `serving_default` signature) or an `.onnx` file; `from_object`
takes a model already in memory. `bridge parity` builds on the same resolution
and the same inputs (bridge.parity.source, bridge.parity.inputs). `--input-shape`
items are `NAME:D,D,...` with the FULL shape, batch included; `?` keeps a dim
dynamic; a single item without NAME applies to the only input. `--batch N` fixes
dim 0 of every input; without it the batch stays dynamic unless a shape fixes it.
A dim left open is kept open (exports keep it dynamic); one run of the model
(an export's verification, parity) puts `ResolvedModel.sample` in it: batch 1,
a sequence as long as the model's own bound or 16, an image side of 32
(`SampleDims`; `sample_note()` is the progress line that says so).

Bad arguments raise `ModelSourceError` (a ValueError; the CLI exits 2). Nothing
here imports TensorFlow until a TF model is resolved, so `.onnx` sources work on
a machine with onnxruntime only.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from bridge.errors import BridgeError

Dims = Tuple[Optional[int], ...]


class ModelSourceError(BridgeError, ValueError):
    """A MODEL argument, an input shape or input arrays that cannot be used; the
    message says why."""


@dataclass(frozen=True)
class TensorInfo:
    """One input or output of a model: what resolving a MODEL reads, what parity
    feeds, and what `bridge inspect` shows of a .tflite or .onnx file."""
    name: str
    shape: Dims                 # None: dynamic
    dtype: str                  # numpy name
    high: Optional[int] = None  # integers: exclusive upper bound (the size of the embedding or table indexed)

    def to_json(self) -> dict:
        d = {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}
        return d if self.high is None else dict(d, high=self.high)

    def concrete(self, batch: int, sample: "SampleDims" = None) -> Tuple[int, ...]:
        """The shape for one run: a dynamic batch becomes `batch`, any other
        dynamic dim the sample's (`SampleDims`: an image's side and channels, a
        sequence's length); the model keeps them dynamic, this is one run's."""
        return tuple(int(d) for d in (sample or SampleDims()).fill(self.shape, batch))


# A dim the model leaves open is no error: exports keep it open, and a run (the
# export's verification, parity) takes one sample of it. --input-shape overrides.
SAMPLE_LENGTH = 16        # a sequence length, where the model's config bounds none
MAX_SAMPLE_LENGTH = 128   # a config's longer max_sequence_length is sampled at this (a cheap run)
SAMPLE_SIDE = 32          # an image side (the smallest keras.applications' convolution stacks take)
SAMPLE_CHANNELS = 3


@dataclass(frozen=True)
class SampleDims:
    """What one run puts in the dims a model leaves open; `origin` says where
    the length comes from (for the progress line)."""
    length: int = SAMPLE_LENGTH
    side: int = SAMPLE_SIDE
    origin: str = f"bridge's default length {SAMPLE_LENGTH}"

    def fill(self, shape: Dims, batch: int) -> List[int]:
        """`shape` with its open dims filled: dim 0 the batch; an image's
        (rank 4: NHWC, or NCHW where dim 1 is a fixed channel count of at most 4
        and dim 3 is open) spatial dims the side and its channels 3; any other
        dim (sequences, features) the length."""
        out = list(shape)
        if out and out[0] is None:
            out[0] = batch
        if len(out) == 4:
            nchw = shape[1] is not None and shape[1] <= 4 and shape[3] is None
            spatial = (2, 3) if nchw else (1, 2)
            for i in (1, 2, 3):
                if out[i] is None:
                    out[i] = self.side if i in spatial else SAMPLE_CHANNELS
        return [self.length if d is None else d for d in out]
def _dims(shape) -> str:
    return "[" + ",".join("?" if d is None else str(d) for d in shape) + "]"


# -- input data ------------------------------------------------------------
def generate(infos: Sequence[TensorInfo], shapes: Mapping[str, Tuple[int, ...]], seed: int) -> Dict[str, np.ndarray]:
    """Seeded data of each input's dtype and a sensible range: floats in (0, 1]
    (never zero), integers within the vocabulary (`high`) or [0, 2) when
    nothing says (masks, segment ids), booleans."""
    rng = np.random.default_rng(seed)
    out = {}
    for info in infos:
        shape = shapes[info.name]
        dt = np.dtype(info.dtype)
        if dt.kind == "f":
            out[info.name] = (1.0 - rng.random(shape)).astype(dt)
        elif dt.kind in "iu":
            out[info.name] = rng.integers(0, info.high or 2, size=shape).astype(dt)
        elif dt.kind == "b":
            out[info.name] = rng.integers(0, 2, size=shape).astype(bool)
        else:
            raise ModelSourceError(f"input {info.name}: cannot generate data of dtype {dt.name}; give the arrays "
                                   f"(bridge parity --load-inputs)")
    return out


def check(infos: Sequence[TensorInfo], arrays: Mapping[str, np.ndarray], origin: str) -> Dict[str, np.ndarray]:
    """Inputs given from outside must name every model input with the right
    rank and dtype kind (fixed dims must match); the dtype is then the model's."""
    names = [i.name for i in infos]
    missing = [n for n in names if n not in arrays]
    if missing:
        raise ModelSourceError(f"{origin}: no array for input {missing[0]!r}; it has {sorted(arrays)}, "
                               f"the model needs {names}")
    out = {}
    for info in infos:
        a = np.asarray(arrays[info.name])
        if len(a.shape) != len(info.shape) or any(f is not None and f != d for f, d in zip(info.shape, a.shape)):
            raise ModelSourceError(f"{origin}: input {info.name!r} has shape {list(a.shape)}, the model wants "
                                   f"{_dims(info.shape)}")
        if a.dtype != np.dtype(info.dtype):
            if np.dtype(info.dtype).kind != a.dtype.kind:
                raise ModelSourceError(f"{origin}: input {info.name!r} has dtype {a.dtype.name}, the model wants "
                                       f"{info.dtype}")
            a = a.astype(info.dtype)
        out[info.name] = a
    return out


# -- --input-shape ---------------------------------------------------------
def parse_input_shapes(items: Union[None, Sequence[str], Mapping[str, Sequence]]) -> Dict[str, Dims]:
    """`["image:1,96,96,3", "mask:?,128"]` -> {"image": (1,96,96,3), "mask": (None,128)}.
    An item without NAME gets the key "" (the only input). Dicts pass through."""
    if not items:
        return {}
    if isinstance(items, Mapping):
        return {k: tuple(None if d in (None, -1, "?") else int(d) for d in v) for k, v in items.items()}
    out: Dict[str, Dims] = {}
    for item in items:
        name, sep, text = str(item).rpartition(":")
        if not sep:
            name, text = "", str(item)
        try:
            shape = tuple(None if d.strip() in ("?", "-1") else int(d) for d in text.split(","))
        except ValueError:
            raise ModelSourceError(f"--input-shape {item!r}: expected NAME:D,D,... (the full shape, batch first; "
                                   f"'?' for a dynamic dim), e.g. image:1,416,416,3") from None
        if any(d is not None and d < 0 for d in shape):
            raise ModelSourceError(f"--input-shape {item!r}: dims must be non-negative integers or '?'")
        if name in out:
            raise ModelSourceError(f"--input-shape {item!r}: input {name or '(unnamed)'!r} given twice")
        out[name] = shape
    return out


def apply_shapes(inputs: Sequence[TensorInfo], shapes: Mapping[str, Dims], batch: Optional[int]) -> List[TensorInfo]:
    """The model's inputs with --input-shape and --batch applied (checked against the model)."""
    shapes = dict(shapes)
    if "" in shapes:
        if len(inputs) != 1:
            raise ModelSourceError(f"--input-shape {_dims(shapes[''])} without a NAME needs a model with one input; "
                                   f"this one has {[i.name for i in inputs]}: write NAME:D,D,...")
        shapes[inputs[0].name] = shapes.pop("")
    unknown = sorted(set(shapes) - {i.name for i in inputs})
    if unknown:
        raise ModelSourceError(f"--input-shape {unknown[0]}: the model has no input {unknown[0]!r}; "
                               f"its inputs: {', '.join(f'{i.name}{_dims(i.shape)}' for i in inputs)}")
    if batch is not None and batch < 1:
        raise ModelSourceError(f"--batch {batch}: must be >= 1")
    out = []
    for info in inputs:
        shape = list(info.shape)
        if info.name in shapes:
            given = shapes[info.name]
            if len(given) != len(shape):
                raise ModelSourceError(f"--input-shape {info.name}:{_dims(given)[1:-1]}: {len(given)} dims given, "
                                       f"input {info.name!r} has rank {len(shape)} {_dims(info.shape)}")
            for i, (g, fixed) in enumerate(zip(given, shape)):
                if g is not None and fixed is not None and g != fixed:
                    raise ModelSourceError(f"--input-shape {info.name}:{_dims(given)[1:-1]}: dim {i} is fixed to "
                                           f"{fixed} by the model {_dims(info.shape)}")
                shape[i] = g if g is not None else fixed
        if batch is not None and shape:
            if info.shape and info.shape[0] is not None and info.shape[0] != batch:
                raise ModelSourceError(f"--batch {batch}: input {info.name!r} has a fixed batch of {info.shape[0]}")
            shape[0] = batch
        out.append(replace(info, shape=tuple(shape)))
    return out


# -- the resolved model ----------------------------------------------------
@dataclass
class ResolvedModel:
    """What `resolve` and `from_object` return; a parity run wraps it in a
    bridge.parity.source.ModelSource, which adds the run's memo."""
    arg: str                        # the MODEL argument as given
    kind: str                       # builtin | keras | savedmodel | onnx
    name: str                       # a short name (built-in name or file stem)
    model: Any                      # keras.Model | loaded SavedModel | onnx.ModelProto
    inputs: List[TensorInfo]
    output_names: List[str]
    path: Optional[str] = None
    config: Dict[str, Any] = field(default_factory=dict)   # built-in build() arguments
    _signature_fn: Any = field(default=None, repr=False)   # SavedModel: the serving signature
    sample: SampleDims = field(default_factory=SampleDims)  # a run's values of the dims the model leaves open

    @property
    def is_keras(self) -> bool:
        return self.kind in ("builtin", "keras")

    @property
    def is_graph(self) -> bool:
        """A TensorFlow graph (a SavedModel or a frozen GraphDef): fused at graph level."""
        return self.kind in ("savedmodel", "graphdef")

    def describe(self) -> str:
        what = {"builtin": "built-in model", "keras": "Keras file", "savedmodel": "SavedModel",
                "graphdef": "frozen GraphDef", "onnx": "ONNX model"}[self.kind]
        ins = ", ".join(f"{i.name}{_dims(i.shape)}:{i.dtype}" for i in self.inputs)
        return f"{what} {self.path or self.name} (inputs {ins}; outputs {', '.join(self.output_names)})"

    def signature(self):
        """tf.TensorSpecs of the inputs (names kept: they become the ONNX input names)."""
        import tensorflow as tf
        return [tf.TensorSpec(i.shape, tf.as_dtype(i.dtype), name=i.name) for i in self.inputs]

    def function(self, model=None):
        """A tf.function over the inputs returning {output name: tensor}. `model`
        replaces the Keras model (e.g. the fused one, same inputs and outputs)."""
        import tensorflow as tf
        if self.kind == "onnx":
            raise ModelSourceError(f"{self.arg} is already an ONNX model; there is no TensorFlow function to trace")
        names = list(self.output_names)
        if self.is_graph:  # `model`: a graph standing for it (graph_fuse's fused GraphModel), or None
            sig = model.signatures["serving_default"] if model is not None else self._signature_fn
            keys = [i.name for i in self.inputs]

            def call(*args):
                out = sig(**dict(zip(keys, args)))
                return {n: out[n] for n in names}
        else:
            keras_model = model if model is not None else self.model

            def call(*args):
                out = keras_model(keras_call_args(keras_model, args), training=False)
                if isinstance(out, Mapping):
                    return {n: out[n] for n in names}
                out = list(out) if isinstance(out, (list, tuple)) else [out]
                return dict(zip(names, out))
        return tf.function(call, input_signature=self.signature(), autograph=False)

    @property
    def serving_signature(self):
        """A SavedModel's `serving_default` signature, where its inputs and
        outputs were read from; None for other kinds."""
        return self._signature_fn

    def concrete_shapes(self, batch: int = 1) -> Dict[str, Tuple[int, ...]]:
        """Input shapes for one run (see TensorInfo.concrete): the model's open
        dims at `self.sample`."""
        return {i.name: i.concrete(batch, self.sample) for i in self.inputs}

    def sample_note(self, batch: int = 1) -> str:
        """The progress line of a run at sample dims: which inputs leave dims
        other than the batch open, the shapes this run takes ('' when none)."""
        open_ = [i for i in self.inputs if any(d is None for d in i.shape[1:])]
        if not open_:
            return ""
        shapes = self.concrete_shapes(batch)
        return (f"dims left open: {', '.join(f'{i.name}{_dims(i.shape)}' for i in open_)}; this run at "
                f"{', '.join(f'{i.name}{_dims(shapes[i.name])}' for i in open_)} ({self.sample.origin}; "
                f"--input-shape NAME:D,D,... fixes them)")

    def sample_inputs(self, batch: int = 1, seed: int = 0) -> Dict[str, np.ndarray]:
        """Seeded realistic inputs: a built-in model's own sampler when its shapes
        fit (images, token ids and masks; it picks a sequence length the model
        leaves open), else `generate`."""
        if self.kind == "builtin":
            got = _builtin_sample(self.model, [i.name for i in self.inputs], batch, seed)
            if got is not None and set(got) == {i.name for i in self.inputs} and \
                    all(_fits(i.shape, got[i.name].shape, batch) for i in self.inputs):
                return check(self.inputs, got, f"bridge.models.sample_inputs({self.name!r})")
        return generate(self.inputs, self.concrete_shapes(batch), seed)


def _fits(dims: Dims, shape: Sequence[int], batch: int) -> bool:
    """`shape` has the batch and every dim `dims` fixes."""
    return len(shape) == len(dims) and (not shape or shape[0] == batch) and \
        all(d is None or d == n for d, n in zip(dims[1:], shape[1:]))


def _builtin_sample(model, names: Sequence[str], batch: int, seed: int) -> Optional[Dict[str, np.ndarray]]:
    """bridge.models' sampler as {input name: array}; None without bridge.models."""
    try:
        from bridge import models
        fn = models.sample_inputs
    except (ImportError, AttributeError):
        return None
    got = fn(model, batch=batch, seed=seed)
    if not isinstance(got, Mapping):
        got = dict(zip(names, got if isinstance(got, (list, tuple)) else [got]))
    return {k: np.asarray(v) for k, v in got.items()}


# -- resolving the MODEL argument -------------------------------------------
def builtin_names() -> List[str]:
    try:
        from bridge import models
        return list(models.names())
    except Exception:
        return []


def resolve(arg: str, input_shapes=None, batch: Optional[int] = None, seed: int = 0,
            config: Optional[Mapping[str, Any]] = None, graph_inputs: Optional[Sequence[str]] = None,
            graph_outputs: Optional[Sequence[str]] = None) -> ResolvedModel:
    """The MODEL argument -> ResolvedModel (see the module doc). A frozen GraphDef
    (`.pb`) takes its input and output tensor names as tf2onnx's --graphdef does
    (`graph_inputs`: its placeholders by default; `graph_outputs`: required)."""
    shapes = parse_input_shapes(input_shapes)
    config = dict(config or {})
    path = os.path.expanduser(arg)
    if arg in builtin_names():
        src = _builtin(arg, shapes, seed, config)
    elif os.path.isdir(path):
        if not os.path.exists(os.path.join(path, "saved_model.pb")):
            raise ModelSourceError(f"{arg} is a directory but not a SavedModel (no saved_model.pb in it)")
        _stays_inside(path)
        src = _savedmodel(path)
    elif path.endswith(".keras"):
        _must_exist(arg, path)
        src = _keras_file(path)
    elif path.endswith(".onnx"):
        _must_exist(arg, path)
        src = _onnx_file(path)
    elif path.endswith(".pb"):
        _must_exist(arg, path)
        src = _graphdef_file(path, graph_inputs, graph_outputs)
    else:
        known = ", ".join(builtin_names()) or "(bridge.models is not importable)"
        raise ModelSourceError(f"unknown model {arg!r}: not a built-in model ({known}), nor a .keras file, "
                               f"a SavedModel directory, a frozen GraphDef .pb or an .onnx file")
    if (graph_inputs or graph_outputs) and src.kind != "graphdef":
        raise ModelSourceError(f"--inputs/--outputs name the tensors of a frozen GraphDef (.pb), not of {arg}")
    if config and src.kind != "builtin":
        raise ModelSourceError(f"--config applies to built-in models only, not to {arg}")
    src.arg = arg
    src.inputs = apply_shapes(src.inputs, shapes, batch)
    return src


def from_object(obj, input_shapes=None, batch: Optional[int] = None) -> ResolvedModel:
    """A model already in memory: a Keras model, a loaded SavedModel object or an
    onnx.ModelProto."""
    shapes = parse_input_shapes(input_shapes)
    if type(obj).__name__ == "ModelProto":  # not isinstance: onnx need not be imported
        src = _onnx_model(obj, obj.graph.name or "onnx model")
    elif hasattr(obj, "inputs") and hasattr(obj, "outputs") and callable(obj):
        inputs, outputs = _keras_infos(obj)
        src = ResolvedModel(arg=getattr(obj, "name", "model"), kind="keras", name=getattr(obj, "name", "model"),
                            model=obj, inputs=inputs, output_names=outputs, sample=keras_sample_dims(obj))
    elif "serving_default" in getattr(obj, "signatures", {}):
        src = _savedmodel_object(obj, getattr(obj, "name", "savedmodel"))
    else:
        raise ModelSourceError(f"cannot use {type(obj).__name__} as a model: expected a Keras model, a loaded "
                               f"SavedModel with a serving_default signature or an onnx.ModelProto")
    src.inputs = apply_shapes(src.inputs, shapes, batch)
    return src


def _must_exist(arg, path):
    if not os.path.isfile(path):
        raise ModelSourceError(f"no such file: {arg}")


def keras_input_names(model) -> List[str]:
    """The names of `model.inputs` (Keras' flattened order), from the model's
    input structure: a dict input is named by its key (keras_hub backbones take
    {'token_ids', 'padding_mask', ...}), anything else by its tensor's name, or
    where Keras made that name up (`keras_tensor_N`), by its input layer's, or
    where Keras made both up, by position (`input_layer`, or `input_layer_I`
    of several): a keras_hub backbone rebuilds its inputs on every load, each
    time with new made-up names, so the ONNX file written from one load would
    not take the inputs of the next."""
    struct = getattr(model, "_inputs_struct", None)
    names = {}
    if struct is not None:
        def walk(s, key=None):
            if isinstance(s, Mapping):
                for k, v in s.items():
                    walk(v, str(k))
            elif isinstance(s, (list, tuple)):
                for v in s:
                    walk(v, None)
            elif key is not None:
                names[id(s)] = key
        walk(struct)
    count = len(model.inputs)
    out = [names.get(id(t)) or _own_name(t, i, count) for i, t in enumerate(model.inputs)]
    if len(set(out)) != len(out):  # keys repeated at different depths: the tensor names are unique
        out = [t.name for t in model.inputs]
    return out


def _own_name(tensor, index: int, count: int) -> str:
    if not re.fullmatch(r"keras_tensor(_\d+)?", tensor.name or ""):
        return tensor.name
    layer = getattr(getattr(tensor, "_keras_history", None), "operation", None)
    name = getattr(layer, "name", "") or ""
    if name and not re.fullmatch(r"input_layer(_\d+)?", name):
        return name
    return "input_layer" if count == 1 else f"input_layer_{index}"


def keras_call_args(model, flat: Sequence):
    """The arrays of `model.inputs` (flattened order) in the structure the
    model was built with (a dict, nested lists, one tensor), so Keras 3 does not
    refuse or reorder them."""
    flat = list(flat)
    struct = getattr(model, "_inputs_struct", None)
    if struct is not None:
        from keras import tree
        return tree.pack_sequence_as(struct, flat)
    return flat if len(flat) > 1 else flat[0]


def _keras_infos(model) -> Tuple[List[TensorInfo], List[str]]:
    vocab = _embedding_sizes(model)
    inputs = [TensorInfo(name, tuple(None if d is None else int(d) for d in t.shape), np.dtype(t.dtype).name,
                         vocab.get(id(t)))
              for name, t in zip(keras_input_names(model), model.inputs)]
    outputs = _dict_output_keys(model) or list(getattr(model, "output_names", None) or
                                                [getattr(t, "name", f"output_{i}") for i, t in enumerate(model.outputs)])
    return inputs, outputs


# where a Keras model (a keras_hub backbone, or a layer inside it) says how long its sequences may be
LENGTH_ATTRIBUTES = ("max_sequence_length", "sequence_length", "max_position_embeddings", "max_label_length")


def keras_sample_dims(model) -> SampleDims:
    """The sample of `model`'s open dims: a sequence as long as the model's
    own bound (keras_hub backbones' max_sequence_length, a position
    embedding's sequence_length, PARSeq's max_label_length; at most
    MAX_SAMPLE_LENGTH), else the defaults; and at least as long as its
    unpadded Conv1D stack needs for one output step (an audio encoder's
    convolutions: Moonshine's kernel 127 stride 64, then 7/3 and 3/2, take
    895 samples), since a shorter run fails."""
    layers = [model] + list(_sublayers(model))
    sample = SampleDims()
    for layer in layers:
        bound = next(((attr, getattr(layer, attr)) for attr in LENGTH_ATTRIBUTES
                      if isinstance(getattr(layer, attr, None), int) and not isinstance(getattr(layer, attr), bool)
                      and getattr(layer, attr) > 0), None)
        if bound is not None:
            attr, n = bound
            length = min(n, MAX_SAMPLE_LENGTH)
            why = f"{attr} {n}" + (f", at most {MAX_SAMPLE_LENGTH}" if n > MAX_SAMPLE_LENGTH else "")
            sample = SampleDims(length=length, origin=f"length {length}: {getattr(layer, 'name', '')} {why}")
            break
    need = _conv1d_length(layers)
    if need > sample.length:
        sample = SampleDims(length=need, origin=f"length {need}: the least its Conv1D stack takes "
                                                 f"(was {sample.origin})")
    return sample


def _conv1d_length(layers) -> int:
    """The shortest input the model's unpadded (padding 'valid') Conv1D layers,
    in the order the model holds them, turn into one output step: each needs
    kernel + stride * (what the next one needs - 1) (dilations included)."""
    convs = [layer for layer in layers if type(layer).__name__ == "Conv1D"
             and getattr(layer, "padding", "") == "valid"]
    need = 1
    for conv in reversed(convs):
        k, s, d = (int(_first(getattr(conv, a, 1))) for a in ("kernel_size", "strides", "dilation_rate"))
        need = d * (k - 1) + 1 + s * (need - 1)
    return need


def _first(v):
    return v[0] if isinstance(v, (tuple, list)) else v


def _embedding_sizes(model) -> Dict[int, int]:
    """id(input tensor) -> vocabulary size of the Embedding it feeds directly:
    an Embedding layer (or a subclass, e.g. keras_hub's ReversibleEmbedding), or
    the smallest Embedding inside a layer that holds some (keras_hub's
    TokenAndPositionEmbedding)."""
    sizes: Dict[int, int] = {}
    ids = {id(t) for t in model.inputs}
    for layer in model.layers:
        size = _vocabulary(layer)
        if size is None:
            continue
        try:
            src = layer.input
        except Exception:
            continue
        if id(src) in ids:
            sizes[id(src)] = min(sizes.get(id(src), size), size)
    return sizes


def _vocabulary(layer) -> Optional[int]:
    dims = [getattr(sub, "input_dim", None) for sub in [layer] + list(_sublayers(layer))
            if "Embedding" in [c.__name__ for c in type(sub).__mro__]]
    dims = [int(d) for d in dims if isinstance(d, int) and d > 0]
    return min(dims) if dims else None


def _sublayers(layer):
    flatten = getattr(layer, "_flatten_layers", None)
    if flatten is None:
        return []
    try:
        return [s for s in flatten(include_self=False, recursive=True)]
    except TypeError:
        return []


def _dict_output_keys(model) -> Optional[List[str]]:
    """For a model that returns a dict: its keys, in Keras' flattening order
    (sorted: the order of model.outputs). `model.output_names` names the output
    layers instead, which need not be the keys the model returns."""
    try:
        struct = model.output
    except (AttributeError, ValueError):  # e.g. a Sequential model never called
        return None
    if isinstance(struct, dict) and struct and all(isinstance(k, str) for k in struct):
        return sorted(struct)
    return None


def _builtin(name, shapes, seed, config) -> ResolvedModel:
    from bridge import models
    if shapes and "input_size" not in config:
        size = input_size_from(shapes)
        if size is not None:
            config["input_size"] = size
    try:
        model = models.build(name, seed=seed, **config)
    except (TypeError, ValueError) as e:
        raise ModelSourceError(f"cannot build {name} with {config}: {e}") from None
    inputs, outputs = _keras_infos(model)
    return ResolvedModel(arg=name, kind="builtin", name=name, model=model, inputs=inputs, output_names=outputs,
                         config=dict(config, seed=seed), sample=keras_sample_dims(model))


def input_size_from(shapes) -> Optional[Union[int, Tuple[int, int]]]:
    """A built-in model's input_size from the shapes given: H (or (H, W)) of
    images [N,H,W,C], the sequence length of tokens [N,S] ("?" when it is left
    dynamic: one model for any length); None when the shapes do not agree on one."""
    sizes = set()
    for shape in shapes.values():
        if len(shape) == 4 and None not in shape[1:3]:
            sizes.add(shape[1] if shape[1] == shape[2] else (shape[1], shape[2]))
        elif len(shape) == 2:
            sizes.add("?" if shape[1] is None else shape[1])
        else:
            return None
    return sizes.pop() if len(sizes) == 1 else None


def _load_keras_support():
    """Registers the fused Keras layers (bridge.converters) so .keras files that use them load."""
    import bridge.tf_ops  # noqa: F401  the op library, before any graph with the ops loads
    try:
        from bridge import models
        models.register_layers()
    except (ImportError, AttributeError):
        pass


def _keras_file(path) -> ResolvedModel:
    from bridge.untrusted import archive_problems, first
    problems = archive_problems(path)
    if problems:
        raise ModelSourceError(f"refusing the Keras file {path}: {first(problems)}")
    _load_keras_support()
    import keras
    try:
        model = keras.saving.load_model(path)  # safe mode: no Python code (lambdas) from the file runs
    except Exception as e:
        if "safe_mode" in str(e):
            raise ModelSourceError(f"refusing the Keras file {path}: it holds Python code (a Lambda layer or a "
                                   f"lambda in its config), which would run on loading; bridge loads Keras files "
                                   f"in safe mode. Replace the lambda by a registered layer class "
                                   f"(keras.saving.register_keras_serializable) and save again") from None
        from bridge.team_imports import missing_class_message
        missing = missing_class_message(path, e)  # a team's layer: one line naming it and --import
        if missing:
            raise ModelSourceError(missing) from None
        raise ModelSourceError(f"cannot load the Keras file {path}: {type(e).__name__}: {e}") from None
    inputs, outputs = _keras_infos(model)
    return ResolvedModel(arg=path, kind="keras", name=_stem(path), model=model, inputs=inputs,
                         output_names=outputs, path=path, sample=keras_sample_dims(model))


def _savedmodel(path) -> ResolvedModel:
    _load_keras_support()  # the op library must be loaded before a SavedModel with the ops reloads
    import tensorflow as tf
    try:
        obj = tf.saved_model.load(path)
    except Exception as e:
        missing = _unregistered_op(str(e))
        if missing:
            raise ModelSourceError(_unregistered_op_message(path, missing)) from None
        raise ModelSourceError(f"cannot load the SavedModel {path}: {type(e).__name__}: {str(e).splitlines()[0]}") from None
    if "serving_default" not in getattr(obj, "signatures", {}):
        raise ModelSourceError(f"the SavedModel {path} has no 'serving_default' signature; save it with "
                               f"signatures=... or a tf.function __call__ with an input_signature")
    src = _savedmodel_object(obj, _stem(path))
    src.path = path
    return src


def _unregistered_op(message: str):
    import re
    m = re.search(r"Op type not registered '([A-Za-z0-9_>]+)'", message)
    return m.group(1) if m else None


def _unregistered_op_message(path, op: str) -> str:
    from bridge import ops
    if op in ops.SPECS:
        return (f"the SavedModel {path} uses the op {op} (spec from {ops.ORIGINS[op]}), whose TensorFlow kernel is "
                f"not loaded: give its library with --op-library LIB.so (or the library's CMake folder)")
    return (f"the SavedModel {path} uses the op {op}, which no loaded library registers: give its TensorFlow kernel "
            f"library with --op-library LIB.so and its spec with --op-spec FILE.py")


def _savedmodel_object(obj, name) -> ResolvedModel:
    sig = obj.signatures["serving_default"]
    specs = sig.structured_input_signature[1]
    inputs = [TensorInfo(k, tuple(None if d is None else int(d) for d in spec.shape), np.dtype(spec.dtype.as_numpy_dtype).name)
              for k, spec in sorted(specs.items())]
    outputs = list(sig.structured_outputs)
    return ResolvedModel(arg=name, kind="savedmodel", name=name, model=obj, inputs=inputs,
                         output_names=outputs, _signature_fn=sig)


def _graphdef_file(path, inputs, outputs) -> ResolvedModel:
    """A TF1 frozen GraphDef, read as bridge.converters.graph_model.GraphModel."""
    _load_keras_support()  # a graph with bridge's ops imports only where they are registered
    from bridge.converters.graph_model import GraphModelError, load
    try:
        gm = load(path, inputs=list(inputs or ()), outputs=list(outputs or ()))
    except GraphModelError as e:
        raise ModelSourceError(str(e)) from None
    src = _savedmodel_object(gm, _stem(path))
    src.kind, src.path = "graphdef", path
    return src


def _onnx_file(path) -> ResolvedModel:
    import onnx
    from bridge.untrusted import external_data_problems, first
    try:
        model = onnx.load(path, load_external_data=False)
    except Exception as e:
        raise ModelSourceError(f"cannot read the ONNX file {path}: {type(e).__name__}: {e}") from None
    problems = external_data_problems(model, os.path.dirname(os.path.abspath(path)))
    if problems:
        raise ModelSourceError(f"refusing the ONNX file {path}: {first(problems)}; external data must be regular "
                               f"files inside the model's folder (onnx's own rule)")
    src = _onnx_model(model, _stem(path))
    src.arg, src.path = path, path
    return src


def _onnx_model(model, name) -> ResolvedModel:
    from onnx import helper
    init = {t.name: t for t in model.graph.initializer}
    vocab = {}
    for node in model.graph.node:  # an integer input used as Gather indices into a table
        if node.op_type == "Gather" and len(node.input) == 2 and node.input[0] in init:
            axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
            vocab[node.input[1]] = int(init[node.input[0]].dims[axis])
    inputs = []
    for v in model.graph.input:
        if v.name in init:
            continue
        t = v.type.tensor_type
        shape = tuple(d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim)
        inputs.append(TensorInfo(v.name, shape, np.dtype(helper.tensor_dtype_to_np_dtype(t.elem_type)).name,
                                 vocab.get(v.name)))
    return ResolvedModel(arg=name, kind="onnx", name=name, model=model, inputs=inputs,
                         output_names=[o.name for o in model.graph.output])


def _stays_inside(folder) -> None:
    """A SavedModel folder is read only inside itself: no link out of it, no asset
    file name that leaves it."""
    from bridge.untrusted import links_out_of, plain_relative, shown
    links = links_out_of(folder)
    if links:
        raise ModelSourceError(f"refusing the SavedModel {folder}: {shown(links[0])} is a symbolic link out of it")
    try:
        from tensorflow.core.protobuf import saved_model_pb2
        sm = saved_model_pb2.SavedModel()
        with open(os.path.join(folder, "saved_model.pb"), "rb") as f:
            sm.ParseFromString(f.read())
    except Exception:  # unreadable: tf.saved_model.load says why
        return
    for meta in sm.meta_graphs:
        for asset in meta.asset_file_def:
            if not plain_relative(asset.filename):
                raise ModelSourceError(f"refusing the SavedModel {folder}: its asset file name "
                                       f"{shown(asset.filename)} leaves the folder")


def _stem(path) -> str:
    base = os.path.basename(os.path.normpath(path))
    return base.rsplit(".", 1)[0] if "." in base else base
