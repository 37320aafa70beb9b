"""A frozen GraphDef read for graph-level fusion: its nodes, who consumes what,
which tensors are constants (and their values), which tensor dominates each
node, and `Region`, the single-entry subgraph ending at a node that a graph
pattern (bridge.ops.graph_fusion) is matched on, evaluated in float64 numpy.

The dominator of a node is over data edges between non-constant nodes: every
path from the graph's inputs to the node passes through it. The region of an
end node is then the nodes on the paths from its immediate dominator (whose
one output tensor is the region's input x) to it; every other input of the
region is a constant.
"""
from __future__ import annotations

import math
from typing import Callable, Dict, List, Mapping, Optional, Sequence

import numpy as np

from bridge.ops import yolo_conv_bn_leaky as _conv

# ops that compute nothing from nothing: a node of these with only constant inputs is no constant
_NOT_CONSTANT = {"Placeholder", "PlaceholderWithDefault", "VarHandleOp", "ReadVariableOp", "RandomUniform",
                 "RandomStandardNormal", "TruncatedNormal", "StatefulPartitionedCall", "PartitionedCall"}


def ref(name: str) -> str:
    """'node' -> 'node:0' (a data input as a tensor name)."""
    return name if ":" in name else f"{name}:0"


def producer(tensor: str) -> str:
    return tensor.lstrip("^").partition(":")[0]


class GNode:
    """One NodeDef as Python values: `attrs` holds ints, floats, strings, bools,
    tuples, numpy dtype names and (for `value`) arrays."""

    def __init__(self, node_def):
        self.name, self.op, self.node_def = node_def.name, node_def.op, node_def
        self.inputs = [ref(i) for i in node_def.input if not i.startswith("^")]
        self.control = [i[1:] for i in node_def.input if i.startswith("^")]
        self._attrs = None

    @property
    def attrs(self) -> dict:
        if self._attrs is None:
            self._attrs = {k: _attr(v) for k, v in self.node_def.attr.items()}
        return self._attrs

    def __repr__(self) -> str:
        return f"{self.op} '{self.name}'"


def _attr(v):
    from tensorflow.python.framework import dtypes, tensor_util
    kind = v.WhichOneof("value")
    if kind == "list":
        lst = v.list
        for field in ("i", "f", "s", "b"):
            items = list(getattr(lst, field))
            if items:
                return tuple(x.decode() if isinstance(x, bytes) else x for x in items)
        if lst.type:
            return tuple(dtypes.as_dtype(t).name for t in lst.type)
        return ()
    if kind == "s":
        return v.s.decode(errors="replace")
    if kind == "type":
        return dtypes.as_dtype(v.type).name
    if kind == "tensor":
        return tensor_util.MakeNdarray(v.tensor)
    if kind == "shape":
        return None if v.shape.unknown_rank else tuple(d.size if d.size >= 0 else None for d in v.shape.dim)
    return getattr(v, kind) if kind else None


