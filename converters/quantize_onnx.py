"""int8 ONNX for onnxruntime (`bridge export --to onnx --quantize dynamic|static`),
through onnxruntime's own quantizer (onnxruntime.quantization): bridge adds the
choices a user would otherwise look up, and a verdict.

- dynamic: the weights of MatMul/Gemm nodes with a constant B become int8 (or
  uint8, see weight_type) with a scale per output channel, their activations
  are quantized at run time
  (DynamicQuantizeLinear + MatMulInteger). bridge's own ops stay float32 and keep
  their native kernels; no range is stored. The result is then measured against
  the float32 model on sample inputs (given, or read from the graph): below
  AGREEMENT, the fewest MatMuls whose int8 error weighs most stay float32 (see
  dynamic).
- static: QDQ around every quantizable node (Conv with per-channel weights,
  MatMul, Gemm, Add, Mul, ...), activation ranges calibrated (MinMax) on the
  inputs the user gives. onnxruntime's calibrator runs a plain session, without
  bridge's kernels, so the model quantized is the lowered export: a fused op is
  quantized as its standard decomposition (YoloConvBnLeaky: its Conv, with the
  BatchNorm folded into the weights, and LeakyRelu).

Neither keeps elementwise bounds a float32 export keeps: the exporter judges the
result by task agreement (bridge.parity.task), never by a wider bound.
"""
from __future__ import annotations

import os
import tempfile
from typing import Dict, Iterable, List, Mapping, Optional, Sequence

import numpy as np

MODES = ("none", "dynamic", "static")
DYNAMIC_OPS = ("MatMul", "Gemm")


def cpu_has_vnni() -> bool:
    """Whether this x86 CPU has VNNI (AVX512-VNNI or AVX-VNNI): int8 x int8 dot
    products in one instruction. False where /proc/cpuinfo cannot be read."""
    from bridge import cpu_flags
    return cpu_flags.has_vnni()


def weight_type() -> str:
    """"int8" on a CPU with VNNI, else "uint8": onnxruntime's u8u8 kernels are the
    fast ones on AVX2 without VNNI (benchmarks/int8.py measures both)."""
    return "int8" if cpu_has_vnni() else "uint8"


def _qtype(name: str):
    from onnxruntime.quantization import QuantType
    return {"int8": QuantType.QInt8, "uint8": QuantType.QUInt8}[name]


def _through_files(model, work: str):
    """`model` saved in `work` (external data beside it when large); its path."""
    import onnx
    path = os.path.join(work, "float.onnx")
    large = model.ByteSize() > (1 << 30) if hasattr(model, "ByteSize") else False
    onnx.save_model(model, path, save_as_external_data=large, location="float.onnx.data" if large else None)
    return path, large


def _load(path: str):
    import onnx
    return onnx.load(path)  # external data read back in: the caller writes its own file


# the bar a dynamic int8 model must reach against the float32 one on the inputs it is
# checked on (min cosine of every float output's last-axis vectors): above parity's
# task bar (bridge.parity.task COSINE_MIN 0.99), so that the held-out answers the
# verifier judges keep a margin (MiniLM: benchmarks/int8.py)
AGREEMENT = 0.995
# with dynamic(smooth=True): SmoothQuant's migration strengths tried per MatMul (0: none);
# the one with the smallest emulated error on the inputs is kept (Xiao et al. 2023, arXiv:2211.10438)
ALPHAS = (0.0, 0.5, 0.65, 0.8)
SMOOTH_GAIN = 0.8   # smoothed only where the emulated error drops below this share of the plain one
_IN_MEMORY_BYTES = (1 << 31) - (1 << 26)   # what a ModelProto handed to onnxruntime may hold
_ROWS = 512   # activation rows the emulation multiplies (the ranges come from every row)


