"""Graph-level fusion: `fuse_graph(model) -> (GraphModel, FuseReport)`.

The TensorFlow-graph twin of the Keras rewriter (fuse.py), for models that are
graphs: a SavedModel of any kind (`model.export`, `tf.saved_model.save` of a
tf.Module, a TF-Hub style serving signature) or a TF1 frozen GraphDef. The model
is frozen (graph_model.py: variables to constants, functions inlined), then
every graph pattern of the registered specs (`OpSpec.graph_fusion`,
bridge.ops.graph_fusion), a team's included, is matched on it:

- each node whose op ends a pattern, in reverse graph order (so the largest
  match wins: a layer norm's last Add before its inner Mul), gives the
  single-entry region ending there (graph_region.py); for an op of several
  outputs (YoloDecode), the regions grown forward from it until exactly that
  many tensors leave them, largest first, the first that matches taken;
- the pattern's `when` says whether it is meant; its `identify` reads the op's
  inputs and attributes, or says why it does not fit (a near miss);
- the claim is checked: the region, evaluated in float64 on random inputs at
  three scales, must equal the op's numpy reference on those inputs within
  1e-6 (relative); else a near miss with how far off it was;
- the region becomes one node of the op, named as the node of its (first)
  output, so its consumers read it unchanged (an op's further outputs are
  Identity nodes named as the nodes that computed them), its other inputs
  constants beside it.

Near misses overlapping a fused region, or inside a larger near miss of the
same pattern, are left out of the report (they are parts of one match). The
report has the same rows as the Keras road's, its counts and near misses for
the graph.
"""
from __future__ import annotations

from typing import List, Optional, Sequence

import numpy as np

from bridge import ops as _specs

from .fuse_report import FuseReport
from .graph_model import GraphModel, GraphModelError, load
from .graph_region import GraphIndex, Region, producer, ref
from .tf2onnx_repairs import fresh_name

TOLERANCE = 1e-6
SCALES = ((1.0, 0.5), (1e-3, 1.0), (30.0, -2.0))   # (scale, offset) of the random inputs a match is checked on


def fuse_graph(model, inputs: Optional[Sequence[str]] = None, outputs: Optional[Sequence[str]] = None,
               name: Optional[str] = None):
    """(fused GraphModel, FuseReport). `model`: a SavedModel folder or loaded
    object, a ConcreteFunction, a GraphModel, a GraphDef or a frozen `.pb` (with
    `inputs`/`outputs` tensor names)."""
    try:
        gm = load(model, inputs, outputs, name)
    except GraphModelError:
        raise
    except Exception as e:  # noqa: BLE001 - a graph TensorFlow cannot freeze (e.g. lookup tables): as it is
        report = FuseReport(model=name or getattr(model, "name", None) or str(model), road="graph")
        report.notes.append(f"the graph cannot be frozen for rewriting ({_first_line(e)}); the model passes "
                            f"through unfused")
        return model, report
    report = FuseReport(model=gm.name, road="graph")
    patterns = [(spec, p) for spec in _specs.all_specs() for p in spec.graph_fusion]
    if not patterns:
        report.notes.append("no registered op declares a graph pattern; the graph passes through unfused")
        return gm, report
    index = GraphIndex(gm.graph_def, [t for t, _ in gm.outputs])
    taken: set = set()
    plans, misses = [], []
    for name_ in reversed(index.order):
        node = index.nodes[name_]
        for spec, pattern in patterns:
            if node.op not in pattern.ends or name_ in taken:
                continue
            if len(spec.outputs) > 1:  # the regions grown forward to the op's outputs, largest first
                candidates = index.grown(name_, pattern.ops, len(spec.outputs))
            else:
                candidates = [r for r in [index.region(name_, pattern.ops, pattern.start)] if r is not None]
            miss = None
            for region in candidates:
                if region.names & taken:
                    continue
                try:
                    if pattern.when is not None and not pattern.when(region):
                        continue
                    found = _match(spec, pattern, region)
                except Exception as e:  # noqa: BLE001 - a pattern that trips on a graph: a near miss, not a crash
                    found = f"while matching: {_first_line(e)}"
                if isinstance(found, str):
                    miss = miss or (pattern.key, region, found)
                    continue
                plans.append((spec, pattern, region) + found)
                taken |= region.names
                miss = None
                break
            if miss:
                misses.append(miss)
    for spec, pattern, region, values, attrs in plans:
        report.add_block(pattern.key, region.end.name, [n.name for n in region.nodes])
        for folded in (pattern.folds(region) if pattern.folds else ()):
            report.fold(folded)
    apart = [m for m in misses if not m[1].names & taken]
    kept: List = [(key, region, why) for j, (key, region, why) in enumerate(apart)
                  if not any(k == key and (region.names < r.names or (region.names == r.names and i < j))
                             for i, (k, r, _) in enumerate(apart))]
    for key, region, why in reversed(kept):  # in graph order
        shown = [region.nodes[0].name, region.end.name] if len(region.nodes) > 1 else [region.end.name]
        report.skip(key, shown, why)
    for spec in _specs.all_specs():
        if spec.fusion and not spec.graph_fusion:
            report.notes.append(f"{spec.name} declares Keras patterns only: its subgraphs in a graph stay as they are")
    if not plans:
        return gm, report
    fused = gm.replace(rewrite(gm, index, plans), f"{gm.name}_fused")
    report.fused_model = fused.name
    return fused, report


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:160]}" if text else type(e).__name__