class GraphIndex:
    def __init__(self, graph_def, outputs: Sequence[str]):
        self.graph_def = graph_def
        self.nodes: Dict[str, GNode] = {}
        for n in graph_def.node:
            self.nodes[n.name] = GNode(n)
        self.outputs = {ref(o) for o in outputs}
        self.consumers: Dict[str, List[str]] = {name: [] for name in self.nodes}
        for n in self.nodes.values():
            for i in n.inputs:
                self.consumers.setdefault(producer(i), []).append(n.name)
            for c in n.control:
                self.consumers.setdefault(c, []).append(n.name)
        self.order = self._topological()
        self._constant: Dict[str, bool] = {}
        for name in self.order:
            n = self.nodes[name]
            self._constant[name] = n.op == "Const" or (
                n.op not in _NOT_CONSTANT and bool(n.inputs) and
                all(self._constant.get(producer(i), False) for i in n.inputs))
        self._values: Dict[str, np.ndarray] = {}
        self._shapes = None
        self.idom, self.depth = self._dominators()

    def _topological(self) -> List[str]:
        pending = {name: len(set(producer(i) for i in n.inputs) | set(n.control)) for name, n in self.nodes.items()}
        ready = [name for n, name in ((self.nodes[k], k) for k in self.nodes) if pending[name] == 0]
        order, seen = [], set()
        while ready:
            name = ready.pop()
            order.append(name)
            seen.add(name)
            for c in set(self.consumers.get(name, ())):
                pending[c] -= 1
                if pending[c] == 0:
                    ready.append(c)
        if len(order) != len(self.nodes):
            raise ValueError("the graph has a cycle (a TF1 while loop?); graph fusion needs a DAG")
        return order

    # -- constants ----------------------------------------------------------------
    def is_constant(self, tensor: str) -> bool:
        return self._constant.get(producer(tensor), False)

    def constant(self, tensor: str) -> Optional[np.ndarray]:
        """The value of a constant tensor (its own dtype), None if it is not one or
        holds an op this evaluator lacks."""
        tensor = ref(tensor)
        if not self.is_constant(tensor):
            return None
        if tensor not in self._values:
            n = self.nodes[producer(tensor)]
            if n.op == "Const":
                self._values[tensor] = np.asarray(n.attrs["value"])
            else:
                args = [self.constant(i) for i in n.inputs]
                fn = OPS.get(n.op)
                if fn is None or any(a is None for a in args):
                    return None
                try:
                    out = fn(n, *args)
                except Exception:  # noqa: BLE001 - not evaluable here: not a constant to us
                    return None
                outs = out if isinstance(out, tuple) else (out,)
                for k, v in enumerate(outs):
                    self._values[f"{n.name}:{k}"] = np.asarray(v)
        return self._values.get(tensor)

    def static_shape(self, tensor: str):
        """The tensor's static shape from TensorFlow's shape inference (None dims unknown), or None."""
        if self._shapes is None:
            import tensorflow as tf
            graph = tf.Graph()
            try:
                with graph.as_default():
                    tf.graph_util.import_graph_def(self.graph_def, name="")
            except Exception:  # noqa: BLE001 - e.g. an op no loaded library registers: no static shapes
                graph = False
            self._shapes = graph
        if self._shapes is False:
            return None
        try:
            shape = self._shapes.get_tensor_by_name(ref(tensor)).shape
        except (KeyError, ValueError):
            return None
        return None if shape.rank is None else tuple(shape.as_list())

    def dtype(self, tensor: str) -> Optional[str]:
        n = self.nodes[producer(tensor)]
        t = n.attrs.get("T", n.attrs.get("dtype"))
        return t if isinstance(t, str) else None

    # -- dominators -------------------------------------------------------------
    def _dominators(self):
        """idom and depth of every non-constant node ("" is the root before the inputs)."""
        idom: Dict[str, str] = {}
        depth: Dict[str, int] = {"": 0}
        for name in self.order:
            if self._constant[name]:
                continue
            preds = {producer(i) for i in self.nodes[name].inputs if not self.is_constant(i)}
            preds = [p for p in preds if p in idom]
            if not preds:
                idom[name] = ""
            else:
                d = preds[0]
                for p in preds[1:]:
                    d = self._meet(d, p, idom, depth)
                idom[name] = d
            depth[name] = depth[idom[name]] + 1
        return idom, depth

    @staticmethod
    def _meet(a, b, idom, depth):
        while a != b:
            if depth[a] >= depth[b]:
                a = idom[a]
            else:
                b = idom[b]
        return a

    def region(self, end: str, ops: Sequence[str], start: Sequence[str] = (), limit: int = 64
               ) -> Optional["Region"]:
        """The single-entry region ending at `end`, or None when it has no single
        entry, holds an op outside `ops` or more than `limit` nodes. With
        `start`, the entry moves back (one dominator at a time) until only ops of
        those types read x."""
        entry = self.idom.get(end)
        for _ in range(8):
            found = self._region(end, entry, ops, limit)
            if found is None or not start:
                return found
            if all(n.op in start for n in found.nodes if found.x in n.inputs):
                break
            entry = self.idom.get(entry)
        else:
            return None
        # an entry that is itself a start op read only by the region (a Pad before the conv) joins it
        while entry and self.nodes[entry].op in start and \
                set(self.consumers.get(entry, ())) <= found.names:
            wider = self._region(end, self.idom.get(entry), ops, limit)
            if wider is None or not all(n.op in start for n in wider.nodes if wider.x in n.inputs):
                break
            entry, found = self.idom.get(entry), wider
        return found

    def _region(self, end, entry, ops, limit):
        if not entry:
            return None
        allowed, inside, stack = set(ops), {end}, [end]
        while stack:
            n = self.nodes[stack.pop()]
            if n.op not in allowed:
                return None
            for i in n.inputs:
                p = producer(i)
                if p == entry or p in inside or self.is_constant(i):
                    continue
                inside.add(p)
                if len(inside) > limit:
                    return None
                stack.append(p)
        nodes = [self.nodes[name] for name in self.order if name in inside]
        xs = {i for n in nodes for i in n.inputs if producer(i) == entry}
        if len(xs) != 1:
            return None
        return Region(self, nodes, xs.pop())

    def grown(self, end: str, ops: Sequence[str], outputs: int, limit: int = 96) -> List["Region"]:
        """The regions an op of several outputs may stand for, found from `end`
        (one of its outputs' nodes): the entry is the highest dominator of `end`
        whose region keeps to `ops`, and the region then grows forward, one layer
        at a time, by the nodes of `ops` that read only it, x and constants. Each
        layer where exactly `outputs` of its tensors leave it is a candidate
        (largest first); the whole growth, if it is none of them, comes last."""
        best, entry = None, self.idom.get(end)
        for _ in range(8):
            found = self._region(end, entry, ops, limit)
            if found is None:
                break
            best, entry = found, self.idom.get(entry)
        if best is None:
            return []
        allowed, inside, states = set(ops), set(best.names), []
        while True:
            exits = self._exits(inside)
            states.append((frozenset(inside), exits))
            layer = {c for name in inside for c in self.consumers.get(name, ())
                     if c not in inside and self.nodes[c].op in allowed and all(
                         producer(i) in inside or ref(i) == best.x or self.is_constant(i)
                         for i in self.nodes[c].inputs)}
            if not layer or len(inside | layer) > limit:
                break
            inside |= layer
        last = states[-1]
        picked = [st for st in reversed(states) if len(st[1]) == outputs] or [last]
        if picked[0] is not last and len(last[1]) != outputs:
            picked.append(last)
        return [Region(self, [self.nodes[n] for n in self.order if n in names], best.x,
                       outputs=sorted(exits, key=lambda t: self.order_of[producer(t)])) for names, exits in picked]

    def _exits(self, names) -> List[str]:
        """The tensors of nodes in `names` used outside them (or model outputs)."""
        used = set()
        for name in names:
            for c in self.consumers.get(name, ()):
                if c not in names:
                    used |= {i for i in self.nodes[c].inputs if producer(i) == name}
                    if name in self.nodes[c].control:
                        used.add(f"^{name}")
        return sorted(used | {o for o in self.outputs if producer(o) in names})

    @property
    def order_of(self) -> Dict[str, int]:
        if not hasattr(self, "_order_of"):
            self._order_of = {name: k for k, name in enumerate(self.order)}
        return self._order_of


