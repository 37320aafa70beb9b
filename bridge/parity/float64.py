"""The float64 twin of a Keras model: its config with every float dtype
policy made float64, the weights copied, checked to be the model (the copy
made the same way at float32 must give the model's answer). A deep model can
amplify float32 rounding past the tolerance; TF float32 is then no better an
answer than the runtime it judges, and only a more precise run can tell
rounding from a bug: bridge.parity.truth judges every runtime against this
twin's answer, and `bridge export`'s check asks it about the outputs that fail.

Only Keras models (a SavedModel's graph is fixed at float32), and only when
every layer of the copy computes in float64; otherwise NoFloat64 says why
there is no float64 verdict.
"""
from __future__ import annotations

from typing import Dict, Mapping, Optional, Sequence

import numpy as np

from bridge.parity import compare as cmp
# the rebuild at another precision is the exporters' too (they sit below parity)
from bridge.precision import NoFloat64, keras_float32, keras_float64  # noqa: F401

NAME = "tf-float64"


def no_verdict(e: BaseException) -> str:
    """Why a float64 run gave no verdict, in one line: NoFloat64's own words, or
    the error that ended the run."""
    if isinstance(e, NoFloat64):
        return str(e)
    return f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"


def float64_outputs(source, arrays: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """The float64 answer of a parity source's Keras model (NoFloat64 for other kinds)."""
    if source.kind != "keras":
        raise NoFloat64(f"a {source.kind} model has no float64 twin (Keras models only)")
    return twin_outputs(source.keras_model(), source.output_names, arrays)


def twin_outputs(model, output_names: Sequence[str], arrays: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """{output: float64 answer} of the Keras `model` on `arrays`; NoFloat64 when
    it has no trustworthy float64 twin."""
    from bridge.parity.tf_common import run_keras
    out = run_keras(checked_twin(model, output_names, arrays), output_names, wide(arrays))
    return checked_outputs(out, output_names)


def checked_twin(model, output_names: Sequence[str], arrays: Mapping[str, np.ndarray],
                 mine: Optional[Mapping[str, np.ndarray]] = None):
    """`model`'s float64 twin (keras_float64), once its copy made the same way
    at float32 gives the model's own answer on `arrays` (`mine`, when the caller
    has it): else it is not the model (a config that does not rebuild what
    runs), and a distance from it would excuse anything."""
    from bridge.parity.tf_common import run_keras
    same = run_keras(keras_float64(model, "float32"), output_names, dict(arrays))
    mine = mine if mine is not None else run_keras(model, output_names, dict(arrays))
    for k in output_names:
        a, b = np.asarray(same.get(k)), np.asarray(mine.get(k))
        if a.shape != b.shape or (a.dtype.kind == "f" and not cmp.compare(b, a, cmp.Tolerance(1e-5)).passed):
            raise NoFloat64(f"its copy rebuilt from the config does not compute what the model does (output {k!r})")
    return keras_float64(model)


def wide(arrays: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """The inputs of a float64 run: float inputs widened, ids as they are."""
    return {k: v.astype(np.float64) if v.dtype.kind == "f" else v for k, v in arrays.items()}


def checked_outputs(out: Mapping[str, np.ndarray], output_names: Sequence[str]) -> Dict[str, np.ndarray]:
    """A float64 run's outputs, or NoFloat64 when one is missing or NaN."""
    missing = [k for k in output_names if k not in out]
    if missing:
        raise NoFloat64(f"the float64 run has no output {missing[0]!r}")
    nan = [k for k in output_names if np.asarray(out[k]).dtype.kind == "f" and np.isnan(out[k]).any()]
    if nan:
        raise NoFloat64(f"the float64 run produced NaN in {nan[0]!r}")
    return {k: np.asarray(out[k]) for k in output_names}
