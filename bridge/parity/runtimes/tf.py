"""`tf`: the original, unfused TensorFlow model: the reference for TF models."""
from __future__ import annotations

from bridge.parity import tf_common


class TF(tf_common.TFRuntime):
    name = "tf"
    description = "the original TensorFlow model, unfused (the reference)"
    order = 0
    reference_for = ("keras", "savedmodel")

    def runner(self, source):
        if source.kind == "keras":
            return tf_common.KerasRunner(source, source.keras_model())
        return tf_common.SignatureRunner(source)


RUNTIME = TF