class Region:
    """The subgraph a graph pattern is matched on (bridge.ops.graph_fusion)."""

    def __init__(self, index: GraphIndex, nodes: List[GNode], x: str, outputs: Optional[Sequence[str]] = None):
        self.index, self.nodes, self.x = index, nodes, x
        self.end = nodes[-1]
        self.names = {n.name for n in nodes}
        # the tensors that leave the region: its end's, or (grown) those of an op of several outputs
        self.outputs = list(outputs) if outputs is not None else [ref(self.end.name)]
        self._x_shape = False

    @property
    def x_shape(self):
        if self._x_shape is False:
            self._x_shape = self.index.static_shape(self.x)
        return self._x_shape

    @property
    def dtype(self) -> Optional[str]:
        return self.index.dtype(self.outputs[0])   # the end's, or an op's first output's

    def is_x(self, tensor: str) -> bool:
        return ref(tensor) == self.x

    def node(self, tensor: str) -> Optional[GNode]:
        name = producer(tensor)
        return self.index.nodes[name] if name in self.names else None

    def constant(self, tensor: str) -> Optional[np.ndarray]:
        return None if self.node(tensor) is not None or self.is_x(tensor) else self.index.constant(tensor)

    def escape(self) -> Optional[str]:
        """Why the region cannot be replaced (an intermediate used outside it), or None."""
        if len(self.outputs) > 1:
            return self._escape_outputs()
        for n in self.nodes[:-1]:
            outside = [c for c in self.index.consumers.get(n.name, ()) if c not in self.names]
            if outside:
                return f"the output of {n} is also used by {self.index.nodes[outside[0]]}; fusing would drop it"
            if any(producer(o) == n.name for o in self.index.outputs):
                return f"the output of {n} is a model output; fusing would drop it"
        if any(o.startswith(self.end.name + ":") and o != ref(self.end.name) for o in self.index.outputs) or \
                any(i.startswith(self.end.name + ":") and i != ref(self.end.name)
                    for c in self.index.consumers.get(self.end.name, ()) for i in self.index.nodes[c].inputs):
            return f"{self.end} has more outputs in use than its first"
        return None

    def _escape_outputs(self) -> Optional[str]:
        """escape() of a grown region: only its outputs, each its node's first, leave it."""
        for t in self.index._exits(self.names):
            if t.startswith("^"):
                return f"{self.index.nodes[t[1:]]} is a control input outside the region"
            if t not in self.outputs:
                return f"the output {t} of {self.index.nodes[producer(t)]} is also used outside; fusing would drop it"
        firsts = [t for t in self.outputs if t.endswith(":0")]
        if len(firsts) != len(self.outputs) or len({producer(t) for t in self.outputs}) != len(self.outputs):
            return f"the region's outputs {self.outputs} are not each the first output of a node of their own"
        return None

    def evaluate(self, x: Optional[np.ndarray], given: Optional[Mapping[str, np.ndarray]] = None,
                 at=None):
        """The region's output (or tensor `at`'s; a list of tensors: a list of
        values) in float64 for input `x`; `given`: node name -> its output (x may
        then be None if nothing needs it)."""
        many = isinstance(at, (list, tuple))
        ats = [ref(a) for a in at] if many else [ref(at or self.end.name)]
        values = {} if x is None else {self.x: np.asarray(x, np.float64)}
        for name, v in (given or {}).items():
            values[ref(name)] = np.asarray(v, np.float64)
        needed, stack = set(), list(ats)
        while stack:  # the nodes `at` is computed from, short of what is given
            t = stack.pop()
            n = self.node(t)
            if n is None or n.name in needed or ref(n.name) in values:
                continue
            needed.add(n.name)
            stack.extend(n.inputs)
        for n in self.nodes:
            if n.name not in needed:
                continue
            args = []
            for i in n.inputs:
                if i in values:
                    args.append(values[i])
                else:
                    c = self.index.constant(i)
                    if c is None:
                        raise ValueError(f"{n}: input {i} is neither computed in the region nor a constant")
                    args.append(c.astype(np.float64) if c.dtype.kind == "f" else c)
            fn = OPS.get(n.op)
            if fn is None:
                raise ValueError(f"{n}: no float64 evaluation of {n.op} here")
            out = fn(n, *args)
            for k, v in enumerate(out if isinstance(out, tuple) else (out,)):
                values[f"{n.name}:{k}"] = np.asarray(v, np.float64) if np.asarray(v).dtype.kind == "f" else v
        return [values[a] for a in ats] if many else values[ats[0]]