def dynamic(model, weights: Optional[str] = None, feeds: Optional[Iterable[Mapping[str, np.ndarray]]] = None,
            bar: Optional[float] = AGREEMENT, smooth: bool = False, report: Optional[dict] = None):
    """`model` (a ModelProto) with its constant-weight MatMul/Gemm nodes int8,
    activations quantized at run time. `weights`: "int8" | "uint8" (default:
    weight_type()).

    Measured, not assumed: the result is run against `model` on `feeds` (feed
    dicts; default sample_feeds(model)) and must reach `bar` (min cosine of
    every float output against float32; None: no check, onnxruntime's quantizer
    as it is). Below it, the MatMuls with the largest int8 error, emulated on
    the inputs per row, stay float32: the fewest that reach the bar, found by
    doubling, then bisecting (a few session runs, not one per node).
    `smooth`: first give the MatMuls whose activations have outlier channels
    SmoothQuant's per-channel scales (a Mul on the activation, the inverse in
    the weight rows) where the emulated error shrinks. Off by default: the
    scales fit the channels of the inputs seen, and on MiniLM they generalised
    worse than keeping nodes float32 (held sentences min cosine 0.974 smoothed
    vs 0.992 from the same graph-read inputs; fit on one sentence, 0.82).
    `report` (a dict) gets what was done: agreement_plain, agreement, smoothed,
    kept_float.
    """
    info = report if report is not None else {}
    plain = _dynamic(model, weights, ())
    if bar is None:
        return plain
    if model.ByteSize() > _IN_MEMORY_BYTES:   # a session of it needs its file: not measured here
        info.update(agreement=None, smoothed=[], kept_float=[], note="over 2 GB: not measured")
        return plain
    feeds = [dict(f) for f in (feeds if feeds is not None else [sample_feeds(model)])]
    nodes = _quantizable(model)
    want, acts = _run_with_taps(model, feeds, sorted({n.input[0] for n in nodes}))
    agreement = lambda q: _agreement(_outputs(q, feeds), want)
    info.update(agreement_plain=agreement(plain), smoothed=[], kept_float=[])
    info["agreement"] = info["agreement_plain"]
    if info["agreement"] >= bar:
        return plain
    got = -2.0
    if smooth:
        start, errors, chosen = _smooth(model, nodes, acts)
        best = _dynamic(start, weights, ())
        got = agreement(best)
    if got > info["agreement"]:
        info.update(agreement=got, smoothed=sorted(chosen))
    else:  # not smoothed (or it did not help here): rank and exclude on the plain model
        start, best = model, plain
        errors = {n.name: e[0] for n, e in zip(nodes, _errors(model, nodes, acts, (0.0,)))}
        got = info["agreement"]
    if got >= bar:
        return best
    order = sorted(errors, key=errors.get, reverse=True)
    tried = {}

    def attempt(k):
        if k not in tried:
            q = _dynamic(start, weights, order[:k])
            tried[k] = (agreement(q), q)
        return tried[k][0] >= bar
    k, last = 1, len(order) - 1   # every node float32 is no int8 model: at most all but one
    while k < last and not attempt(k):
        k *= 2
    k = min(k, last)
    if k < 1 or not attempt(k):   # none reaches the bar: the best int8 one tried, for the verifier to judge
        k = max(tried, key=lambda i: tried[i][0], default=0)
        if not tried or tried[k][0] <= got:
            return best
    else:
        lo = max((i for i in tried if i < k and tried[i][0] < bar), default=0)   # fails (0: none kept)
        while k - lo > 1:
            mid = (lo + k) // 2
            if attempt(mid):
                k = mid
            else:
                lo = mid
    info.update(agreement=tried[k][0], kept_float=order[:k])
    return tried[k][1]


def _dynamic(model, weights: Optional[str], exclude: Sequence[str]):
    from onnxruntime.quantization import quantize_dynamic
    import onnx
    with tempfile.TemporaryDirectory(prefix="bridge-int8-") as work:
        src, large = _through_files(model, work)
        out = os.path.join(work, "int8.onnx")
        # per-channel scales: a transformer's embeddings stay much closer (MiniLM: benchmarks/RESULTS.md)
        quantize_dynamic(src, out, op_types_to_quantize=list(DYNAMIC_OPS), per_channel=True,
                         weight_type=_qtype(weights or weight_type()), use_external_data_format=large,
                         nodes_to_exclude=list(exclude),
                         extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT, "MatMulConstBOnly": True})
        return _load(out)


def _quantizable(model):
    """The nodes quantize_dynamic makes int8 whose product is A @ B with B a 2-D
    initializer: MatMul, and onnxruntime's contrib Attention (its packed QKV
    weight; it becomes QAttention). Its dynamic registry has no Gemm: a Gemm
    stays float32 whatever DYNAMIC_OPS says."""
    inits = {t.name: t for t in model.graph.initializer}
    return [n for n in model.graph.node if len(n.input) >= 2 and n.input[1] in inits
            and len(inits[n.input[1]].dims) == 2
            and (n.op_type == "MatMul" and n.domain in ("", "ai.onnx")
                 or n.op_type == "Attention" and n.domain == "com.microsoft")]


