"""Running TensorFlow models for parity: Keras models (with every layer output
exposed in one execution for per-layer mode) and SavedModel signatures, and
`TFRuntime`, the adapter base that runs one of them."""
from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from bridge.parity.runtime import Arrays, Runtime
from bridge.parity.source import keras_layer_outputs


def _args(model, inputs: Mapping[str, np.ndarray]):
    # Keras 3 refuses (dict inputs) or warns unless the call has the structure the model was built with
    from bridge.modelsource import keras_call_args, keras_input_names
    return keras_call_args(model, [inputs[n] for n in keras_input_names(model)])


def _numpy(x) -> np.ndarray:
    return np.asarray(x.numpy() if hasattr(x, "numpy") else x)


def _named(out, output_names: Sequence[str]) -> Arrays:
    if isinstance(out, dict):
        return {k: _numpy(v) for k, v in out.items()}
    if not isinstance(out, (list, tuple)):
        out = [out]
    return dict(zip(output_names, (_numpy(o) for o in out)))


def run_keras(model, output_names: Sequence[str], inputs: Mapping[str, np.ndarray]) -> Arrays:
    """{output: array} of a Keras model in inference mode on `inputs` (by input name)."""
    return _named(model(_args(model, inputs), training=False), output_names)


class KerasRunner:
    """`aliases` maps a layer name of `model` to the canonical (unfused) layer
    name it stands for; layers of `model` that have no canonical name are not
    exposed."""

    def __init__(self, source, model, aliases: Optional[Dict[str, str]] = None):
        self.source = source
        self.model = model
        canonical = set(source.layer_order())
        self.layers: Dict[str, object] = {}
        for name, tensor in keras_layer_outputs(model):
            base, sep, idx = name.partition(":")
            mapped = (aliases or {}).get(base, base) + sep + idx
            if mapped in canonical and mapped not in self.layers:
                self.layers[mapped] = tensor

    def run(self, inputs) -> Arrays:
        return run_keras(self.model, self.source.output_names, inputs)

    def layer_names(self) -> List[str]:
        return list(self.layers)

    def run_with_intermediates(self, inputs, names: Sequence[str]) -> Tuple[Arrays, Arrays]:
        import keras
        names = [n for n in names if n in self.layers]
        outs = list(self.model.outputs)
        probe = keras.Model(self.model.inputs, outs + [self.layers[n] for n in names])
        got = probe(_args(self.model, inputs), training=False)
        got = [_numpy(g) for g in (got if isinstance(got, (list, tuple)) else [got])]
        outputs = dict(zip(self.source.output_names, got[:len(outs)]))
        return outputs, dict(zip(names, got[len(outs):]))


class SignatureRunner:
    def __init__(self, source):
        self.source = source
        self.fn = source.serving_signature()

    def run(self, inputs) -> Arrays:
        import tensorflow as tf
        out = self.fn(**{k: tf.constant(v) for k, v in inputs.items()})
        return {k: _numpy(out[k]) for k in self.source.output_names}

    def layer_names(self) -> List[str]:
        return []

    def run_with_intermediates(self, inputs, names):
        return self.run(inputs), {}


class TFRuntime(Runtime):
    """An adapter that runs a TensorFlow model through a runner above; a
    subclass says which in `runner(source)`."""
    kinds = ("keras", "savedmodel")

    def runner(self, source):  # pragma: no cover - abstract
        raise NotImplementedError

    def prepare(self, source):
        super().prepare(source)
        self._runner = self.runner(source)

    def run(self, inputs):
        return self._runner.run(inputs)

    def layer_names(self):
        return self._runner.layer_names()

    def run_with_intermediates(self, inputs, names):
        return self._runner.run_with_intermediates(inputs, names)
