"""The one name GE knows an op by. The REG_OP proto, the implementation class that
REG_AUTO_MAPPING_OP registers (its class name is the key), the op type the ONNX
parser plugin maps the node to, and the TF adapter's npu_supported_ops.json must
all say the same; every generator reads it from here."""
from __future__ import annotations

import re

_CPP_KEYWORDS = frozenset("""alignas alignof and asm auto bool break case catch char class const constexpr
continue decltype default delete do double else enum explicit export extern false float for friend goto if
inline int long mutable namespace new noexcept not nullptr operator or private protected public register
return short signed sizeof static struct switch template this throw true try typedef typeid typename union
unsigned using virtual void volatile while xor""".split())


def ge_op_type(spec) -> str:
    """GE's op type of `spec` (the spec's op type: registry.check keeps it CamelCase)."""
    return spec.name


def cpp_identifier(name: str, what: str) -> str:
    """`name` when it can be a C++ identifier (tensor and attribute names become
    REG_OP ports and struct fields), else ValueError naming it."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name or "") or name in _CPP_KEYWORDS or name.startswith("__"):
        raise ValueError(f"{what} {name!r} cannot be a C++ identifier (letters, digits, _; no keyword)")
    return name
