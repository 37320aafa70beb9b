"""The C++ shape function of each built-in op's GE custom operator (route 2, the
op_proto/ of the OPP package), one file per op named like the op's module:
`INFER_SHAPE`, the body of its IMPLEMT_COMMON_INFERFUNC. A team's op has none
here and gets "every output is shaped like the first input" (opp.py)."""
