"""`tf-fused`: the model rewritten by bridge.converters.fuse onto the fused TF ops."""
from __future__ import annotations

from bridge.parity import tf_common
from bridge.parity.onnx_base import layer_aliases
from bridge.parity.runtime import Unavailable


class TFFused(tf_common.TFRuntime):
    name = "tf-fused"
    description = "the model with its blocks fused onto bridge's TF ops"
    order = 10

    def runner(self, source):
        if source.kind != "keras":
            raise Unavailable("a SavedModel is a graph: bridge fuses Keras models only")
        fused, _ = source.fused_model()
        return tf_common.KerasRunner(source, fused, aliases=layer_aliases(source))


RUNTIME = TFFused
