"""The one name GE knows an op by. The REG_OP proto, the implementation class that
REG_AUTO_MAPPING_OP registers (its class name is the key), the op type the ONNX
parser plugin maps the node to, and the TF adapter's npu_supported_ops.json must
all say the same; every generator reads it from here."""
from __future__ import annotations

from bridge.untrusted import cpp_identifier  # noqa: F401 (every generator's name check)


def ge_op_type(spec) -> str:
    """GE's op type of `spec` (the spec's op type: registry.check keeps it CamelCase)."""
    return spec.name
