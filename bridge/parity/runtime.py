"""The runtime adapter interface of `bridge parity`. One adapter per file in
bridge/parity/runtimes/; adding a runtime means adding one file there.

    from bridge.parity.runtime import Runtime, Unavailable

    class TFLite(Runtime):
        name = "tflite"                        # the key users pass to --runtimes
        description = "TFLite (lowered export) on ai_edge_litert"
        order = 60                             # column order in the table (tf is 0)

        def prepare(self, source):             # raise Unavailable("why") if it cannot run here
            self.interp = ...(source.tflite(mode="lowered"))  # or build from source.keras_model()

        def run(self, inputs):                 # {input name: ndarray} -> {output name: ndarray}
            ...
            return self.outputs_by_position(list_of_arrays)   # or a dict keyed by source.output_names

    RUNTIME = TFLite                           # what discovery picks up

Contract:
- `prepare(source)` is called once per parity run, before any `run`. It raises
  `Unavailable(reason)` when the runtime cannot run this model here (library
  missing, model kind not supported, export failed); the table shows the reason
  instead of failing the whole run. Any other exception is reported as an error
  in that runtime's row, also without stopping the others.
- `source` is a `bridge.parity.source.ModelSource`: the MODEL argument resolved
  (`kind` is "keras", "savedmodel" or "onnx"), its `inputs` (TensorInfo name/shape/
  dtype), `output_names` (canonical, taken from the reference), and memoised
  artefacts shared by all runtimes of one run: `keras_model()`, `fused_model()`,
  `onnx_custom()` (the com.bridge export, ModelProto), `onnx_path(key, model)`,
  `cached(key, build_fn)` for anything else (e.g. a TFLite file). Export once,
  share through `cached`.
- `run(inputs)` gets every model input by name (numpy, the model's dtypes) and
  returns every output keyed by `source.output_names` (use `outputs_by_position`
  or `outputs_by_name` to map the runtime's own names).
- Per-layer mode (optional): `layer_names()` lists the canonical intermediate
  names this runtime can expose (`source.layer_order()` gives the canonical ones:
  Keras layer names of the unfused model, or ONNX tensor names for an .onnx
  MODEL), and `run_with_intermediates(inputs, names)` returns
  `(outputs, {name: ndarray})` from ONE execution with all names marked. The
  default exposes nothing, so an adapter without it simply has no per-layer row.
- `reference_for` lists the MODEL kinds for which this runtime is the judge
  (`tf` for TF models, `onnx-reference` for an .onnx MODEL); every other
  runtime is compared against the judge.
- `tolerance` (optional): (atol, rtol) for every float output, or {dtype name:
  (atol, rtol)}, replacing the default comparison bounds for this runtime only, for runtimes that lose precision by
  design (float16 or int8 quantised exports); state the bound in the
  description. --atol/--rtol given by the user still win.
- `kinds` lists the MODEL kinds the adapter accepts; others are skipped silently
  (e.g. `tf` does not appear at all for an .onnx MODEL).
- `default = False` makes the runtime opt-in: a plain run leaves it out, and it
  runs only when named in --runtimes (e.g. the quantised TFLite variants: one
  more conversion each).
- `output_layout(source)` (optional): the canonical output names in the order
  this runtime's own output files come, plus {own output name: canonical name};
  `--load-outputs NAME=F` uses it to read outputs produced elsewhere for the
  runtime NAME (e.g. msame's `.bin` files in the GE model's output order). The
  default is the canonical order and no aliases.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from bridge.parity.unavailable import Unavailable  # re-exported: adapters import it from here

if TYPE_CHECKING:  # pragma: no cover
    from bridge.parity.source import ModelSource

Arrays = Dict[str, np.ndarray]


class Runtime:
    name: str = ""
    description: str = ""
    order: int = 100
    reference_for: Tuple[str, ...] = ()
    tolerance: object = None   # (atol, rtol) or {dtype name: (atol, rtol)}
    kinds: Tuple[str, ...] = ("keras", "savedmodel", "onnx")
    default: bool = True        # False: only when named in --runtimes

    def __init__(self) -> None:
        self.source: Optional["ModelSource"] = None

    # -- the contract ------------------------------------------------------
    def prepare(self, source: "ModelSource") -> None:
        self.source = source

    def run(self, inputs: Mapping[str, np.ndarray]) -> Arrays:
        raise NotImplementedError

    def layer_names(self) -> List[str]:
        """Canonical intermediate names this runtime can expose (after prepare)."""
        return []

    def run_with_intermediates(self, inputs: Mapping[str, np.ndarray],
                               names: Sequence[str]) -> Tuple[Arrays, Arrays]:
        return self.run(inputs), {}

    def output_layout(self, source: "ModelSource") -> Tuple[List[str], Dict[str, str]]:
        """(canonical output names in this runtime's output order, {own output
        name: canonical name}) for outputs of this runtime produced elsewhere."""
        return list(source.output_names), {}

    # -- helpers for adapters ----------------------------------------------
    def outputs_by_position(self, arrays: Sequence[np.ndarray]) -> Arrays:
        names = self.source.output_names
        arrays = list(arrays)
        if len(arrays) != len(names):
            raise RuntimeError(f"{self.name} produced {len(arrays)} outputs, the reference has {len(names)} "
                               f"({', '.join(names)})")
        return {n: np.asarray(a) for n, a in zip(names, arrays)}

    def outputs_by_name(self, own: Mapping[str, np.ndarray], order: Optional[Iterable[str]] = None) -> Arrays:
        """Maps the runtime's own output names to the canonical ones: exact name
        first, then a name that matches after dropping ':0' / path prefixes, then
        by position (`order` gives the runtime's output order)."""
        own = dict(own)
        order = list(order) if order is not None else list(own)
        mapping = canonical_names(order, self.source.output_names)
        if mapping is None:
            return self.outputs_by_position([own[k] for k in order])
        return {c: np.asarray(own[o]) for o, c in mapping.items()}


def canonical_names(own: Sequence[str], canonical: Sequence[str]) -> Optional[Dict[str, str]]:
    """{own output name: canonical name} by exact name, else by the name without
    ':0' and scope prefixes; None when neither covers every canonical output
    (then outputs pair up by position)."""
    own = list(own)
    if set(canonical) <= set(own):
        return {n: n for n in canonical}
    simple = {_simple(k): k for k in own}
    if len(simple) == len(own) and all(_simple(n) in simple for n in canonical):
        return {simple[_simple(n)]: n for n in canonical}
    return None


def _simple(name: str) -> str:
    name = name.split(":")[0]
    return name.rsplit("/", 1)[-1]