# -- float64 numpy evaluation of the ops graph patterns use -----------------------
def _axes(n, x, axes):
    return tuple(int(a) % max(x.ndim, 1) for a in np.atleast_1d(axes))


def _reduce(fn):
    return lambda n, x, axes: fn(x, axis=_axes(n, x, axes), keepdims=bool(n.attrs.get("keep_dims", False)))


def _conv2d(n, x, w):
    if n.attrs.get("data_format", "NHWC") != "NHWC":
        raise ValueError("NCHW")
    strides, dil = n.attrs.get("strides", (1, 1, 1, 1)), n.attrs.get("dilations", (1, 1, 1, 1))
    pads, _ = _conv.resolve_pads(x.shape, w.shape, strides, n.attrs["padding"], n.attrs.get("explicit_paddings", ()),
                                 dil)
    return _conv.conv2d_nhwc(x, w, pads, strides[1:3], dil[1:3])


def _bias_add(n, x, b):
    if n.attrs.get("data_format", "NHWC") == "NCHW":
        return x + b.reshape((-1,) + (1,) * (x.ndim - 2))
    return x + b


def _fused_bn(n, x, scale, offset, mean, var, *_):
    if n.attrs.get("is_training", True) or n.attrs.get("data_format", "NHWC") != "NHWC":
        raise ValueError("training mode or NCHW")
    eps = n.attrs.get("epsilon", 1e-4)
    return ((x - mean) / np.sqrt(var + eps) * scale + offset,)


