"""`tf`: the original, unfused TensorFlow model: the reference for TF models."""
from __future__ import annotations

from bridge.parity.runtime import Runtime
from bridge.parity import tf_common


class TF(Runtime):
    name = "tf"
    description = "the original TensorFlow model, unfused (the reference)"
    order = 0
    reference_for = ("keras", "savedmodel")
    kinds = ("keras", "savedmodel")

    def prepare(self, source):
        super().prepare(source)
        self.runner = tf_common.KerasRunner(source, source.keras_model()) if source.kind == "keras" \
            else tf_common.SignatureRunner(source)

    def run(self, inputs):
        return self.runner.run(inputs)

    def layer_names(self):
        return self.runner.layer_names()

    def run_with_intermediates(self, inputs, names):
        return self.runner.run_with_intermediates(inputs, names)


RUNTIME = TF
