"""Shape rules as data: an op's spec states its shape rule (`OpSpec.shape_rule`) as
a list of statements, evaluated here in Python (`evaluate`, what `infer_shapes`
runs) and rendered to C++ (`cpp_body`: the kernels' checks and TF shape function
through shape_cpp.py, GE InferShape of both Ascend routes), one tree, the same
words everywhere.

A rule is a list of statements over the input shapes (spec order) and the
com.bridge node's attributes (`spec.onnx_attrs`):

- `Let(name, expr)`: a named value;
- `Require(arg, cond, *message)`: refuse when `cond` is definitely false, with
  "<Op>: argument '<arg>': <message>" (the spec's OpError words);
- `Out(index, [dims])` / `OutSame(index, input)`: an output shape.

The same expression nodes (Const, Attr, Bin, Items) also read as typed attribute
values: `value(attrs)` in Python, `value_cpp()` in C++ over locals `attr_<name>`,
`value_kind` (int, float, ints, floats). That is what the GE plugin's
decomposition (ascend/decomposition.py) computes its constants and
parameters with: one expression tree for shapes and attribute values.

Values are ints or unknown (None here, `kUnknown` in C++): an unknown dim, or
anything of an input of unknown rank, makes what depends on it unknown, and a
check on an unknown value passes (as the spec's shape functions do). A dim
index outside a shape's rank reads as unknown; rank checks come first.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from bridge.untrusted import cpp_string

from .op_error import OpError
from .op_error import dims as dims_text


# -- expressions ---------------------------------------------------------------
class Expr:
    def py(self, env: "Env"):
        raise NotImplementedError

    def cpp(self) -> str:
        raise NotImplementedError

    # -- as a typed attribute value (the GE decomposition's constants and parameters)
    value_kind = "int"

    def value(self, attrs: Dict[str, Any]):
        raise TypeError(f"{type(self).__name__} is no attribute value")

    def value_cpp(self) -> str:
        raise TypeError(f"{type(self).__name__} is no attribute value")

    def __add__(self, o):
        return Bin("Add", self, lift(o))

    def __radd__(self, o):
        return Bin("Add", lift(o), self)

    def __sub__(self, o):
        return Bin("Sub", self, lift(o))

    def __rsub__(self, o):
        return Bin("Sub", lift(o), self)

    def __mul__(self, o):
        return Bin("Mul", self, lift(o))

    def __rmul__(self, o):
        return Bin("Mul", lift(o), self)

    def __truediv__(self, o):
        return Bin("Div", self, lift(o))

    def __floordiv__(self, o):
        return Bin("FloorDiv", self, lift(o))

    def eq(self, o):
        return Cmp("Eq", self, lift(o))

    def ne(self, o):
        return Cmp("Ne", self, lift(o))

    def ge(self, o):
        return Cmp("Ge", self, lift(o))

    def gt(self, o):
        return Cmp("Gt", self, lift(o))

    def le(self, o):
        return Cmp("Le", self, lift(o))

    def lt(self, o):
        return Cmp("Lt", self, lift(o))


def lift(v) -> Expr:
    if isinstance(v, Expr):
        return v
    return Const(float(v) if isinstance(v, float) else int(v))


def value_var(attr_name: str) -> str:
    """The C++ local holding an attribute's value (the GE plugin reads it from the node)."""
    return f"attr_{attr_name}"


@dataclass(frozen=True, eq=False)
class Const(Expr):
    number: Union[int, float]

    def py(self, env):
        return self.number

    def cpp(self):
        return f"int64_t{{{self.number}}}"

    @property
    def value_kind(self):  # type: ignore[override]
        return "int" if isinstance(self.number, int) and not isinstance(self.number, bool) else "float"

    def value(self, attrs):
        return self.number

    def value_cpp(self):
        if self.value_kind == "int":
            return f"static_cast<int64_t>({self.number})"
        return f"{float(self.number)!r}f"


@dataclass(frozen=True, eq=False)
class Rank(Expr):
    input: int

    def py(self, env):
        s = env.shapes[self.input]
        return None if s is None else len(s)

    def cpp(self):
        return f"Rank(in[{self.input}])"


@dataclass(frozen=True, eq=False)
class Dim(Expr):
    input: int
    axis: int  # negative counts from the end

    def py(self, env):
        s = env.shapes[self.input]
        if s is None:
            return None
        k = self.axis + len(s) if self.axis < 0 else self.axis
        return s[k] if 0 <= k < len(s) else None

    def cpp(self):
        return f"Dim(in[{self.input}], {self.axis})"