def sample_feeds(model, batch: int = 4, seed: int = 0) -> Dict[str, np.ndarray]:
    """Inputs for the agreement check when none are given, read from the graph:
    an integer input that indexes a table (a Gather of an initializer, through
    elementwise ops) gets ids in the table's range; another integer or bool
    input is taken for a mask, 1s then 0s, its lengths spread from 2 to the full
    axis (short sequences are where int8 errors weigh most: a mean over 2-3
    tokens); floats are standard normal. A dynamic first dim is `batch`,
    another dynamic dim 16."""
    import onnx
    rng = np.random.default_rng(seed)
    inits = {t.name: t for t in model.graph.initializer}
    users: Dict[str, list] = {}
    for n in model.graph.node:
        for i in n.input:
            users.setdefault(i, []).append(n)
    out = {}
    for i in model.graph.input:
        if i.name in inits:
            continue
        t = i.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in t.shape.dim]
        shape = [d or (batch if k == 0 else 16) for k, d in enumerate(dims)]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)
        if dtype.kind in "iub":
            rows = _table_rows(i.name, users, inits)
            if rows and dtype.kind != "b":
                out[i.name] = rng.integers(0, rows, shape).astype(dtype)
            else:
                mask = np.ones(shape, dtype)
                if len(shape) >= 2:
                    lengths = np.linspace(min(2, shape[1]), shape[1], shape[0]).round().astype(int)
                    for b, n in enumerate(lengths):
                        mask[b, n:] = 0
                out[i.name] = mask
        else:
            out[i.name] = rng.standard_normal(shape).astype(dtype)
    masks = [k for k in out if out[k].dtype.kind in "iub" and not _table_rows(k, users, inits)]
    for k, v in out.items():   # ids past a mask's length as a tokenizer pads them: 0
        if k not in masks and v.dtype.kind in "iu" and masks and out[masks[0]].shape[:2] == v.shape[:2]:
            v[out[masks[0]] == 0] = 0
    return out


def _table_rows(name: str, users, inits, depth: int = 6) -> int:
    """Rows of the initializer table `name` indexes through elementwise ops (0: none)."""
    seen, frontier = set(), [name]
    for _ in range(depth):
        nxt = []
        for t in frontier:
            for n in users.get(t, []):
                if n.op_type in ("Gather", "GatherElements") and len(n.input) > 1 and n.input[1] == t \
                        and n.input[0] in inits:
                    axis = next((a.i for a in n.attribute if a.name == "axis"), 0)
                    return int(inits[n.input[0]].dims[axis])
                if n.op_type in ("Shape", "Size") or n.name in seen:
                    continue   # the values stop at a shape
                seen.add(n.name)
                nxt += list(n.output)
        frontier = nxt
    return 0


def _run_with_taps(model, feeds, taps: Sequence[str]):
    """(outputs per feed, {tap: [array per feed]}): `model` run once per feed
    with the named intermediate tensors as extra outputs."""
    import onnx
    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    extra = [t for t in taps if t not in have]
    for t in extra:
        m.graph.output.append(onnx.helper.make_value_info(t, onnx.TypeProto()))
    names = [o.name for o in model.graph.output]
    sess = _session(m)
    outs, acts = [], {t: [] for t in taps}
    for f in feeds:
        got = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, _typed(sess, f))))
        outs.append({k: got[k] for k in names})
        for t in taps:
            acts[t].append(got[t])
    return outs, acts


def _session(model):
    from bridge import onnx_plugins
    return onnx_plugins.session(model)


def _typed(sess, feed):
    out = {}
    for i in sess.get_inputs():
        if i.name in feed:
            want = {"tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(float)": np.float32,
                    "tensor(bool)": np.bool_}.get(i.type)
            out[i.name] = np.asarray(feed[i.name]).astype(want) if want else np.asarray(feed[i.name])
    return out


def _outputs(model, feeds):
    sess = _session(model)
    names = [o.name for o in model.graph.output]
    return [dict(zip(names, sess.run(names, _typed(sess, f)))) for f in feeds]


def _agreement(got, want) -> float:
    """Min cosine over every float output's last-axis vectors, every feed; NaN counts as -1."""
    worst = 1.0
    for g, w in zip(got, want):
        for k, ref in w.items():
            ref = np.asarray(ref)
            if ref.dtype.kind != "f" or ref.size == 0:
                continue
            a = np.asarray(g[k], np.float64).reshape(-1, ref.shape[-1] if ref.ndim else 1)
            b = ref.astype(np.float64).reshape(a.shape)
            if not np.isfinite(a).all():
                return -1.0
            na, nb = np.linalg.norm(a, axis=-1), np.linalg.norm(b, axis=-1)
            live = nb > 0
            if live.any():
                worst = min(worst, float(((a * b).sum(-1)[live] / np.maximum(na[live], 1e-30) / nb[live]).min()))
    return worst


