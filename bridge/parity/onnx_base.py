"""What every ONNX-executing adapter shares: which model, feeding inputs by name,
and per-layer reads (the mapped tensors added as graph outputs, one execution).

An adapter subclasses `OnnxRuntime` and supplies `onnx_model(source)` and
`executor(model) -> callable(feeds, output_names) -> list of arrays`.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Mapping, Sequence, Tuple

import numpy as np

from bridge.parity import onnx_graph
from bridge.parity.runtime import Arrays, Runtime

Executor = Callable[[Dict[str, np.ndarray], List[str]], List[np.ndarray]]


class OnnxRuntime(Runtime):
    kinds = ("keras", "savedmodel", "onnx")

    def onnx_model(self, source):  # pragma: no cover - abstract
        raise NotImplementedError

    def executor(self, model) -> Executor:  # pragma: no cover - abstract
        raise NotImplementedError

    def prepare(self, source) -> None:
        super().prepare(source)
        self.model = self.onnx_model(source)
        self._run = self.executor(self.model)
        self._map = None

    # -- inputs and outputs --------------------------------------------------
    def feeds(self, inputs: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
        init = {i.name for i in self.model.graph.initializer}
        names = [i.name for i in self.model.graph.input if i.name not in init]
        given = list(inputs)
        if set(names) <= set(given):
            return {n: inputs[n] for n in names}
        simple = {g.split(":")[0]: g for g in given}
        if all(n.split(":")[0] in simple for n in names):
            return {n: inputs[simple[n.split(":")[0]]] for n in names}
        if len(names) == len(given):
            return {n: inputs[g] for n, g in zip(names, given)}
        raise RuntimeError(f"{self.name}: the ONNX model's inputs {names} do not match the model's {given}")

    def _outputs(self) -> List[str]:
        return [o.name for o in self.model.graph.output]

    def run(self, inputs: Mapping[str, np.ndarray]) -> Arrays:
        names = self._outputs()
        arrays = self._run(self.feeds(inputs), names)
        return self.outputs_by_name(dict(zip(names, arrays)), order=names)

    # -- per layer -------------------------------------------------------------
    def layer_map(self) -> Dict[str, List[str]]:
        if self._map is None:
            src = self.source
            if src.kind == "onnx":
                produced = {o for n in self.model.graph.node for o in n.output}
                self._map = {t: [t] for t in src.layer_order() if t in produced}
            elif src.kind == "keras":
                self._map = onnx_graph.layer_tensors(self.model, src.layer_order(), layer_aliases(src))
            else:
                self._map = {}
        return self._map

    def layer_names(self) -> List[str]:
        return list(self.layer_map())

    def run_with_intermediates(self, inputs, names: Sequence[str]) -> Tuple[Arrays, Arrays]:
        mapping = self.layer_map()
        tensors = list(dict.fromkeys(t for n in names for t in mapping.get(n, [])))
        outs = self._outputs()
        marked = onnx_graph.with_outputs(self.model, tensors)
        run = self.executor(marked)
        wanted = outs + [t for t in tensors if t not in outs]
        arrays = dict(zip(wanted, run(self.feeds(inputs), wanted)))
        outputs = self.outputs_by_name({o: arrays[o] for o in outs}, order=outs)
        producer = {o: node.name for node in self.model.graph.node for o in node.output}
        layers = {n: onnx_graph.Candidates.of([arrays[t] for t in mapping[n]], mapping[n],
                                              [producer.get(t, "") for t in mapping[n]])
                  for n in names if n in mapping}
        return outputs, layers


def layer_aliases(source) -> Dict[str, str]:
    """Fused layer name -> the unfused layer whose output it reproduces (the last
    layer of the block it replaced), from the fusion report when it says so."""
    def build():
        try:
            fused, report = source.fused_model()
        except Exception:
            return {}
        return fused_aliases(fused, report, source.keras_model())
    return source.cached("layer-aliases", build)


def fused_aliases(fused, report, original) -> Dict[str, str]:
    names = {l.name for l in original.layers}
    out = {}
    mapping = getattr(report, "replaced", None) or getattr(report, "layer_map", None)
    if callable(mapping):
        mapping = mapping()
    if isinstance(mapping, dict):
        for new, old in mapping.items():
            last = old[-1] if isinstance(old, (list, tuple)) else old
            if last in names:
                out[new] = last
    for layer in fused.layers:
        # bridge.converters' fused layers record the original layers they stand for, in order
        src = getattr(layer, "replaces", None) or getattr(layer, "source_layers", None)
        if src:
            last = src[-1] if isinstance(src, (list, tuple)) else src
            if last in names:
                out[layer.name] = last
    return out


def ort_executor(session) -> Executor:
    def run(feeds, names):
        return session.run(list(names), feeds)
    return run
