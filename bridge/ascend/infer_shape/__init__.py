"""The GE shape function of each built-in op, one file per op named like the op's
module: `table(spec)`, its rules (bridge/ascend/ge_custom/rules.py) in the GE
operator's terms (inputs in spec order, the com.bridge node's attributes) with the
spec's checks and words. Found by looking (ge_custom/tables.py), rendered once
(ge_custom/shape_cpp.py) into the C++ InferShape of both routes, and its Python
twin is checked against `spec.infer_shapes` (tests/test_ascend_custom_route.py).
An op without a file here gets none (a team's op: the first TEAM_PATTERNS entry
that agrees with its shape function)."""