def _match(spec, pattern, region: Region):
    """(inputs after the first, attrs) of the op standing for `region`, or why not."""
    why = region.escape()
    if why:
        return why
    if region.x_shape is None:
        return "the input's rank is unknown"
    if region.dtype not in spec.dtypes:
        return f"{region.end} computes in {region.dtype}; {spec.name} takes {list(spec.dtypes)}"
    missing = _no_kernel(spec)
    if missing:
        return missing
    got = pattern.identify(region)
    if isinstance(got, str):
        return got
    values, attrs = got[:2]
    if len(spec.outputs) > 1:  # identify says which of the region's tensors is which output
        outputs = list(got[2]) if len(got) > 2 else []
        if sorted(outputs) != sorted(region.outputs) or len(outputs) != len(spec.outputs):
            return (f"its outputs {region.outputs} are not {spec.name}'s {len(spec.outputs)} "
                    f"({', '.join(a.name for a in spec.outputs)})")
        region.outputs = outputs
    values = [np.asarray(v, np.float64) for v in values]
    try:
        attrs = spec.resolve(dict(attrs))
        spec.infer_shapes([region.x_shape] + [v.shape for v in values], **attrs)
    except ValueError as e:
        return f"the fused op rejects it: {e}"
    why = verify(spec, pattern, region, values, attrs)
    return why or (values, attrs)


def verify(spec, pattern, region: Region, values, attrs) -> Optional[str]:
    """Why the region does not compute spec's op on (x, *values) with `attrs`
    (float64, random x at several scales), or None. Where the graph leaves the
    batch open, the scales are one batch: the region and the reference each run
    once (a convolution's float64 check, most of fusing a detector, costs a
    third), and every element is still judged by itself."""
    shape = tuple(pattern.probe(region)) if pattern.probe else \
        tuple(2 if i == 0 and d is None else (3 if d is None else d) for i, d in enumerate(region.x_shape))
    rng = np.random.default_rng(0)
    probes = [offset + scale * rng.standard_normal(shape) for scale, offset in SCALES]
    if region.x_shape and region.x_shape[0] is None and len(shape) > 0:
        probes = [np.concatenate(probes, axis=0)]
    worst = 0.0
    for x in probes:
        gots = region.evaluate(x, at=region.outputs)
        wants = spec.reference(x, *values, **attrs)
        wants = wants if isinstance(wants, tuple) else (wants,)
        for arg, got, want in zip(spec.outputs, gots, wants):
            got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
            what = f"the subgraph's {arg.name}" if len(spec.outputs) > 1 else "the subgraph's output"
            if got.shape != want.shape:
                return f"{what} has shape {list(got.shape)} where {spec.name} gives {list(want.shape)}"
            if not np.isfinite(want).all() or not np.isfinite(got).all():
                return f"not finite on the check's inputs (the subgraph or {spec.name} on the identified weights)"
            if got.size:
                worst = max(worst, float(np.max(np.abs(got - want) / np.maximum(1.0, np.abs(want)))))
    if worst > (pattern.tolerance or TOLERANCE):
        return (f"computes something else than {spec.name} on the weights read from it: off by {worst:.3g} "
                f"(relative) on random inputs")
    return None


