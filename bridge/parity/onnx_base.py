"""What every ONNX-executing adapter shares: which model, feeding inputs by name,
running it on onnxruntime, and per-layer reads (the mapped tensors added as
graph outputs, one execution).

An adapter subclasses `OnnxRuntime` and says what differs: `model_key` (the
source's ONNX form it runs: "onnx-custom" runs `source.onnx_custom()`) and
`kernels` (bridge's kernel library or none); or it overrides `onnx_model(source)`
and `executor(model) -> callable(feeds, output_names) -> list of arrays`.
"""
from __future__ import annotations

import os
import zlib
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from bridge.parity import onnx_graph
from bridge.parity.runtime import Arrays, Runtime, Unavailable

Executor = Callable[[Dict[str, np.ndarray], List[str]], List[np.ndarray]]


class OnnxRuntime(Runtime):
    kinds = ("keras", "savedmodel", "onnx")
    # The source's memo key of `onnx_model`'s result. With it, the model goes to
    # the executor as a file, written once per run and shared by every runtime
    # that runs the same model (no re-serialising 250 MB per session); without,
    # as the ModelProto.
    model_key: str = ""
    # The session: through bridge.onnx_plugins with "all" its native kernels or
    # "none" (schemas only: onnxruntime inlines the model-local functions);
    # None: plain onnxruntime, nothing of bridge's.
    kernels: Optional[str] = None

    def onnx_model(self, source):
        """The source's ONNX form named by `model_key` ("onnx-ge": source.onnx_ge())."""
        return getattr(source, self.model_key.replace("-", "_"))()

    def executor(self, model) -> Executor:
        """`model`: a file path when `model_key` is set, else a ModelProto."""
        if self.kernels is not None:
            return ort_executor(plugin_session(model, self.kernels))
        try:
            import onnxruntime
        except ImportError as e:
            raise Unavailable(f"onnxruntime is not installed ({e})") from None
        return ort_executor(onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"]))

    def prepare(self, source) -> None:
        super().prepare(source)
        self.model = self.onnx_model(source)
        self._run = None
        self._map = None
        if not getattr(source, "per_layer", False):
            self._run = self.executor(self._plain())
        # per layer, the one session is made with the layer outputs marked (run_with_intermediates)

    def attach(self, source, model, path=None) -> None:
        """This row on a given ONNX model (`path`: its file, external data beside
        it), not the source's export: how `bridge export` verifies what it
        wrote (bridge.parity.verify). `source` needs only `output_names`."""
        Runtime.prepare(self, source)
        self.model = model
        self._map = None
        given = model if self.kernels is not None else model.SerializeToString()  # plain onnxruntime: bytes
        self._run = self.executor(path if path is not None else given)

    def _plain(self):
        return self.source.onnx_path(self.model_key, self.model) if self.model_key else self.model

    def _marked(self, tensors: Sequence[str]):
        """The model with `tensors` as extra outputs: a file shared by the runtimes
        of the same model (the original ModelProto is left as it was), or a copy."""
        if not self.model_key:
            return onnx_graph.with_outputs(self.model, tensors)
        key = f"{self.model_key}-layers-{zlib.crc32(chr(0).join(tensors).encode()):08x}"

        def write():
            path = os.path.join(self.source.workdir, f"{key}.onnx")
            onnx_graph.save_with_outputs(self.model, tensors, path)
            return path
        return self.source.cached(f"path:{key}", write, f"writing {self.model_key}.onnx with {len(tensors)} layer outputs")

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

    def _as_model_outputs(self, own: Mapping[str, np.ndarray], order: Sequence[str]) -> Arrays:
        """outputs_by_name, after the export's renames are undone (an output named like
        an input is NAME_output in the file: export_onnx.RENAMED_OUTPUTS)."""
        renamed = export_names(self.model)
        return self.outputs_by_name({renamed.get(k, k): v for k, v in own.items()},
                                    order=[renamed.get(k, k) for k in order])

    def run(self, inputs: Mapping[str, np.ndarray]) -> Arrays:
        if self._run is None:
            self._run = self.executor(self._plain())
        names = self._outputs()
        arrays = self._run(self.feeds(inputs), names)
        return self._as_model_outputs(dict(zip(names, arrays)), names)

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
        if not tensors:
            return self.run(inputs), {}
        outs = self._outputs()
        run = self.executor(self._marked(tensors))
        wanted = outs + [t for t in tensors if t not in outs]
        arrays = dict(zip(wanted, run(self.feeds(inputs), wanted)))
        outputs = self._as_model_outputs({o: arrays[o] for o in outs}, outs)
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


def fused_blocks(source) -> Dict[str, Tuple[str, List[str]]]:
    """{the unfused layer a fused layer's output stands for: (the fused layer's
    name, every original layer it replaced, in order)}, for fused layers that
    replaced more than one (the map from a fused op back to its source layers,
    as msit keeps)."""
    def build():
        try:
            fused, _ = source.fused_model()
        except Exception:
            return {}
        names = {l.name for l in source.keras_model().layers}
        out = {}
        for layer in fused.layers:
            src = getattr(layer, "replaces", None)
            if isinstance(src, (list, tuple)) and len(src) > 1 and src[-1] in names:
                out[src[-1]] = (layer.name, [str(n) for n in src])
        return out
    return source.cached("fused-blocks", build)


def plugin_session(model, kernels):
    """An onnxruntime session through bridge.onnx_plugins (schemas, library);
    `model`: a ModelProto or a file."""
    try:
        from bridge import onnx_plugins
        make = onnx_plugins.session
    except (ImportError, AttributeError) as e:
        raise Unavailable(f"bridge.onnx_plugins.session is not available ({e})") from None
    from bridge.native import BuildError
    try:
        return make(model, kernels=kernels)
    except BuildError as e:  # no compiler / headers here: say so in the table
        raise Unavailable(f"the onnxruntime kernel library does not build here: {str(e).splitlines()[0]}") from None


def ort_executor(session) -> Executor:
    def run(feeds, names):
        return session.run(list(names), feeds)
    return run


def export_names(model) -> Dict[str, str]:
    """{output name in an export: the model's} for the outputs bridge's export renamed."""
    from bridge.converters.export_onnx import model_output_names
    return model_output_names(model)
