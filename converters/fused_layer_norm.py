"""tf2onnx handler for FusedLayerNorm: the TF node becomes one com.bridge FusedLayerNorm node
(see tf2onnx_common.to_custom_node). The lowered export inlines that node's
model-local function, so both export modes start from this handler."""
from tf2onnx.handler import tf_op

from bridge import ops

from .tf2onnx_common import to_custom_node

SPEC = ops.get("FusedLayerNorm")
HANDLES = SPEC.name


@tf_op(SPEC.name, domain=SPEC.domain)
class FusedLayerNormHandler:
    @classmethod
    def version_1(cls, ctx, node, **kwargs):
        to_custom_node(ctx, node, SPEC)
