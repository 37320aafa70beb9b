"""`tflite-custom`: the `--mode custom` TFLite export (the fused ops as CUSTOM
nodes) on LiteRT's CompiledModel (CPU) with bridge's LiteRT kernels
(litert/): the only runtime here that checks that road numerically. On by
default; Unavailable (with the reason) where the kernels do not build or pass
their self-test. The export is shared with the other TFLite runtimes
(`tflite.exported`), converted at the run's input shapes: LiteRT's
CompiledModel gives no output size that follows a resized input through
shape-computing ops (a keras_hub BERT whose sequence length is left open), so
bridge.litert.runtime refuses such a resized run (shape_guard) rather than
letting it write past its buffers. No per-layer mode: the CompiledModel exposes signature
outputs only."""
from __future__ import annotations

from typing import Dict, Mapping

import numpy as np

from bridge.parity.runtime import Runtime, Unavailable
from bridge.parity.runtimes.tflite import cache_note, exported, graph_fused_note


class TFLiteCustom(Runtime):
    name = "tflite-custom"
    description = "custom-mode TFLite export (fused ops as custom ops) on LiteRT with bridge's kernels"
    order = 63
    kinds = ("keras", "savedmodel")

    def prepare(self, source):
        super().prepare(source)
        from bridge import native
        try:
            from bridge.litert import runtime
            runtime.library()
        except native.BuildError as e:
            raise Unavailable(f"bridge's LiteRT kernels: {str(e).splitlines()[0]}") from None
        data = exported(source, "custom", "none", static=True)
        if source.kind == "savedmodel":
            self.description = f"{self.description}; {graph_fused_note(source)}"
        note = cache_note(source, "custom", "none", static=True)
        if note:
            self.description = f"{self.description}; {note}"
        from bridge.tflite_inspect import inspect_tflite
        served = {op for op, why in runtime.served_ops().items() if why is None}
        unserved = sorted(set(inspect_tflite(data).custom_codes) - served)
        if unserved:  # e.g. a team's op: LiteRT would refuse the model at prepare
            from bridge.litert.team_libraries import FLAG
            raise Unavailable(f"bridge's LiteRT kernels have no {', '.join(unserved)} (a team's op: {FLAG} DIR)")
        self._load(data)

    def attach(self, source, data: bytes, path=None) -> None:
        """This row on a given custom-mode TFLite file (bridge.parity.verify)."""
        Runtime.prepare(self, source)
        self._load(data)

    def _load(self, data: bytes) -> None:
        from bridge.litert import runtime
        try:
            self.model = runtime.Model(data, custom=True)
        except runtime.LiteRTError as e:
            raise Unavailable(f"LiteRT could not compile the custom-mode export: {e}") from None

    def run(self, inputs: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
        return self.outputs_by_name(self.model.run(inputs), self.model.outputs)


RUNTIME = TFLiteCustom
