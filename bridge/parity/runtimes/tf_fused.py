"""`tf-fused`: the model rewritten by bridge.converters.fuse onto the fused TF ops."""
from __future__ import annotations

from bridge.parity.onnx_base import layer_aliases
from bridge.parity.runtime import Runtime, Unavailable
from bridge.parity import tf_common


class TFFused(Runtime):
    name = "tf-fused"
    description = "the model with its blocks fused onto bridge's TF ops"
    order = 10
    kinds = ("keras", "savedmodel")

    def prepare(self, source):
        super().prepare(source)
        if source.kind != "keras":
            raise Unavailable("a SavedModel is a graph: bridge fuses Keras models only")
        fused, _ = source.fused_model()
        self.runner = tf_common.KerasRunner(source, fused, aliases=layer_aliases(source))

    def run(self, inputs):
        return self.runner.run(inputs)

    def layer_names(self):
        return self.runner.layer_names()

    def run_with_intermediates(self, inputs, names):
        return self.runner.run_with_intermediates(inputs, names)


RUNTIME = TFFused
