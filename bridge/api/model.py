"""The `model` argument of the API, resolved as the CLI resolves MODEL: a name
or path goes to bridge.modelsource.resolve; a live object to from_object, and a
TensorFlow function (a tf.function or ConcreteFunction with an input signature,
or a tf.Module whose __call__ is one) becomes a SavedModel in a temporary
folder, loaded back: its serving signature is then what every road takes."""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from typing import Any, Mapping, Optional, Sequence

from bridge.modelsource import ModelSourceError, ResolvedModel

_folders: list = []  # SavedModels written for functions; removed at exit


def resolve(model: Any, *, input_shapes=None, batch: Optional[int] = None, seed: int = 0,
            config: Optional[Mapping[str, Any]] = None, graph_inputs: Optional[Sequence[str]] = None,
            graph_outputs: Optional[Sequence[str]] = None) -> ResolvedModel:
    """`model` -> ResolvedModel, with input shapes and batch applied (a frozen
    GraphDef .pb takes its tensor names in `graph_inputs`/`graph_outputs`);
    raises ModelSourceError with the CLI's message for anything it cannot use."""
    from bridge import modelsource
    if isinstance(model, (str, os.PathLike)):
        return modelsource.resolve(os.fspath(model), input_shapes=input_shapes, batch=batch, seed=seed,
                                   config=config, graph_inputs=graph_inputs, graph_outputs=graph_outputs)
    if config:
        raise ModelSourceError(f"--config applies to built-in models only, not to a {type(model).__name__}")
    return modelsource.from_object(live(model), input_shapes=input_shapes, batch=batch)


def live(model: Any) -> Any:
    """A model object as bridge.modelsource.from_object takes it: a TF function
    becomes a loaded SavedModel; anything else is returned as it is."""
    function = concrete_function(model)
    return model if function is None else _as_savedmodel(model, function)


def concrete_function(obj):
    """The ConcreteFunction `obj` stands for (None when it is no TF function):
    a ConcreteFunction, a tf.function with an input signature, or a tf.Module
    (not a Keras model) whose __call__ is such a tf.function."""
    if hasattr(obj, "inputs") and hasattr(obj, "outputs"):  # a Keras model: from_object takes it
        return None
    if hasattr(obj, "structured_input_signature") and hasattr(obj, "structured_outputs"):
        return obj
    fn = obj if hasattr(obj, "get_concrete_function") else getattr(obj, "__call__", None)
    if not hasattr(fn, "get_concrete_function"):
        return None
    if getattr(fn, "input_signature", None) is None:
        raise ModelSourceError(f"the {type(obj).__name__} has no input signature: decorate it with "
                               f"@tf.function(input_signature=[tf.TensorSpec(shape, dtype, name=...)])")
    return fn.get_concrete_function()


def _as_savedmodel(owner, function):
    import tensorflow as tf
    folder = tempfile.mkdtemp(prefix="bridge-function-")
    if not _folders:
        atexit.register(lambda: [shutil.rmtree(f, ignore_errors=True) for f in _folders])
    _folders.append(folder)
    holder = owner if isinstance(owner, tf.Module) else tf.Module()
    if holder is not owner:
        holder.tracked_variables = list(function.variables)  # the function's weights go into the SavedModel
    try:
        tf.saved_model.save(holder, folder, signatures={"serving_default": function})
        loaded = tf.saved_model.load(folder)
    except Exception as e:  # noqa: BLE001 - a function TensorFlow cannot save is a bad model
        first = str(e).strip().splitlines()
        raise ModelSourceError(f"cannot use the {type(owner).__name__} as a model: TensorFlow cannot save it as "
                               f"a SavedModel ({type(e).__name__}: {first[0] if first else ''})") from None
    name = owner.name if isinstance(owner, tf.Module) else getattr(owner, "__name__", None)
    loaded.name = name if isinstance(name, str) and name else "function"
    return loaded