def _fake_act(a: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """DynamicQuantizeLinear's round trip (uint8, one range over the tensor, 0 exact)."""
    lo, hi = min(0.0, lo), max(0.0, hi)
    scale = (hi - lo) / 255 or 1.0
    zero = np.clip(np.round(-lo / scale), 0, 255)
    return (np.clip(np.round(a / scale) + zero, 0, 255) - zero) * scale


def _fake_weight(w: np.ndarray) -> np.ndarray:
    """quantize_dynamic's per-channel int8 weight round trip (symmetric, per output column)."""
    scale = 2 * np.abs(w).max(0, keepdims=True) / 255
    scale[scale == 0] = 1.0
    return np.clip(np.round(w / scale), -128, 127) * scale


def _scales(amax: np.ndarray, w: np.ndarray, alpha: float) -> np.ndarray:
    """Per input channel: the outlier channels' share of the range moved into
    the weights, (max / median max) ** alpha, never below 1: a channel quiet on
    the inputs seen is left as it is, so one loud on other inputs is not blown up."""
    if not alpha:
        return np.ones_like(amax, dtype=np.float32)
    typical = float(np.median(amax)) or 1.0
    return np.clip((amax / typical) ** alpha, 1.0, 1e4).astype(np.float32)


def _rows(a: np.ndarray) -> np.ndarray:
    a = a.reshape(-1, a.shape[-1])
    return a if len(a) <= _ROWS else a[np.linspace(0, len(a) - 1, _ROWS).astype(int)]


def _errors(model, nodes, acts, alphas) -> List[List[float]]:
    """Per node, per alpha: the error of its int8 product with SmoothQuant's
    scales of that alpha (RMS over rows of each row's error relative to that
    row), emulated on the captured activations (each feed's own range, as
    DynamicQuantizeLinear takes it; at most _ROWS rows multiplied)."""
    inits = _weights(model)
    out = []
    for n in nodes:
        w = inits[n.input[1]].astype(np.float32)
        feeds = acts[n.input[0]]
        amax = np.max([np.abs(a.reshape(-1, a.shape[-1])).max(0) for a in feeds], axis=0)
        row = []
        for alpha in alphas:
            s = _scales(amax, w, alpha)
            wq = _fake_weight(w * s[:, None])
            rel = []
            for a in feeds:
                sa = a / s
                lo, hi = float(sa.min()), float(sa.max())
                x = _rows(a).astype(np.float32)
                y = x @ w
                e = _fake_act(x / s, lo, hi).astype(np.float32) @ wq - y
                # per row, against that row: the agreement is a min over vectors, so a quiet row
                # quantized with a loud row's step counts as much as the loud one
                norm = np.linalg.norm(y, axis=-1)
                live = norm > 1e-6 * max(float(norm.max()), 1e-30)
                rel.append((np.linalg.norm(e, axis=-1)[live] / norm[live]) ** 2)
            rel = np.concatenate(rel) if rel else np.zeros(0)
            row.append(float(np.sqrt(rel.mean())) if rel.size else 0.0)
        out.append(row)
    return out


def _weights(model) -> Dict[str, np.ndarray]:
    from onnx import numpy_helper
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer if len(t.dims) == 2}