@dataclass(frozen=True, eq=False)
class Attr(Expr):
    """An attribute: in a shape rule an int one; as a value of its kind."""
    name: str
    kind: str = "int"   # int, float, ints, floats

    def py(self, env):
        return int(env.attrs[self.name])

    def cpp(self):
        return f"static_cast<int64_t>(attrs.{self.name})"

    @property
    def value_kind(self):  # type: ignore[override]
        return self.kind

    def value(self, attrs):
        return attrs[self.name]

    def value_cpp(self):
        return value_var(self.name)


@dataclass(frozen=True, eq=False)
class Len(Expr):
    name: str

    def py(self, env):
        return len(env.attrs[self.name])

    def cpp(self):
        return f"static_cast<int64_t>(attrs.{self.name}.size())"


@dataclass(frozen=True, eq=False)
class Item(Expr):
    """Element `index` of an int-list attribute (its length checked before)."""
    name: str
    index: int

    def py(self, env):
        return int(env.attrs[self.name][self.index])

    def cpp(self):
        return f"Item(attrs.{self.name}, {self.index})"


@dataclass(frozen=True, eq=False)
class Var(Expr):
    name: str

    def py(self, env):
        return env.vars[self.name]

    def cpp(self):
        return f"v_{self.name}"


def _floordiv(a, b):
    return a // b


