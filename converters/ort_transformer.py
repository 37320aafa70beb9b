"""onnxruntime's transformer operators (domain com.microsoft) in bridge's ONNX export.

`rewrite(model)` replaces, in an exported graph, the parts of a transformer block
whose structure bridge knows by the contrib operators onnxruntime ships for them
(measured in benchmarks/onnx_models.py; onnxruntime's own
`onnxruntime.transformers.optimizer` matches none of them in a tf2onnx export of
Keras layers, and onnxruntime's session-level fusions miss them too):

- attention: Keras MultiHeadAttention (self-attention, as tf2onnx writes it: the
  three EinsumDense projections of one input, Einsum's MatMul/Transpose/Reshape
  decomposition, the mask's Where with Keras' large negative number, Softmax) ->
  one `Attention` (the Q, K, V weights packed into one [H, 3H] GEMM, the raw
  [N, L] mask as mask_index). The output projection stays as it was.
- skip_layer_norm (opt-in, see DEFAULT_REWRITES): a residual Add (optionally with
  the Dense bias Add before it) feeding bridge's FusedLayerNorm or ONNX
  LayerNormalization over the last axis -> `SkipLayerNormalization`.
- bias_gelu: exact GELU written with Erf (x * 0.5 * (1 + erf(x / sqrt 2)), any of
  its usual orders), after a bias Add -> `BiasGelu`, or `Gelu` without a bias.

Matching is structural, and every attention match is also checked numerically
before it is kept: the matched subgraph and its replacement run on onnxruntime
on random inputs (one sample fully masked, odd sizes where the shapes are
dynamic) and must agree within CHECK_ATOL, else that block is left as it was and
the reason is recorded. A graph with none of these patterns comes back
unchanged.

The result runs on onnxruntime only (its CPU and CUDA providers implement these
ops); onnx's reference evaluator and the other runtimes run the unrewritten
twin (bridge parity's `ort-contrib` row runs this rewrite, the others do not).
Importing this module is cheap (numpy, onnx).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

DOMAIN = "com.microsoft"
REWRITES = ("attention", "skip_layer_norm", "bias_gelu")
# skip_layer_norm is opt-in: onnxruntime's SkipLayerNormalization (as its LayerNormalization)
# loses the variance of rows whose mean is large next to their spread (H=768, mean/std 10:
# 1.3e-5; 1e3: 1.5e-3 against float64), which bridge's FusedLayerNorm contract excludes
# (docs/ops.md), and it saves little next to FusedLayerNorm (benchmarks/onnx_models.py)
DEFAULT_REWRITES = ("attention", "bias_gelu")
CHECK_ATOL = 1e-4          # per element, times max(1, |ref|): a wrong match is off by O(1)
BRIDGE_LAYER_NORM = ("com.bridge", "FusedLayerNorm")
ONNX_LAYER_NORM_EPSILON = 1e-5   # ONNX LayerNormalization's default
# onnxruntime's Attention adds mask_filter_value to masked scores; Keras replaces them
# by -0.7 * float max: any value this negative swamps every score, so a partly masked
# row is the same and a fully masked one is uniform in both
DEFAULT_MASK_FILTER = -0.7 * float(np.finfo(np.float32).max)


@dataclass
class Report:
    """What a rewrite did: {rewrite: count} and why candidates were left alone."""
    counts: Dict[str, int] = field(default_factory=lambda: {k: 0 for k in REWRITES})
    skipped: List[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def line(self) -> str:
        made = ", ".join(f"{v} {OP_NAMES[k]}" for k, v in self.counts.items() if v)
        return f"onnxruntime contrib ops (com.microsoft): {made or 'none matched'}"


OP_NAMES = {"attention": "Attention", "skip_layer_norm": "SkipLayerNormalization", "bias_gelu": "BiasGelu/Gelu"}


def _fused_layer_norm_epsilon() -> float:
    """FusedLayerNorm's epsilon where its node leaves it out: its spec's default."""
    from bridge import ops
    return next(a.default for a in ops.get("FusedLayerNorm").onnx_attrs if a.name == "epsilon")


def has_contrib_nodes(model) -> bool:
    return any(n.domain == DOMAIN for n in model.graph.node)


# -- the graph, indexed ------------------------------------------------------------------
class _Graph:
    def __init__(self, graph):
        from onnx import numpy_helper
        self.g = graph
        self.consts: Dict[str, np.ndarray] = {}
        for t in graph.initializer:
            self.consts[t.name] = numpy_helper.to_array(t)
        for n in graph.node:
            if n.op_type == "Constant" and n.domain in ("", "ai.onnx"):
                for a in n.attribute:
                    if a.name == "value":
                        self.consts[n.output[0]] = numpy_helper.to_array(a.t)
        self.inputs = {i.name: i for i in graph.input if i.name not in self.consts}
        self.outputs = {o.name for o in graph.output}
        self.reindex()

    def reindex(self):
        self.producer = {}
        self.consumers: Dict[str, list] = {}
        for n in self.g.node:
            for o in n.output:
                if o:
                    self.producer[o] = n
            for i in n.input:
                if i:
                    self.consumers.setdefault(i, []).append(n)

    def const(self, name) -> Optional[np.ndarray]:
        return self.consts.get(name)

    def prod(self, name, op_type=None):
        n = self.producer.get(name)
        if n is None or (op_type is not None and (n.op_type != op_type or n.domain not in ("", "ai.onnx"))):
            return None
        return n

    def users(self, name) -> list:
        return self.consumers.get(name, [])

    def only_user(self, name):
        u = self.users(name)
        return u[0] if len(u) == 1 and name not in self.outputs else None

    def split_const(self, node) -> Tuple[Optional[str], Optional[np.ndarray]]:
        """(the other input, the constant) of a binary node with one constant input."""
        if len(node.input) != 2:
            return None, None
        a, b = node.input
        if self.const(b) is not None and self.const(a) is None:
            return a, self.const(b)
        if self.const(a) is not None and self.const(b) is None:
            return b, self.const(a)
        return None, None


def _attr(node, name, default=None):
    from onnx import helper
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _scalar(c: Optional[np.ndarray], value: float, rtol: float = 1e-6) -> bool:
    return c is not None and c.size == 1 and math.isclose(float(c.ravel()[0]), value, rel_tol=rtol)


class _Names:
    def __init__(self, graph):
        self.used = {n for node in graph.node for n in list(node.input) + list(node.output)}
        self.used |= {t.name for t in graph.initializer} | {i.name for i in graph.input}
        self.k = 0

    def __call__(self, base: str) -> str:
        while True:
            self.k += 1
            name = f"{base}__ort{self.k}"
            if name not in self.used:
                self.used.add(name)
                return name


# -- GELU ------------------------------------------------------------------------------
def _match_gelu(G: _Graph, erf) -> Optional[Tuple[str, str, list]]:
    """(x, out, nodes of the GELU) around `erf`, or None."""
    pre = G.producer.get(erf.input[0])
    if pre is None or pre.domain not in ("", "ai.onnx"):
        return None
    x, c = G.split_const(pre)
    if x is None or not ((pre.op_type == "Mul" and _scalar(c, 1 / math.sqrt(2)))
                         or (pre.op_type == "Div" and _scalar(c, math.sqrt(2)) and pre.input[0] == x)):
        return None
    add = G.only_user(erf.output[0])
    if add is None or add.op_type != "Add" or not _scalar(G.split_const(add)[1], 1.0):
        return None
    f = G.only_user(add.output[0])
    if f is None or f.op_type != "Mul":
        return None
    other = f.input[1] if f.input[0] == add.output[0] else f.input[0]
    half = G.prod(other, "Mul")
    if half is not None and G.split_const(half)[0] == x and _scalar(G.split_const(half)[1], 0.5) \
            and G.only_user(half.output[0]) is f:
        return x, f.output[0], [pre, erf, add, half, f]           # (0.5 * x) * (1 + erf)
    g = G.only_user(f.output[0])
    if g is None or g.op_type != "Mul":
        return None
    if _scalar(G.const(other), 0.5) and set(g.input) == {f.output[0], x}:
        return x, g.output[0], [pre, erf, add, f, g]              # x * ((1 + erf) * 0.5)
    if other == x and G.split_const(g)[0] == f.output[0] and _scalar(G.split_const(g)[1], 0.5):
        return x, g.output[0], [pre, erf, add, f, g]              # (x * (1 + erf)) * 0.5
    return None


def _rewrite_gelu(G: _Graph, names: _Names, report: Report, new_nodes: dict) -> None:
    from onnx import helper
    for erf in [n for n in G.g.node if n.op_type == "Erf" and n.domain in ("", "ai.onnx")]:
        m = _match_gelu(G, erf)
        if m is None:
            continue
        x, out, nodes = m
        if x in G.outputs or any(o in G.outputs for n in nodes[:-1] for o in n.output):
            continue
        gelu_users = {id(n) for n in nodes}
        bias_add = G.prod(x, "Add")
        inner, bias = (G.split_const(bias_add) if bias_add is not None else (None, None))
        if (inner is not None and bias.ndim == 1 and bias.dtype == np.float32
                and all(id(u) in gelu_users for u in G.users(x)) and x not in G.outputs):
            node = helper.make_node("BiasGelu", [inner, _const_input(bias_add, inner)], [out],
                                    name=names("BiasGelu"), domain=DOMAIN)
        else:
            node = helper.make_node("Gelu", [x], [out], name=names("Gelu"), domain=DOMAIN)
        new_nodes[id(nodes[-1])] = node
        report.counts["bias_gelu"] += 1


def _const_input(node, other: str) -> str:
    return node.input[1] if node.input[0] == other else node.input[0]


# -- SkipLayerNormalization -----------------------------------------------------------
def _layer_norm(G: _Graph, node, rank_of) -> Optional[Tuple[float, str, str]]:
    """(epsilon, gamma, beta) of a layer norm over the last axis, or None."""
    if (node.domain, node.op_type) == BRIDGE_LAYER_NORM:
        eps = _attr(node, "epsilon", _fused_layer_norm_epsilon())
    elif node.op_type == "LayerNormalization" and node.domain in ("", "ai.onnx"):
        axis = _attr(node, "axis", -1)
        rank = rank_of(node.input[0])
        if not (axis == -1 or (rank is not None and axis == rank - 1)):
            return None
        if any(o for o in node.output[1:]):   # Mean / InvStdDev used: not SkipLayerNormalization's
            return None
        eps = _attr(node, "epsilon", ONNX_LAYER_NORM_EPSILON)
    else:
        return None
    if len(node.input) < 3 or not node.input[2]:
        return None
    gamma, beta = G.const(node.input[1]), G.const(node.input[2])
    if gamma is None or beta is None or gamma.ndim != 1 or beta.shape != gamma.shape or gamma.dtype != np.float32:
        return None
    return float(eps), node.input[1], node.input[2]


def _same_shape(a, b) -> bool:
    """Known to be one shape at run time, as far as a residual Add goes: equal ranks, equal
    static dims, symbolic dims only against symbolic ones (tf2onnx names each unknown batch
    anew; an Add of a batch against a broadcast 1 would be a static 1)."""
    if not a or not b or len(a) != len(b) or not isinstance(a[-1], int) or a[-1] <= 0:
        return False
    return all((x == y) if isinstance(x, int) and x > 0 else not (isinstance(y, int) and y > 0)
               for x, y in zip(a, b))


def _uncentered(G: _Graph, name: str) -> str:
    """x for x - ReduceMean(x, last axis): bridge's lowered FusedLayerNorm centres its rows
    before LayerNormalization (which then sees mean 0); SkipLayerNormalization's
    float32 rows accumulate in double, so it needs no centring (tests: large-mean rows)."""
    sub = G.prod(name, "Sub")
    if sub is None or G.only_user(name) is None:
        return name
    mean = G.prod(sub.input[1], "ReduceMean")
    if mean is None or mean.input[0] != sub.input[0] or _attr(mean, "keepdims", 1) != 1:
        return name
    axes = G.const(mean.input[1]) if len(mean.input) > 1 and mean.input[1] else _attr(mean, "axes")
    if axes is None or list(np.ravel(axes)) != [-1] or [id(u) for u in G.users(mean.output[0])] != [id(sub)]:
        return name
    return sub.input[0]


def _rewrite_skip_layer_norm(G: _Graph, shapes: dict, names: _Names, report: Report, new_nodes: dict) -> None:
    from onnx import helper

    def rank_of(name):
        s = shapes.get(name)
        return None if s is None else len(s)

    for ln in list(G.g.node):
        m = _layer_norm(G, ln, rank_of)
        if m is None:
            continue
        eps, gamma, beta = m
        add = G.prod(_uncentered(G, ln.input[0]), "Add")
        if add is None or len(add.input) != 2 or any(G.const(i) is not None for i in add.input):
            continue
        a, b = add.input
        sa, sb = shapes.get(a), shapes.get(b)
        hidden = G.const(gamma).shape[0]
        if not _same_shape(sa, sb) or sa[-1] != hidden:
            report.skipped.append(f"SkipLayerNormalization at {ln.name or ln.output[0]}: the residual's two "
                                  f"shapes are not known equal ({sa} and {sb})")
            continue
        inputs = [a, b, gamma, beta]
        # the Dense bias just before the residual goes into the op's bias input
        for first, second in ((a, b), (b, a)):
            if not _same_shape(shapes.get(second), sa):
                continue
            bias_add = G.prod(second, "Add")
            if bias_add is None or G.only_user(second) is not add:
                continue
            inner, bias = G.split_const(bias_add)
            if inner is not None and bias.shape == (hidden,) and bias.dtype == np.float32 \
                    and _same_shape(shapes.get(inner), sa):
                inputs = [first, inner, gamma, beta, _const_input(bias_add, inner)]
                break
        outputs = [ln.output[0]]
        if len(G.users(add.output[0])) > 1 or add.output[0] in G.outputs:
            outputs += ["", "", add.output[0]]    # input_skip_bias_sum: the residual sum others read
            new_nodes[id(add)] = None             # that Add is gone: one producer per name
        node = helper.make_node("SkipLayerNormalization", inputs, outputs, name=names("SkipLayerNorm"),
                                domain=DOMAIN, epsilon=eps)
        new_nodes[id(ln)] = node
        report.counts["skip_layer_norm"] += 1


# -- Attention ---------------------------------------------------------------------------
@dataclass
class _Projection:
    x: str
    out: str
    weight: np.ndarray   # [Hin, heads * dh]
    bias: np.ndarray     # [heads * dh]
    heads: int
    dh: int


def _projections(G: _Graph) -> Dict[str, _Projection]:
    """{tensor: projection}: MatMul(x, W[Hin, C]) [-> Add(b[C])] -> Reshape(..., heads, dh)
    [-> Add(b[heads, dh])], Keras EinsumDense 'abc,cde->abde' as tf2onnx writes it."""
    found = {}
    for mm in G.g.node:
        if mm.op_type != "MatMul" or mm.domain not in ("", "ai.onnx"):
            continue
        w = G.const(mm.input[1])
        if w is None or w.ndim != 2 or G.const(mm.input[0]) is not None or w.dtype != np.float32:
            continue
        cols = w.shape[1]
        t, bias = mm.output[0], np.zeros(cols, np.float32)
        nxt = G.only_user(t)
        if nxt is not None and nxt.op_type == "Add":
            inner, b = G.split_const(nxt)
            if inner == t and b.shape == (cols,):
                t, bias, nxt = nxt.output[0], bias + b, G.only_user(nxt.output[0])
        if nxt is None or nxt.op_type != "Reshape" or nxt.input[0] != t:
            continue
        shape = G.const(nxt.input[1])
        if shape is None or shape.ndim != 1 or len(shape) != 4 or shape[2] <= 0 or shape[3] <= 0 \
                or shape[2] * shape[3] != cols:
            continue
        heads, dh = int(shape[2]), int(shape[3])
        t = nxt.output[0]
        nxt = G.only_user(t)
        if nxt is not None and nxt.op_type == "Add":
            inner, b = G.split_const(nxt)
            if inner == t and b is not None and b.size == cols and b.shape[-2:] in ((heads, dh), (cols,)):
                t, bias = nxt.output[0], bias + b.reshape(cols)
        found[t] = _Projection(mm.input[0], t, w, bias.astype(np.float32), heads, dh)
    return found


def _ancestors(G: _Graph, start: Sequence[str], stops) -> Tuple[list, set]:
    """(nodes between `stops` and `start`, walking back; the non-constant roots
    reached: stop tensors and graph inputs)."""
    seen, nodes, roots = set(), [], set()
    todo = list(start)
    while todo:
        t = todo.pop()
        if t in seen or not t:
            continue
        seen.add(t)
        if t in stops:
            roots.add(t)
            continue
        if t in G.consts and t not in G.producer:
            continue
        n = G.producer.get(t)
        if n is None:
            roots.add(t)
            continue
        if id(n) in {id(m) for m in nodes}:
            continue
        nodes.append(n)
        todo.extend(n.input)
    return nodes, roots


def _descends(G: _Graph, start: str, limit: int = 400):
    """The nodes downstream of `start`, breadth first (the first `limit`)."""
    out, seen, todo = [], {start}, [start]
    while todo and len(out) < limit:
        t = todo.pop(0)
        for n in G.users(t):
            if id(n) in {id(m) for m in out}:
                continue
            out.append(n)
            for o in n.output:
                if o and o not in seen:
                    seen.add(o)
                    todo.append(o)
    return out


def _rewrite_attention(model, G: _Graph, shapes: dict, names: _Names, report: Report, check: bool,
                       replaced: Dict[str, object]) -> None:
    """Adds an Attention node per matched block; the old nodes are left for dead-code removal."""
    from onnx import helper, numpy_helper
    projections = _projections(G)
    if not projections:
        return
    for sm in [n for n in G.g.node if n.op_type == "Softmax" and n.domain in ("", "ai.onnx")]:
        where = sm.name or sm.output[0]
        score_nodes, roots = _ancestors(G, [sm.input[0]], set(projections))
        qk = [r for r in roots if r in projections]
        masks = [r for r in roots if r in G.inputs]
        if len(qk) != 2 or len(roots) != len(qk) + len(masks) or len(masks) > 1:
            continue
        x = projections[qk[0]].x
        if projections[qk[1]].x != x:
            continue   # cross attention: Attention packs one input's Q, K and V
        # the context: the dynamic input of the first MatMul with constant weights after Softmax
        z = None
        for n in _descends(G, sm.output[0]):
            if n.op_type == "MatMul" and G.const(n.input[1]) is not None and G.const(n.input[0]) is None:
                z = n.input[0]
                break
        if z is None:
            continue
        nodes, zroots = _ancestors(G, [z], set(projections) | set(masks))
        vs = [r for r in zroots if r in projections and r not in qk]
        if len(vs) != 1 or projections[vs[0]].x != x or set(zroots) - set(projections) - set(masks):
            report.skipped.append(f"Attention at {where}: the context does not come from one value projection")
            continue
        q0, k0, v = projections[qk[0]], projections[qk[1]], projections[vs[0]]
        if len({q0.heads, k0.heads, v.heads}) != 1 or q0.weight.shape != k0.weight.shape \
                or v.weight.shape[0] != q0.weight.shape[0] or q0.dh != k0.dh:
            continue
        if any(n.domain not in ("", "ai.onnx") for n in nodes):
            continue
        mask = masks[0] if masks else None
        if mask is not None and len(_input_shape(G.inputs[mask])) != 2:
            report.skipped.append(f"Attention at {where}: the mask {mask} is not [batch, length]")
            continue
        filt = min([float(c.min()) for n in nodes for i in n.input if (c := G.const(i)) is not None
                    and c.size and c.dtype == np.float32] + [0.0])
        filt = filt if filt < -1e4 else DEFAULT_MASK_FILTER
        made = None
        for q, k in ((q0, k0), (k0, q0)):   # which of the two is the query: the check decides
            w = np.concatenate([q.weight, k.weight, v.weight], axis=1)
            b = np.concatenate([q.bias, k.bias, v.bias])
            wn, bn = names("attention_qkv_weight"), names("attention_qkv_bias")
            ins = [x, wn, bn]
            pre = []
            if mask is not None:
                if G.inputs[mask].type.tensor_type.elem_type == 6:   # int32
                    ins.append(mask)
                else:
                    cast = names("attention_mask_int32")
                    pre.append(helper.make_node("Cast", [mask], [cast], name=names("Cast"), to=6))
                    ins.append(cast)
            attrs = dict(num_heads=q.heads)
            if q.weight.shape[1] != v.weight.shape[1]:
                attrs["qkv_hidden_sizes"] = [q.weight.shape[1], k.weight.shape[1], v.weight.shape[1]]
            if mask is not None:
                attrs["mask_filter_value"] = filt
            att = helper.make_node("Attention", ins, [z], name=names("Attention"), domain=DOMAIN, **attrs)
            inits = [numpy_helper.from_array(w.astype(np.float32), wn),
                     numpy_helper.from_array(b.astype(np.float32), bn)]
            if not check:
                made = (pre + [att], inits)
                break
            why = _check_attention(model, G, nodes, x, mask, z, pre + [att], inits, shapes)
            if why is None:
                made = (pre + [att], inits)
                break
        if made is None:
            report.skipped.append(f"Attention at {where}: the matched block and Attention disagree on random "
                                  f"inputs ({why}); left as it was")
            continue
        replaced[z] = made
        report.counts["attention"] += 1


def _input_shape(vi) -> list:
    t = vi.type.tensor_type
    if not t.HasField("shape"):
        return []
    return [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]


def _check_attention(model, G: _Graph, nodes, x, mask, z, new_nodes, new_inits, shapes) -> Optional[str]:
    """None when the matched block and its replacement agree on random inputs, else why not."""
    from onnx import helper, numpy_helper, TensorProto
    xs = [d if isinstance(d, int) and d > 0 else None for d in shapes.get(x) or []]
    ms = _input_shape(G.inputs[mask]) if mask is not None else []
    n_static = (ms[0] if ms else None) or (xs[0] if xs else None)
    l_static = (ms[1] if len(ms) > 1 else None) or (xs[1] if len(xs) > 1 else None)
    hin = new_inits[0].dims[0]
    batch = n_static or 3
    length = l_static or 7
    nodes, roots = _ancestors(G, [z], {x} | ({mask} if mask else set()))
    if not roots <= {x, mask}:
        return f"the block also reads {sorted(roots - {x, mask})[:2]}"
    order = {id(n): i for i, n in enumerate(G.g.node)}
    body = sorted(nodes, key=lambda n: order[id(n)])
    used = {i for n in body for i in n.input}
    inits = [numpy_helper.from_array(G.consts[i], i) for i in sorted(used) if i in G.consts
             and i not in G.producer]
    consts = [n for n in G.g.node if n.op_type == "Constant" and n.output[0] in used]
    ins = [helper.make_tensor_value_info(x, TensorProto.FLOAT, [batch, length, hin])]
    feeds = {x: np.random.default_rng(0).standard_normal((batch, length, hin)).astype(np.float32)}
    if mask is not None:
        dtype = G.inputs[mask].type.tensor_type.elem_type
        ins.append(helper.make_tensor_value_info(mask, dtype, [batch, length]))
        rng = np.random.default_rng(1)
        m = rng.choice(np.array([0, 1, 3]), size=(batch, length))
        m[:, 0] = 1
        if batch > 1:
            m[-1] = 0       # a fully masked sample: uniform weights in Keras and in Attention
        feeds[mask] = m.astype(helper.tensor_dtype_to_np_dtype(dtype))
    out = [helper.make_tensor_value_info(z, TensorProto.FLOAT, None)]
    opsets = [helper.make_opsetid(o.domain, o.version) for o in model.opset_import if o.domain != DOMAIN]
    old = helper.make_model(helper.make_graph(consts + body, "old", ins, out, inits), opset_imports=opsets,
                            ir_version=model.ir_version)
    new = helper.make_model(helper.make_graph(new_nodes, "new", ins, out, new_inits),
                            opset_imports=opsets + [helper.make_opsetid(DOMAIN, 1)], ir_version=model.ir_version)
    try:
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        got = [ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
               for m in (old, new)]
    except Exception as e:  # noqa: BLE001 - any failure means: do not rewrite this block
        return f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
    ref, mine = (np.asarray(g, np.float64) for g in got)
    if ref.shape != mine.shape:
        return f"shapes {ref.shape} and {mine.shape}"
    err = np.abs(mine - ref) / np.maximum(1.0, np.abs(ref))
    if not np.all(np.isfinite(err)) or err.max() > CHECK_ATOL:
        return f"max error {float(np.nanmax(err)) if np.isfinite(err).any() else float('nan'):.2e}"
    return None


# -- the pass --------------------------------------------------------------------------
def _shapes(model) -> Dict[str, list]:
    """{tensor: [dim or a dim_param string or None]} from ONNX shape inference (the com.bridge
    schemas registered, so their outputs are shaped); {} where inference fails."""
    import onnx
    try:
        from bridge import onnx_plugins  # noqa: F401 - registers the com.bridge schemas
    except ImportError:
        pass
    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception:  # noqa: BLE001 - without shapes, nothing that needs them is rewritten
        return {}
    out = {}
    for v in list(inferred.graph.value_info) + list(inferred.graph.input) + list(inferred.graph.output):
        t = v.type.tensor_type
        if t.HasField("shape"):
            out[v.name] = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in t.shape.dim]
    return out


def rewrite(model, rewrites: Sequence[str] = DEFAULT_REWRITES, check: bool = True):
    """(a copy of `model` with the contrib operators, Report). `rewrites`: which of
    REWRITES to do (default DEFAULT_REWRITES); `check`: verify each attention match
    numerically (off only in tests that need the unchecked rewrite)."""
    import onnx
    from onnx import helper
    unknown = set(rewrites) - set(REWRITES)
    if unknown:
        raise ValueError(f"ort_transformer.rewrite: unknown rewrites {sorted(unknown)}; known: {list(REWRITES)}")
    out = onnx.ModelProto()
    out.CopyFrom(model)
    report = Report()
    G = _Graph(out.graph)
    # shape inference costs seconds on a large model: only where a rewrite reads shapes
    has_softmax = any(n.op_type == "Softmax" for n in out.graph.node)
    shapes = _shapes(out) if ("skip_layer_norm" in rewrites or ("attention" in rewrites and has_softmax)) else {}
    names = _Names(out.graph)
    # attention first: its block holds no LayerNorm or GELU, and it reads the graph before the others change it
    if "attention" in rewrites:
        replaced: Dict[str, object] = {}
        _rewrite_attention(out, G, shapes, names, report, check, replaced)
        if replaced:
            producers = {z: G.producer[z] for z in replaced}
            kept = []
            for n in out.graph.node:
                hit = [z for z, p in producers.items() if p is n]
                if hit:
                    nodes, inits = replaced[hit[0]]
                    # the producer's other outputs (none in tf2onnx's Reshape) would be lost
                    if len([o for o in n.output if o]) != 1:
                        kept.append(n)
                        continue
                    kept.extend(nodes)
                    out.graph.initializer.extend(inits)
                else:
                    kept.append(n)
            del out.graph.node[:]
            out.graph.node.extend(kept)
            G.reindex()
    new_nodes: dict = {}
    if "skip_layer_norm" in rewrites:
        _rewrite_skip_layer_norm(G, shapes, names, report, new_nodes)
    if "bias_gelu" in rewrites:
        _rewrite_gelu(G, names, report, new_nodes)
    if new_nodes:
        kept = [new_nodes.get(id(n), n) for n in out.graph.node]
        kept = [n for n in kept if n is not None]
        del out.graph.node[:]
        out.graph.node.extend(kept)
    if report.total:
        _remove_dead(out)
        if not any(o.domain == DOMAIN for o in out.opset_import):
            out.opset_import.append(helper.make_opsetid(DOMAIN, 1))
        _toposort(out.graph)
    return out, report


def _remove_dead(model) -> None:
    """Drops the nodes and initializers nothing reads on the way to the outputs."""
    g = model.graph
    needed = {o.name for o in g.output} | {i.name for i in g.input}   # an initializer listed as input stays
    keep = []
    for n in reversed(list(g.node)):
        if any(o in needed for o in n.output if o):
            keep.append(n)
            needed.update(i for i in n.input if i)
            needed.update(_subgraph_reads(n))
    keep.reverse()
    del g.node[:]
    g.node.extend(keep)
    inits = [t for t in g.initializer if t.name in needed]
    del g.initializer[:]
    g.initializer.extend(inits)


def _subgraph_reads(node) -> set:
    """The names an If/Loop/Scan body reads (outer-scope ones among them)."""
    from onnx import AttributeProto
    names = set()
    for a in node.attribute:
        graphs = [a.g] if a.type == AttributeProto.GRAPH else list(a.graphs) if a.type == AttributeProto.GRAPHS else []
        for sub in graphs:
            for n in sub.node:
                names.update(i for i in n.input if i)
                names.update(_subgraph_reads(n))
    return names


def _toposort(graph) -> None:
    """Orders the nodes so that each follows its inputs' producers (an Attention
    node replaces a Reshape but reads a mask Cast the matcher placed before it)."""
    available = {i.name for i in graph.input} | {t.name for t in graph.initializer} | {""}
    if any(_subgraph_reads(n) for n in graph.node):
        return   # outer-scope reads: the given order already serves them, and nothing is moved
    pending = list(graph.node)
    ordered = []
    while pending:
        rest = []
        for n in pending:
            if all(i in available for i in n.input):
                ordered.append(n)
                available.update(n.output)
            else:
                rest.append(n)
        if len(rest) == len(pending):    # a cycle or an outer-scope name: keep the given order
            ordered.extend(rest)
            break
        pending = rest
    del graph.node[:]
    graph.node.extend(ordered)