def _smooth(model, nodes, acts):
    """(model with SmoothQuant's scales where they shrink the emulated error,
    {node: its emulated error after}, {node: alpha chosen}). The nodes reading
    one activation share one scale (one Mul): QKV read one LayerNorm."""
    import onnx
    from onnx import helper, numpy_helper
    errors = _errors(model, nodes, acts, ALPHAS)
    groups: Dict[str, list] = {}
    for n, e in zip(nodes, errors):
        groups.setdefault(n.input[0], []).append((n, e))
    inits = _weights(model)
    m = onnx.ModelProto()
    m.CopyFrom(model)
    by_name = {n.name: n for n in m.graph.node}
    before: Dict[str, list] = {}   # node name: the Mul to insert before it
    after, chosen = {}, {}
    for a_name, members in groups.items():
        mean = [np.mean([e[i] for _, e in members]) for i in range(len(ALPHAS))]
        pick = int(np.argmin(mean))
        if mean[pick] > SMOOTH_GAIN * mean[0]:
            pick = 0   # not worth a Mul on the activation
        for n, e in members:
            after[n.name] = e[pick]
        if not ALPHAS[pick]:
            continue
        w_all = np.concatenate([inits[n.input[1]] for n, _ in members], axis=1)
        amax = np.max([np.abs(a.reshape(-1, a.shape[-1])).max(0) for a in acts[a_name]], axis=0)
        s = _scales(amax, w_all, ALPHAS[pick])
        first = members[0][0].name
        inv, scaled = f"{first}/smooth_inv_scale", f"{a_name}/smoothed_for_{first}"
        m.graph.initializer.append(numpy_helper.from_array((1.0 / s).astype(np.float32), inv))
        before[first] = [helper.make_node("Mul", [a_name, inv], [scaled], name=f"{first}/smooth")]
        for n, _ in members:
            node = by_name[n.name]
            new_w = f"{n.input[1]}/smoothed_for_{n.name}"
            w = inits[n.input[1]]
            m.graph.initializer.append(numpy_helper.from_array((w * s[:, None]).astype(w.dtype), new_w))
            node.input[0], node.input[1] = scaled, new_w
            chosen[n.name] = ALPHAS[pick]
    order = []
    for n in m.graph.node:
        order += before.get(n.name, []) + [n]
    del m.graph.node[:]
    m.graph.node.extend(order)
    used = {i for n in m.graph.node for i in n.input} | {o.name for o in m.graph.output}
    kept = [t for t in m.graph.initializer if t.name in used]   # the weights replaced by their scaled twins go
    del m.graph.initializer[:]
    m.graph.initializer.extend(kept)
    return m, after, chosen


def _constant_weights(src: str, work: str, large: bool) -> str:
    """`src` with what is computed from initializers alone folded into
    initializers (onnxruntime's own pre-processing: its basic graph optimizer):
    a lowered fused op computes its Conv filter from the stored one (a Transpose,
    the BatchNorm fold), and only a constant filter gets per-channel scales."""
    from onnxruntime.quantization.shape_inference import quant_pre_process
    out = os.path.join(work, "folded.onnx")
    quant_pre_process(src, out, skip_symbolic_shape=True, save_as_external_data=large)
    return out


class _Reader:
    """onnxruntime's CalibrationDataReader over a list of feed dicts."""

    def __init__(self, feeds: Sequence[Mapping[str, np.ndarray]], names: Sequence[str]):
        self._items = [{n: np.ascontiguousarray(f[n]) for n in names} for f in feeds]
        self._it = iter(self._items)

    def get_next(self):
        return next(self._it, None)

    def rewind(self):
        self._it = iter(self._items)


def batches(arrays: Mapping[str, np.ndarray], size: int = 1) -> List[Mapping[str, np.ndarray]]:
    """{input: [N, ...]} as feed dicts of `size` samples each (the calibrator's steps)."""
    n = min(int(np.shape(a)[0]) if np.ndim(a) else 1 for a in arrays.values())
    return [{k: v[i:i + size] for k, v in arrays.items()} for i in range(0, n, size)] or [dict(arrays)]


def static(model, feeds: Iterable[Mapping[str, np.ndarray]]):
    """`model` (a ModelProto of standard ops) as QDQ int8: per-channel int8
    weights, uint8 activations whose ranges come from running `feeds` (MinMax)."""
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static
    import onnx
    custom = sorted({n.domain for n in model.graph.node if n.domain not in ("", "ai.onnx")})
    if custom:  # the calibrator's plain session has no kernel for them
        raise ValueError(f"static quantization takes a model of standard ops; this one has nodes of {custom}")
    feeds = list(feeds)
    with tempfile.TemporaryDirectory(prefix="bridge-int8-") as work:
        src, large = _through_files(model, work)
        src = _constant_weights(src, work, large)
        out = os.path.join(work, "int8.onnx")
        names = [i.name for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}]
        quantize_static(src, out, _Reader(feeds, names), quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                        calibrate_method=CalibrationMethod.MinMax, use_external_data_format=large,
                        extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
        return _load(out)


def counts(model) -> Mapping[str, int]:
    """How many nodes of each int8 kind the model holds (its summary line)."""
    kinds = ("MatMulInteger", "DynamicQuantizeLinear", "QuantizeLinear", "DequantizeLinear", "QLinearConv",
             "QLinearMatMul", "ConvInteger")
    got: dict = {}
    for n in model.graph.node:
        if n.op_type in kinds:
            got[n.op_type] = got.get(n.op_type, 0) + 1
    return got