def _cast(n, a):
    to = np.dtype(n.attrs["DstT"])
    if to.kind == "f" and a.dtype == np.float64:  # a region is evaluated in float64 throughout
        return a
    return a.astype(to)


def _bits(n, name):
    return int(n.attrs.get(name, 0) or 0)


def _strided_slice(n, x, begin, end, strides):
    """tf.strided_slice's masks as the numpy index they stand for (TF's are numpy's)."""
    index = []
    for i, (b, e, s) in enumerate(zip(*(np.atleast_1d(v).tolist() for v in (begin, end, strides)))):
        bit = 1 << i
        if _bits(n, "ellipsis_mask") & bit:
            index.append(Ellipsis)
        elif _bits(n, "new_axis_mask") & bit:
            index.append(np.newaxis)
        elif _bits(n, "shrink_axis_mask") & bit:
            index.append(int(b))
        else:
            index.append(slice(None if _bits(n, "begin_mask") & bit else int(b),
                               None if _bits(n, "end_mask") & bit else int(e), int(s)))
    return np.asarray(x[tuple(index)])


def _slice(n, x, begin, size):
    return x[tuple(slice(int(b), None if int(k) < 0 else int(b) + int(k))
                   for b, k in zip(np.atleast_1d(begin), np.atleast_1d(size)))]


def _split_v(n, x, sizes, axis):
    axis = int(axis) % x.ndim
    sizes = [int(k) for k in np.atleast_1d(sizes)]
    if -1 in sizes:
        sizes[sizes.index(-1)] = x.shape[axis] - (sum(sizes) + 1)
    return tuple(np.split(x, np.cumsum(sizes)[:-1], axis=axis))


_erf = np.vectorize(math.erf, otypes=[np.float64])

