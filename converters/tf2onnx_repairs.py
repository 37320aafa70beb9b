"""What bridge repairs in the ONNX graph tf2onnx 1.17 writes, before any check.

- `split_extra_conv_bias`: Keras 3's TF backend turns `add(x, y)` into
  `tf.nn.bias_add(x, squeeze(y))` when y squeezes to one channel vector (a
  residual Add at 1x1 spatial size with a static batch of 1: ResNet50V2's
  conv5 blocks at 32x32). When x is a Conv2D with its own bias, that is
  Conv2D -> BiasAdd -> BiasAdd, and tf2onnx's conv/bias rewriter folds both
  into the Conv: a Conv node with 4 inputs, which no runtime loads. The fourth
  input becomes an Add after the Conv again, broadcast over the channels.
- `scalar_one_hot_depth`: tf2onnx gives OneHot its depth as a one-element 1-D
  tensor. ONNX allows that, but onnx's reference evaluator (onnx 1.23 under
  numpy 2) calls np.arange on it and fails ("only 0-dimensional arrays can be
  converted to Python scalars"): every mixture-of-experts router (Mixtral,
  Qwen-MoE, GPT-OSS) failed parity there. The depth becomes a scalar, which
  every runtime takes.
"""
from __future__ import annotations

from typing import Set

import numpy as np


def split_extra_conv_bias(model) -> int:
    """Rewrites, in place, every Conv with more than 3 inputs into the Conv with
    its own bias plus one Add per further per-channel bias; returns how many
    Conv nodes it rewrote."""
    from onnx import helper, numpy_helper
    graph = model.graph
    taken = _names(graph)
    shapes = {}   # spatial rank -> name of the (C, 1, ..., 1) shape constant
    rewritten = 0
    nodes = []
    for node in graph.node:
        if node.op_type != "Conv" or node.domain not in ("", "ai.onnx") or len(node.input) <= 3:
            nodes.append(node)
            continue
        extra = list(node.input[3:])
        del node.input[3:]
        final = node.output[0]
        current = fresh_name(f"{final}/conv", taken)
        node.output[0] = current
        nodes.append(node)
        spatial = _spatial_rank(graph, node)
        if spatial not in shapes:  # (C, 1, 1) broadcasts a channel vector against NCHW
            shapes[spatial] = fresh_name("bridge_channel_bias_shape", taken)
            graph.initializer.append(numpy_helper.from_array(np.array([-1] + [1] * spatial, np.int64),
                                                             shapes[spatial]))
        shape_name = shapes[spatial]
        for i, bias in enumerate(extra):
            column = fresh_name(f"{final}/bias{i + 1}", taken)
            out = final if i == len(extra) - 1 else fresh_name(f"{final}/sum{i + 1}", taken)
            nodes.append(helper.make_node("Reshape", [bias, shape_name], [column], name=column))
            nodes.append(helper.make_node("Add", [current, column], [out], name=out))
            current = out
        rewritten += 1
    if rewritten:
        del graph.node[:]
        graph.node.extend(nodes)
    return rewritten


def scalar_one_hot_depth(model) -> int:
    """Gives, in place, every OneHot a scalar depth: a one-element initializer
    becomes a scalar initializer of the same value, any other depth is reshaped
    to a scalar before it; returns how many OneHot nodes it changed."""
    from onnx import helper, numpy_helper
    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    producers = {o: n for n in graph.node for o in n.output}
    taken = _names(graph)
    scalars = {}   # 1-D depth name -> its scalar's name
    scalar_shape = None
    changed = 0
    nodes = []
    for node in graph.node:
        if node.op_type != "OneHot" or node.domain not in ("", "ai.onnx") or len(node.input) < 2:
            nodes.append(node)
            continue
        depth = node.input[1]
        init = inits.get(depth)
        made = producers.get(depth)
        reshaped = made is not None and made.op_type == "Reshape" and len(made.input) == 2 and \
            made.input[1] in inits and list(inits[made.input[1]].dims) == [0]
        if reshaped or init is not None and (len(init.dims) == 0 or int(np.prod(init.dims)) != 1):
            nodes.append(node)  # already a scalar, or no valid depth at all (the checker names it)
            continue
        if depth not in scalars:
            scalars[depth] = fresh_name(f"{depth}/scalar", taken)
            if init is not None:
                graph.initializer.append(numpy_helper.from_array(numpy_helper.to_array(init).reshape(()),
                                                                 scalars[depth]))
            else:
                if scalar_shape is None:  # the shape [] that Reshape makes a scalar with
                    scalar_shape = fresh_name("bridge_scalar_shape", taken)
                    graph.initializer.append(numpy_helper.from_array(np.zeros(0, np.int64), scalar_shape))
                nodes.append(helper.make_node("Reshape", [depth, scalar_shape], [scalars[depth]],
                                              name=scalars[depth]))
        node.input[1] = scalars[depth]
        nodes.append(node)
        changed += 1
    if changed:
        del graph.node[:]
        graph.node.extend(nodes)
    return changed


def _spatial_rank(graph, conv) -> int:
    kernel = next((i for i in graph.initializer if i.name == conv.input[1]), None)
    if kernel is not None:
        return len(kernel.dims) - 2
    shape = next((a.ints for a in conv.attribute if a.name == "kernel_shape"), None)
    return len(shape) if shape else 2


def _names(graph) -> Set[str]:
    names = {i.name for i in graph.initializer} | {i.name for i in graph.input}
    for n in graph.node:
        names.update(n.output)
        names.add(n.name)
    return names


def fresh_name(base: str, taken: Set[str]) -> str:
    """`base`, or `base_2`, `base_3`, ... : the first not in `taken`, which it joins."""
    name, k = base, 1
    while name in taken:
        k += 1
        name = f"{base}_{k}"
    taken.add(name)
    return name