def _no_kernel(spec) -> Optional[str]:
    from tensorflow.python.framework import op_def_registry
    if op_def_registry.get(spec.name) is None:
        from bridge import tf_ops  # bridge's own ops register when the library loads
        if _specs.is_builtin(spec):
            tf_ops.load()
        if op_def_registry.get(spec.name) is None:
            return (f"{spec.name}: no TensorFlow kernel is loaded for it: give its library (--op-library LIB, or "
                    f"bridge.tf_ops.load_op_library); the subgraph stays as it is")
    return None


# -- rewriting ---------------------------------------------------------------------
def rewrite(gm: GraphModel, index: GraphIndex, plans):
    """A copy of the graph with each planned region one node of its op."""
    import tensorflow as tf
    from tensorflow.core.framework import graph_pb2
    gone, ends = set(), {}
    for plan in plans:
        region = plan[2]
        gone |= region.names
        ends[producer(region.outputs[0])] = plan   # the end, or the node of an op's first output
    out = graph_pb2.GraphDef()
    out.versions.CopyFrom(gm.graph_def.versions)
    out.library.CopyFrom(gm.graph_def.library)
    used = {n.name for n in gm.graph_def.node}
    for node in gm.graph_def.node:
        if node.name in ends:
            spec, pattern, region, values, attrs = ends[node.name]
            dtype = np.dtype(region.dtype)
            names = []
            for arg, value in zip(spec.inputs[1:], values):
                cname = fresh_name(f"{node.name}/{arg.name}", used)
                c = out.node.add()
                c.name, c.op = cname, "Const"
                c.attr["dtype"].type = tf.as_dtype(dtype).as_datatype_enum
                c.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(np.asarray(value, dtype)))
                names.append(cname)
            f = out.node.add()
            f.name, f.op = node.name, spec.name
            f.input.extend([region.x] + names + sorted({f"^{c}" for n in region.nodes for c in n.control
                                                        if c not in region.names}))
            if node.device:
                f.device = node.device
            f.attr["T"].type = tf.as_dtype(dtype).as_datatype_enum
            for a in spec.attrs:
                _set_attr(f.attr[a.name], a, attrs[a.name])
            # the op's other outputs keep the names of the nodes that computed them
            for k, t in enumerate(region.outputs[1:], 1):
                i = out.node.add()
                i.name, i.op = producer(t), "Identity"
                i.input.append(f"{node.name}:{k}")
                i.attr["T"].type = f.attr["T"].type
        elif node.name not in gone:
            out.node.add().CopyFrom(node)
    return _pruned(out, [t for t, _ in gm.outputs], [t for t, _, _, _ in gm.inputs])


def _set_attr(value, attr, v) -> None:
    if attr.type == "float":
        value.f = float(v)
    elif attr.type == "int":
        value.i = int(v)
    elif attr.type == "string":
        value.s = str(v).encode()
    elif attr.type == "list(int)":
        value.list.i.extend(int(i) for i in v)
        value.list.SetInParent()
    elif attr.type == "list(float)":
        value.list.f.extend(float(i) for i in v)
        value.list.SetInParent()


def _pruned(graph_def, outputs, inputs):
    """Only the nodes the outputs need (the inputs' placeholders kept)."""
    from tensorflow.core.framework import graph_pb2
    nodes = {n.name: n for n in graph_def.node}
    keep, stack = set(), [producer(t) for t in list(outputs) + list(inputs)]
    while stack:
        name = stack.pop()
        if name in keep or name not in nodes:
            continue
        keep.add(name)
        stack.extend(producer(i) for i in nodes[name].input)
    out = graph_pb2.GraphDef()
    out.versions.CopyFrom(graph_def.versions)
    out.library.CopyFrom(graph_def.library)
    for n in graph_def.node:
        if n.name in keep:
            out.node.add().CopyFrom(n)
    return out


__all__ = ["fuse_graph", "verify", "rewrite", "ref"]