OPS: Dict[str, Callable] = {
    "Identity": lambda n, a: a, "StopGradient": lambda n, a: a, "Snapshot": lambda n, a: a,
    "Add": lambda n, a, b: a + b, "AddV2": lambda n, a, b: a + b, "Sub": lambda n, a, b: a - b,
    "Mul": lambda n, a, b: a * b, "RealDiv": lambda n, a, b: a / b, "Div": lambda n, a, b: a / b,
    "Neg": lambda n, a: -a, "Rsqrt": lambda n, a: 1.0 / np.sqrt(a), "Sqrt": lambda n, a: np.sqrt(a),
    "Square": lambda n, a: a * a, "SquaredDifference": lambda n, a, b: (a - b) * (a - b),
    "Reciprocal": lambda n, a: 1.0 / a, "Inv": lambda n, a: 1.0 / a, "Pow": lambda n, a, b: np.power(a, b),
    "Maximum": lambda n, a, b: np.maximum(a, b), "Minimum": lambda n, a, b: np.minimum(a, b),
    "Relu": lambda n, a: np.maximum(a, 0), "Exp": lambda n, a: np.exp(a), "Tanh": lambda n, a: np.tanh(a),
    "Erf": lambda n, a: _erf(a), "Erfc": lambda n, a: 1.0 - _erf(a), "Sigmoid": lambda n, a: 1.0 / (1.0 + np.exp(-a)),
    "LeakyRelu": lambda n, a: np.where(a > 0, a, n.attrs.get("alpha", 0.2) * a),
    "Mean": _reduce(np.mean), "Sum": _reduce(np.sum),
    "BiasAdd": _bias_add, "Conv2D": _conv2d,
    "Pad": lambda n, x, p: np.pad(x, np.asarray(p).tolist()),
    "PadV2": lambda n, x, p, c: np.pad(x, np.asarray(p).tolist(), constant_values=float(c)),
    "FusedBatchNorm": _fused_bn, "FusedBatchNormV3": _fused_bn,
    "Cast": _cast,
    "Reshape": lambda n, a, s: np.reshape(a, [int(d) for d in np.atleast_1d(s)]),
    "ExpandDims": lambda n, a, d: np.expand_dims(a, int(d)),
    "Squeeze": lambda n, a: np.squeeze(a, axis=tuple(n.attrs.get("squeeze_dims", ())) or None),
    "Softplus": lambda n, a: np.logaddexp(0.0, a),
    # the shape arithmetic a decode writes (tf.shape, tf.range, tf.meshgrid, tf.split, tf.concat)
    "Shape": lambda n, a: np.asarray(a.shape, np.dtype(n.attrs.get("out_type", "int32"))),
    "Size": lambda n, a: np.asarray(a.size, np.dtype(n.attrs.get("out_type", "int32"))),
    "Rank": lambda n, a: np.asarray(a.ndim, np.int32),
    "StridedSlice": _strided_slice, "Slice": _slice,
    "Pack": lambda n, *a: np.stack(a, axis=int(n.attrs.get("axis", 0))),
    "Unpack": lambda n, a: tuple(np.moveaxis(a, int(n.attrs.get("axis", 0)), 0)),
    "ConcatV2": lambda n, *a: np.concatenate(a[:-1], axis=int(a[-1])),
    "SplitV": _split_v, "Split": lambda n, d, a: tuple(np.split(a, int(n.attrs["num_split"]), axis=int(d))),
    "Range": lambda n, a, b, d: np.arange(a, b, d, dtype=np.dtype(n.attrs.get("Tidx", "int32"))),
    "Fill": lambda n, s, v: np.full([int(d) for d in np.atleast_1d(s)], v),
    "Tile": lambda n, a, m: np.tile(a, [int(d) for d in np.atleast_1d(m)]),
    "BroadcastTo": lambda n, a, s: np.broadcast_to(a, [int(d) for d in np.atleast_1d(s)]).copy(),
    "Transpose": lambda n, a, p: np.transpose(a, [int(d) for d in np.atleast_1d(p)]),
    "GatherV2": lambda n, a, i, axis: np.take(a, i, axis=int(axis)),
    "Prod": _reduce(np.prod),
    "ZerosLike": lambda n, a: np.zeros_like(a), "OnesLike": lambda n, a: np.ones_like(a),
    "FloorDiv": lambda n, a, b: np.floor_divide(a, b), "FloorMod": lambda n, a, b: np.mod(a, b),
}
