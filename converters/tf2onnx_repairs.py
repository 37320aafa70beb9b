"""What bridge repairs in the ONNX graph tf2onnx 1.17 writes, before any check.

- `split_extra_conv_bias`: Keras 3's TF backend turns `add(x, y)` into
  `tf.nn.bias_add(x, squeeze(y))` when y squeezes to one channel vector (a
  residual Add at 1x1 spatial size with a static batch of 1: ResNet50V2's
  conv5 blocks at 32x32). When x is a Conv2D with its own bias, that is
  Conv2D -> BiasAdd -> BiasAdd, and tf2onnx's conv/bias rewriter folds both
  into the Conv: a Conv node with 4 inputs, which no runtime loads. The fourth
  input becomes an Add after the Conv again, broadcast over the channels.
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
        current = _fresh(f"{final}/conv", taken)
        node.output[0] = current
        nodes.append(node)
        spatial = _spatial_rank(graph, node)
        if spatial not in shapes:  # (C, 1, 1) broadcasts a channel vector against NCHW
            shapes[spatial] = _fresh("bridge_channel_bias_shape", taken)
            graph.initializer.append(numpy_helper.from_array(np.array([-1] + [1] * spatial, np.int64),
                                                             shapes[spatial]))
        shape_name = shapes[spatial]
        for i, bias in enumerate(extra):
            column = _fresh(f"{final}/bias{i + 1}", taken)
            out = final if i == len(extra) - 1 else _fresh(f"{final}/sum{i + 1}", taken)
            nodes.append(helper.make_node("Reshape", [bias, shape_name], [column], name=column))
            nodes.append(helper.make_node("Add", [current, column], [out], name=out))
            current = out
        rewritten += 1
    if rewritten:
        del graph.node[:]
        graph.node.extend(nodes)
    return rewritten


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


def _fresh(base: str, taken: Set[str]) -> str:
    name, k = base, 1
    while name in taken:
        k += 1
        name = f"{base}_{k}"
    taken.add(name)
    return name
