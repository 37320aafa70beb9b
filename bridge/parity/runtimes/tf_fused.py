"""`tf-fused`: the model rewritten onto the fused TF ops: a Keras model by
bridge.converters.fuse, a SavedModel or frozen graph by graph_fuse."""
from __future__ import annotations

from bridge.parity import tf_common
from bridge.parity.onnx_base import layer_aliases


class GraphRunner(tf_common.SignatureRunner):
    """The fused graph's serving signature (no per-layer outputs: a graph has no layers)."""

    def __init__(self, source, graph):
        self.source = source
        self.fn = graph.signatures["serving_default"]


class TFFused(tf_common.TFRuntime):
    name = "tf-fused"
    description = "the model with its blocks fused onto bridge's TF ops"
    order = 10

    def runner(self, source):
        fused, _ = source.fused_model()
        if source.kind == "savedmodel":
            return GraphRunner(source, fused)
        return tf_common.KerasRunner(source, fused, aliases=layer_aliases(source))


RUNTIME = TFFused
