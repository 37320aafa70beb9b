"""The Keras layers a fused model is made of: each calls one bridge.tf_ops op.

Each built-in op's layer is its folder's keras_layer.py (bridge/ops/<op>/), loaded
here by name and exported from this module; `FusedOp` stands for any other spec'd
op (a pattern a spec declares, bridge.ops.fusion). They hold the original,
unfolded weights and pass them to the op, which folds per call (docs/ops.md);
attributes are the op's own (TF form, from the op spec), validated at
construction. All are registered as Keras serializable (package "bridge"): a
`.keras` file of a fused model loads after importing this module
(bridge.models.load does), and running it needs the op library (bridge.tf_ops,
imported on the first call).
"""
from __future__ import annotations

import keras
import tensorflow as tf

from bridge import ops as _specs

from .fused_layer_base import Fused, infer_shapes, static_shape, tf_ops


def tf_function(spec):
    """`bridge.tf_ops.<module>` of the op, or None while no kernel is loaded for
    it (a team's op: until its library is given)."""
    return getattr(tf_ops(), spec.module, None)


def no_kernel(spec) -> str:
    return (f"{spec.name}: no TensorFlow kernel is loaded for it: give its library "
            f"(--op-library LIB, or bridge.tf_ops.load_op_library)")


def _op_layers():
    """{class name: class} of every built-in op's own layer (bridge/ops/<op>/keras_layer.py)."""
    found = {}
    for spec in _specs.all_specs():
        module = _specs.part(spec, "keras_layer")
        if module is not None:
            found.update((name, getattr(module, name)) for name in module.__all__)
    return found


globals().update(_op_layers())


@keras.saving.register_keras_serializable(package="bridge")
class FusedOp(Fused):
    """Any spec'd op as a Keras layer, for the patterns a spec declares
    (bridge.ops.fusion): the layer's input is the op's first input, its weights
    the others (named and shaped as `weights` says: [(input name, shape)]), and
    `attrs` the op's attributes. It calls `bridge.tf_ops.<module>`, so a team's
    op needs its library loaded (`--op-library`) to run, and its spec registered
    (`--op-spec`) to load from a .keras file."""

    def __init__(self, op, attrs=None, weights=(), **kwargs):
        super().__init__(**kwargs)
        try:
            self.spec = _specs.get(op)
        except KeyError:
            raise ValueError(f"FusedOp: op {op!r} is not registered: give its spec (--op-spec FILE, or "
                             f"bridge.ops.load_spec_file) before loading or building the model") from None
        self.op_attrs = self.spec.resolve(dict(attrs or {}))
        self.weight_shapes = [(str(name), tuple(int(d) for d in shape)) for name, shape in weights]
        want = [a.name for a in self.spec.inputs[1:]]
        if [name for name, _ in self.weight_shapes] != want:
            raise ValueError(f"FusedOp: {self.spec.name} takes the weights {want} after its first input, got "
                             f"{[name for name, _ in self.weight_shapes]}")

    def build(self, input_shape):
        self.params = [self.add_weight(shape=shape, name=name, initializer="zeros")
                       for name, shape in self.weight_shapes]

    def _fn(self):
        fn = tf_function(self.spec)
        if fn is None:
            raise ValueError(no_kernel(self.spec))
        return fn

    def call(self, x):
        out = self._fn()(x, *[tf.cast(w, x.dtype) for w in self.params], **self.op_attrs)
        return tuple(out) if isinstance(out, (list, tuple)) else out

    def compute_outputstatic_shape(self, input_shape):
        shapes = infer_shapes(self.spec, [static_shape(input_shape)] + [shape for _, shape in self.weight_shapes],
                        **self.op_attrs)
        return shapes[0] if len(shapes) == 1 else shapes

    def get_config(self):
        attrs = {k: list(v) if isinstance(v, tuple) else v for k, v in self.op_attrs.items()}
        return {**super().get_config(), "op": self.spec.name, "attrs": attrs,
                "weights": [[name, list(shape)] for name, shape in self.weight_shapes]}