def _ceildiv(a, b):
    return -((-a) // b)


_BIN = {"Add": operator.add, "Sub": operator.sub, "Mul": operator.mul, "FloorDiv": _floordiv,
        "CeilDiv": _ceildiv, "Max": max}


_VALUE_OPS = {"Add": "+", "Sub": "-", "Mul": "*", "Div": "/"}


@dataclass(frozen=True, eq=False)
class Bin(Expr):
    op: str
    a: Expr
    b: Expr

    def py(self, env):
        x, y = self.a.py(env), self.b.py(env)
        return None if x is None or y is None else _BIN[self.op](x, y)

    def cpp(self):
        return f"{self.op}({self.a.cpp()}, {self.b.cpp()})"

    @property
    def value_kind(self):  # type: ignore[override]
        return "float" if self.op == "Div" or "float" in (self.a.value_kind, self.b.value_kind) else "int"

    def value(self, attrs):
        a, b = self.a.value(attrs), self.b.value(attrs)
        if self.value_kind == "float":
            a, b = float(a), float(b)
        return {"Add": a + b, "Sub": a - b, "Mul": a * b}[self.op] if self.op != "Div" else a / b

    def value_cpp(self):
        a, b = self.a.value_cpp(), self.b.value_cpp()
        if self.value_kind == "float":
            a, b = f"static_cast<float>({a})", f"static_cast<float>({b})"
        return f"({a} {_VALUE_OPS[self.op]} {b})"


@dataclass(frozen=True, eq=False)
class Items(Expr):
    """A list value built from scalars, e.g. [1, 1, 2, 1, num_classes]."""
    items: Tuple[Expr, ...]
    kind: str = "ints"

    @property
    def value_kind(self):  # type: ignore[override]
        return self.kind

    def value(self, attrs):
        cast = int if self.kind == "ints" else float
        return [cast(i.value(attrs)) for i in self.items]

    def value_cpp(self):
        elem = "int64_t" if self.kind == "ints" else "float"
        return f"std::vector<{elem}>{{" + ", ".join(f"static_cast<{elem}>({i.value_cpp()})" for i in self.items) + "}"


def ceildiv(a, b) -> Expr:
    return Bin("CeilDiv", lift(a), lift(b))


def maximum(a, b) -> Expr:
    return Bin("Max", lift(a), lift(b))


@dataclass(frozen=True, eq=False)
class Coalesce(Expr):
    """`a` where known, else `b`."""
    a: Expr
    b: Expr

    def py(self, env):
        x = self.a.py(env)
        return self.b.py(env) if x is None else x

    def cpp(self):
        return f"Coalesce({self.a.cpp()}, {self.b.cpp()})"


@dataclass(frozen=True, eq=False)
class Select(Expr):
    """`a` where `cond` holds, else `b` (unknown where `cond` is); only the chosen
    side is evaluated in Python, so it may read list items the other rules out."""
    cond: Expr
    a: Expr
    b: Expr

    def py(self, env):
        c = self.cond.py(env)
        return None if c is None else (self.a.py(env) if c else self.b.py(env))

    def cpp(self):
        return f"Select({self.cond.cpp()}, {self.a.cpp()}, {self.b.cpp()})"


def select(cond, a, b) -> Expr:
    return Select(cond, lift(a), lift(b))


# -- conditions: True, False or None (unknown); C++ 1, 0, -1 ------------------
@dataclass(frozen=True, eq=False)
class Is(Expr):
    """A string attribute equals `text` (TensorFlow's padding="SAME"): never unknown."""
    name: str
    text: str

    def py(self, env):
        return env.attrs[self.name] == self.text

    def cpp(self):
        return f"(attrs.{self.name} == {cpp_string(self.text)} ? 1 : 0)"


_CMP = {"Eq": operator.eq, "Ne": operator.ne, "Ge": operator.ge, "Gt": operator.gt, "Le": operator.le,
        "Lt": operator.lt}


@dataclass(frozen=True, eq=False)
class Cmp(Expr):
    op: str
    a: Expr
    b: Expr

    def py(self, env):
        x, y = self.a.py(env), self.b.py(env)
        return None if x is None or y is None else _CMP[self.op](x, y)

    def cpp(self):
        return f"{self.op}({self.a.cpp()}, {self.b.cpp()})"


@dataclass(frozen=True, eq=False)
class Kleene(Expr):
    """Three-valued and / or: a definite part decides, else unknown stays unknown."""
    kind: str  # "And" or "Or"
    parts: Tuple[Expr, ...]

    def py(self, env):
        vals = [p.py(env) for p in self.parts]
        decisive = self.kind == "Or"  # the value that settles it
        if any(v is decisive for v in vals):
            return decisive
        return None if any(v is None for v in vals) else not decisive

    def cpp(self):
        return f"{self.kind}({{" + ", ".join(p.cpp() for p in self.parts) + "})"


def all_of(*parts) -> Expr:
    return Kleene("And", tuple(parts))


def any_of(*parts) -> Expr:
    return Kleene("Or", tuple(parts))


@dataclass(frozen=True, eq=False)
class Known(Expr):
    """Whether a value is known: never unknown itself."""
    expr: Expr

    def py(self, env):
        return self.expr.py(env) is not None

    def cpp(self):
        return f"IsKnown({self.expr.cpp()})"


@dataclass(frozen=True, eq=False)
class Not(Expr):
    cond: Expr

    def py(self, env):
        v = self.cond.py(env)
        return None if v is None else not v

    def cpp(self):
        return f"Not({self.cond.cpp()})"


@dataclass(frozen=True, eq=False)
class EachItem(Expr):
    """Every element of a list attribute satisfies `item <op> value` (a NaN never does)."""
    name: str
    op: str
    value: float

    def py(self, env):
        return all(_CMP[self.op](v, self.value) for v in env.attrs[self.name])

    def cpp(self):
        return f"EachItem(attrs.{self.name}, [](double v) {{ return v {_CPP_OP[self.op]} {float(self.value)!r}; }})"


_CPP_OP = {"Eq": "==", "Ne": "!=", "Ge": ">=", "Gt": ">", "Le": "<=", "Lt": "<"}


# -- message pieces --------------------------------------------------------------
class Text:
    def py(self, env) -> str:
        raise NotImplementedError

    def cpp(self) -> str:
        """A C++ expression appended to a std::string."""
        raise NotImplementedError


@dataclass(frozen=True)
class Lit(Text):
    text: str

    def py(self, env):
        return self.text

    def cpp(self):
        return f"std::string({cpp_string(self.text)})"


@dataclass(frozen=True)
class Int(Text):
    """An int value (known where the message is built)."""
    expr: Expr

    def py(self, env):
        return str(self.expr.py(env))

    def cpp(self):
        return f"IntText({self.expr.cpp()})"


@dataclass(frozen=True)
class ShapeOf(Text):
    """An input's shape as bridge.ops.spec.dims writes it: [1,?,7], <unknown rank>."""
    input: int

    def py(self, env):
        return dims_text(env.shapes[self.input])

    def cpp(self):
        return f"ShapeText(in[{self.input}])"


@dataclass(frozen=True)
class DimsOf(Text):
    """Values as a shape: [8] or [?]."""
    exprs: Tuple[Expr, ...]

    def py(self, env):
        return dims_text(tuple(e.py(env) for e in self.exprs))

    def cpp(self):
        return "DimsText({" + ", ".join(e.cpp() for e in self.exprs) + "})"


@dataclass(frozen=True)
class ListOf(Text):
    """A list attribute, as `dims` writes it ("[1,2,2]") or as Python's list repr
    ("[1, 2, 2]", floats as repr: "[10.0, -13.0]")."""
    name: str
    style: str = "dims"  # or "python"

    def py(self, env):
        values = list(env.attrs[self.name])
        return dims_text(tuple(values)) if self.style == "dims" else repr(values)

    def cpp(self):
        return f"ListText(attrs.{self.name}, {'false' if self.style == 'dims' else 'true'})"


@dataclass(frozen=True)
class FirstFailing(Text):
    """The first element of a list attribute failing `EachItem(name, op, value)`, as repr."""
    name: str
    op: str
    value: float

    def py(self, env):
        bad = [v for v in env.attrs[self.name] if not _CMP[self.op](v, self.value)]
        return repr(bad[0]) if bad else ""

    def cpp(self):
        return (f"FirstFailingText(attrs.{self.name}, [](double v) {{ return v {_CPP_OP[self.op]} "
                f"{float(self.value)!r}; }})")


Piece = Union[str, Text, Expr]


def _piece(p: Piece) -> Text:
    if isinstance(p, str):
        return Lit(p)
    if isinstance(p, Expr):
        return Int(p)
    return p


# -- statements ------------------------------------------------------------------
@dataclass(frozen=True)
class Let:
    name: str
    expr: Expr


@dataclass(frozen=True)
class Require:
    arg: str
    cond: Expr
    message: Tuple[Text, ...]

    def __init__(self, arg: str, cond: Expr, *message: Piece):
        object.__setattr__(self, "arg", arg)
        object.__setattr__(self, "cond", cond)
        object.__setattr__(self, "message", tuple(_piece(p) for p in message))


@dataclass(frozen=True)
class Out:
    index: int
    dims: Tuple[Expr, ...]

    def __init__(self, index: int, dims: Sequence[Union[Expr, int]]):
        object.__setattr__(self, "index", index)
        object.__setattr__(self, "dims", tuple(lift(d) for d in dims))


@dataclass(frozen=True)
class OutSame:
    index: int
    input: int


Statement = Union[Let, Require, Out, OutSame]


@dataclass
class Env:
    shapes: Sequence[Optional[Tuple[Optional[int], ...]]]
    attrs: Dict[str, Any]
    vars: Dict[str, Any]


# -- the Python twin -------------------------------------------------------------
def evaluate(op: str, table: Sequence[Statement], n_outputs: int, shapes, attrs: Dict[str, Any]):
    """Output shapes (None dims unknown, None for unknown rank), or OpError: what
    the generated C++ computes, in Python."""
    env = Env(list(shapes), dict(attrs), {})
    outs: List[Any] = [None] * n_outputs
    for st in table:
        if isinstance(st, Let):
            env.vars[st.name] = st.expr.py(env)
        elif isinstance(st, Require):
            if st.cond.py(env) is False:
                raise OpError(op, st.arg, "".join(p.py(env) for p in st.message))
        elif isinstance(st, Out):
            outs[st.index] = tuple(d.py(env) for d in st.dims)
        elif isinstance(st, OutSame):
            outs[st.index] = env.shapes[st.input]
    return tuple(outs)



class TfRule:
    """A rule over the TensorFlow op's attributes (`spec.attrs`) where they are not
    the node's (YoloConvBnLeaky's SAME/VALID/EXPLICIT padding): the spec's `_infer`
    (called as infer_shapes calls it), and rendered to C++ beside the node's rule
    (shape_check_cpp: `<module>_check_tf_shapes`)."""

    def __init__(self, op: str, statements: Sequence["Statement"], n_outputs: int):
        self.op, self.statements, self.n_outputs = op, tuple(statements), n_outputs

    def __call__(self, *shapes, **attrs):
        return evaluate(self.op, self.statements, self.n_outputs, shapes, attrs)


# -- checking a rule against its spec ----------------------------------------------
def _walk(node):
    """Every expression and text node under a statement (itself included)."""
    yield node
    for value in vars(node).values():
        for v in (value if isinstance(value, tuple) else (value,)):
            if isinstance(v, (Expr, Text)):
                yield from _walk(v)


def problems(rule, inputs: Sequence[str], n_outputs: int, attrs: Dict[str, str]) -> List[str]:
    """What makes `rule` unusable for an op with these input names, output count and
    node attributes (name -> type): each a sentence naming the statement."""
    out: List[str] = []
    if not isinstance(rule, (tuple, list)):
        return [f"must be a tuple of bridge.ops.shape_rules statements, got {type(rule).__name__}"]
    lets: set = set()
    shaped: set = set()
    for i, st in enumerate(rule):
        where = f"[{i}] {type(st).__name__}"
        if not isinstance(st, (Let, Require, Out, OutSame)):
            out.append(f"[{i}] is a {type(st).__name__}, not Let, Require, Out or OutSame")
            continue
        if isinstance(st, Require) and st.arg not in (*inputs, *attrs, "inputs"):
            out.append(f"{where} names argument {st.arg!r}, which is no input or attribute of the op")
        if isinstance(st, (Out, OutSame)):
            if not 0 <= st.index < n_outputs:
                out.append(f"{where} shapes output {st.index}; the op has {n_outputs}")
            shaped.add(st.index)
        if isinstance(st, OutSame) and not 0 <= st.input < len(inputs):
            out.append(f"{where} copies input {st.input}; the op has {len(inputs)}")
        for node in (n for part in vars(st).values() for p in (part if isinstance(part, tuple) else (part,))
                     if isinstance(p, (Expr, Text)) for n in _walk(p)):
            if isinstance(node, (Rank, Dim, ShapeOf)) and not 0 <= node.input < len(inputs):
                out.append(f"{where} reads input {node.input}; the op has {len(inputs)}")
            name = getattr(node, "name", None)
            if isinstance(node, Var) and name not in lets:
                out.append(f"{where} reads {name!r} before a Let names it")
            elif isinstance(node, Attr) and attrs.get(name) != "int":
                out.append(f"{where} reads {name!r} as an int attribute; the node's attributes are {attrs}")
            elif isinstance(node, Is) and attrs.get(name) != "string":
                out.append(f"{where} reads {name!r} as a string attribute; the node's attributes are {attrs}")
            elif isinstance(node, (Len, Item, EachItem, ListOf, FirstFailing)) and \
                    not str(attrs.get(name, "")).startswith("list("):
                out.append(f"{where} reads {name!r} as a list attribute; the node's attributes are {attrs}")
        if isinstance(st, Let):
            lets.add(st.name)
    missing = sorted(set(range(n_outputs)) - shaped)
    if rule and missing:
        out.append(f"shapes no output {missing[0]} (an Out or OutSame for each of the {n_outputs})")
    return out


# -- rules teams state often ---------------------------------------------------------
def same_as_first_input(n_outputs: int) -> Tuple[Statement, ...]:
    """Every output takes the first input's shape; nothing is refused."""
    return tuple(OutSame(k, 0) for k in range(n_outputs))


def last_axis_params(inputs: Sequence[str], n_outputs: int = 1) -> Tuple[Statement, ...]:
    """y = f(x, p1, ...): x of rank >= 1, every p [C] with C the last dim of x (an
    unknown C or p takes any); outputs shaped as x."""
    first, c = inputs[0], Var("c")
    rule: List[Statement] = [Require(first, Rank(0).ne(0), "must have rank >= 1, got a scalar (shape [])"),
                             Let("c", Dim(0, -1))]
    for i, arg in enumerate(inputs[1:], start=1):
        rule.append(Require(arg, all_of(Rank(i).eq(1), Dim(i, 0).eq(c)), "must have shape [C]=", DimsOf((c,)),
                            f" (the last dim of {first} ", ShapeOf(0), "), got ", ShapeOf(i)))
    return tuple(rule) + same_as_first_input(n_outputs)


def last_axis_bias(inputs: Sequence[str], n_outputs: int = 1) -> Tuple[Statement, ...]:
    """`bridge op new`'s rule: x of rank >= 1; each further input, where its rank and
    x's are known, [C] with C = x's last dim (an unknown C takes only an unknown
    dim); outputs shaped as x."""
    first, c = inputs[0], Dim(0, -1)
    rule: List[Statement] = [Require(first, Rank(0).ne(0), "must have rank >= 1, got a scalar (shape [])")]
    for i, arg in enumerate(inputs[1:], start=1):
        mismatch = any_of(Rank(i).ne(1), all_of(Known(Dim(i, 0)), any_of(Not(Known(c)), Dim(i, 0).ne(c))))
        refused = all_of(Known(Rank(0)), Known(Rank(i)), mismatch)
        rule.append(Require(arg, Not(refused), f"must have shape [C] (the last dim of {first} ", ShapeOf(0),
                            "), got ", ShapeOf(i)))
    return tuple(rule) + same_as_first_input(n_outputs)


# -- the C++ ---------------------------------------------------------------------
def cpp_body(op: str, table: Sequence[Statement]) -> List[str]:
    """The statements of `bool Infer<Op>(in, attrs, out, error)` (GE-independent)."""
    lines: List[str] = []
    declared = set()
    for st in table:
        if isinstance(st, Let):
            decl = "" if st.name in declared else "int64_t "
            declared.add(st.name)
            lines.append(f"  {decl}v_{st.name} = {st.expr.cpp()};")
        elif isinstance(st, Require):
            prefix = cpp_string(f"{op}: argument '{st.arg}': ")
            msg = " + ".join([f"std::string({prefix})"] + [p.cpp() for p in st.message])
            lines += [f"  if ({st.cond.cpp()} == 0) {{", f"    *error = {msg};", "    return false;", "  }"]
        elif isinstance(st, Out):
            lines.append(f"  (*out)[{st.index}] = Known({{" + ", ".join(d.cpp() for d in st.dims) + "});")
        elif isinstance(st, OutSame):
            lines.append(f"  (*out)[{st.index}] = in[{st.input}];")
    for name in sorted(declared):  # a Let only read by some branches is still used
        lines.append(f"  (void)v_{name};")
    lines.append("  return true;")
    return lines


VALUE_HELPERS = r'''// The value helpers of the generated shape functions: an unknown dim (GE's -1) or
// anything of an input of unknown rank (GE's [-2]) is kUnknown and stays unknown;
// a check on an unknown value passes (tri-state: 1 true, 0 false, -1 unknown).
constexpr int64_t kUnknown = std::numeric_limits<int64_t>::min();

struct Dims {
  bool known_rank = false;
  std::vector<int64_t> d;  // kUnknown for an unknown dim
};

inline Dims Known(std::initializer_list<int64_t> values) {
  Dims s;
  s.known_rank = true;
  s.d.assign(values.begin(), values.end());
  return s;
}

inline int64_t Rank(const Dims &s) { return s.known_rank ? static_cast<int64_t>(s.d.size()) : kUnknown; }

inline int64_t Dim(const Dims &s, int64_t axis) {
  if (!s.known_rank) return kUnknown;
  const int64_t n = static_cast<int64_t>(s.d.size());
  const int64_t k = axis < 0 ? axis + n : axis;
  return (k < 0 || k >= n) ? kUnknown : s.d[static_cast<size_t>(k)];
}

inline int64_t Item(const std::vector<int64_t> &v, size_t i) { return i < v.size() ? v[i] : kUnknown; }

inline bool Either(int64_t a, int64_t b) { return a == kUnknown || b == kUnknown; }
// A sum or product past int64 is unknown too (no wrapped value; a core refuses it on its own).
inline int64_t Add(int64_t a, int64_t b) {
  int64_t r;
  return Either(a, b) || __builtin_add_overflow(a, b, &r) ? kUnknown : r;
}
inline int64_t Sub(int64_t a, int64_t b) {
  int64_t r;
  return Either(a, b) || __builtin_sub_overflow(a, b, &r) ? kUnknown : r;
}
inline int64_t Mul(int64_t a, int64_t b) {
  int64_t r;
  return Either(a, b) || __builtin_mul_overflow(a, b, &r) ? kUnknown : r;
}
inline int64_t Max(int64_t a, int64_t b) { return Either(a, b) ? kUnknown : (a > b ? a : b); }
// Python's floor division (the spec's //), for b != 0.
inline int64_t FloorDiv(int64_t a, int64_t b) {
  if (Either(a, b) || b == 0) return kUnknown;
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}
inline int64_t CeilDiv(int64_t a, int64_t b) { return Either(a, b) ? kUnknown : -FloorDiv(-a, b); }
inline int64_t Coalesce(int64_t a, int64_t b) { return a != kUnknown ? a : b; }
inline int64_t Select(int c, int64_t a, int64_t b) { return c < 0 ? kUnknown : (c ? a : b); }

inline int Eq(int64_t a, int64_t b) { return Either(a, b) ? -1 : (a == b ? 1 : 0); }
inline int Ne(int64_t a, int64_t b) { return Either(a, b) ? -1 : (a != b ? 1 : 0); }
inline int Ge(int64_t a, int64_t b) { return Either(a, b) ? -1 : (a >= b ? 1 : 0); }
inline int Gt(int64_t a, int64_t b) { return Either(a, b) ? -1 : (a > b ? 1 : 0); }
inline int Le(int64_t a, int64_t b) { return Either(a, b) ? -1 : (a <= b ? 1 : 0); }
inline int Lt(int64_t a, int64_t b) { return Either(a, b) ? -1 : (a < b ? 1 : 0); }
inline int IsKnown(int64_t a) { return a == kUnknown ? 0 : 1; }
inline int Not(int c) { return c < 0 ? -1 : 1 - c; }
inline int And(std::initializer_list<int> parts) {
  int out = 1;
  for (int p : parts) {
    if (p == 0) return 0;
    if (p < 0) out = -1;
  }
  return out;
}
inline int Or(std::initializer_list<int> parts) {
  int out = 0;
  for (int p : parts) {
    if (p == 1) return 1;
    if (p < 0) out = -1;
  }
  return out;
}

template <typename T, typename Pred>
int EachItem(const std::vector<T> &values, Pred pred) {
  for (const T &v : values) {
    if (!pred(static_cast<double>(v))) return 0;
  }
  return 1;
}

// Python's repr of a float: the shortest digits that read back, fixed notation for
// decimal exponents -4 < e <= 16, else d.ddde+XX (what the spec's messages print).
inline std::string PyFloat(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[40];
  int prec = 1;
  for (; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof(buf), "%.*e", prec - 1, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  std::string s(buf);
  std::string sign;
  if (s[0] == '-') {
    sign = "-";
    s = s.substr(1);
  }
  const size_t e = s.find('e');
  std::string digits = s.substr(0, 1) + (e > 2 ? s.substr(2, e - 2) : std::string());
  const int exp10 = std::atoi(s.c_str() + e + 1);
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  const int point = exp10 + 1;  // digits before the decimal point
  const int n = static_cast<int>(digits.size());
  if (point > -4 && point <= 16) {
    if (point <= 0) return sign + "0." + std::string(static_cast<size_t>(-point), '0') + digits;
    if (point >= n) return sign + digits + std::string(static_cast<size_t>(point - n), '0') + ".0";
    return sign + digits.substr(0, static_cast<size_t>(point)) + "." + digits.substr(static_cast<size_t>(point));
  }
  std::string mant = digits.substr(0, 1) + (n > 1 ? "." + digits.substr(1) : std::string());
  char ebuf[16];
  std::snprintf(ebuf, sizeof(ebuf), "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
  return sign + mant + ebuf;
}

inline std::string IntText(int64_t v) { return v == kUnknown ? std::string("?") : std::to_string(v); }

inline std::string DimsText(std::initializer_list<int64_t> values) {
  std::string out = "[";
  bool first = true;
  for (int64_t v : values) {
    out += (first ? "" : ",") + IntText(v);
    first = false;
  }
  return out + "]";
}

inline std::string ShapeText(const Dims &s) {
  if (!s.known_rank) return "<unknown rank>";
  std::string out = "[";
  for (size_t i = 0; i < s.d.size(); ++i) out += (i ? "," : "") + IntText(s.d[i]);
  return out + "]";
}

inline std::string ItemText(int64_t v) { return std::to_string(v); }
inline std::string ItemText(float v) { return PyFloat(static_cast<double>(v)); }

// A list attribute as bridge.ops.spec.dims writes it, or as Python's list repr.
template <typename T>
std::string ListText(const std::vector<T> &values, bool python) {
  std::string out = "[";
  for (size_t i = 0; i < values.size(); ++i) out += (i ? (python ? ", " : ",") : "") + ItemText(values[i]);
  return out + "]";
}

template <typename T, typename Pred>
std::string FirstFailingText(const std::vector<T> &values, Pred pred) {
  for (const T &v : values) {
    if (!pred(static_cast<double>(v))) return ItemText(v);
  }
  return std::string();
}

'''
