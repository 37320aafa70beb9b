"""What a road cannot take as a model has it, and the nearest model it can
take, each said in one line by whoever converts (`bridge export`, the parity
rows of that road):

- float16 compute (a `mixed_float16` Keras model) on TFLite: its float kernels
  are float32 (its float16 is a storage format: `--quantize float16` weights,
  dequantised at load), so the converter refuses a float16 Conv2D/MatMul/
  BiasAdd ("'tf.BiasAdd' op is neither a custom op nor a flex op"). On GE's
  built-in route: the plugins' expansion is float32 only (its constants are
  DT_FLOAT), and ATC lowers precision itself (--precision_mode). The model is
  converted rebuilt with every layer in float32, the same weights
  (bridge.precision.keras_float32); it is still judged by the bounds of
  the precision the model computes in (bridge.precision).
- a recurrent layer (LSTM/GRU/SimpleRNN, Bidirectional) on TFLite: TF traces
  its loop with tensor lists, which the converter lowers to builtins (WHILE)
  only when the shapes are static ("Lowering tensor list ops is failed" at an
  open batch). The model is then converted at the sample shapes. Keras 3's
  layers carry no `api_implements` mark, so the converter's fused
  UNIDIRECTIONAL_SEQUENCE_LSTM/RNN rewrite does not apply to them; the WHILE
  loop is what TFLite runs.
- an op TFLite has as a builtin only at known shapes (a StridedSlice with a
  new axis, `x[..., None, :]`, over an open length: "'tf.StridedSlice' op is
  neither a custom op nor a flex op"): converted at the sample shapes too,
  which the converter folds; the line names the ops that needed it.

Cheap to import (no TensorFlow).
"""
from __future__ import annotations

from typing import Mapping, Sequence, Tuple

TENSOR_LIST_OPS = ("TensorListReserve", "TensorListFromTensor", "TensorListStack", "TensorListSetItem",
                   "TensorListGetItem")


# why each road takes a model computing below float32 rebuilt in float32
FLOAT32_WHY = {
    "tflite": "TFLite computes in float32 (its float16 is weight storage only, --quantize float16)",
    "ge": ("GE's built-in expansion is float32 only (ATC lowers precision itself: pass "
           "--precision_mode=allow_mix_precision to atc.sh)"),
}


def float32_model(model, road: str = "tflite") -> Tuple[object, str]:
    """(a model `road` can run, the line that says what changed): a Keras model
    with layers computing below float32 rebuilt in float32, same weights; the
    model itself and "" where there is nothing to change. ValueError (one line)
    when the model does not rebuild."""
    from bridge import precision
    if not hasattr(model, "get_config") or not hasattr(model, "_flatten_layers"):
        return model, ""
    low = precision.policies(model)
    if not low:
        return model, ""
    from bridge.precision import NoFloat64, keras_float32
    why = FLOAT32_WHY[road]
    try:
        twin = keras_float32(model)
    except NoFloat64 as e:
        raise ValueError(f"{why}, and the model's {', '.join(low)} layers do not rebuild in float32: {e}") from None
    return twin, f"{why}: the {', '.join(low)} layers were converted rebuilt in float32, same weights"


def is_tensor_list_failure(error) -> bool:
    """Whether a TFLiteExportError is the converter failing to lower tensor lists
    (a recurrent layer's loop traced at open dims)."""
    ops = set(getattr(error, "ops", ()) or ())
    return bool(ops & set(TENSOR_LIST_OPS)) or "tensor list" in str(error).lower()


def is_flex_failure(error) -> bool:
    """Whether a conversion failed on ops TFLite has no builtin for as traced
    (at open dims some of them fold away: a StridedSlice with a new axis)."""
    return "flex op" in str(error).lower()


def static_may_help(error) -> bool:
    """Whether converting at the sample shapes may succeed where open dims failed."""
    return is_tensor_list_failure(error) or is_flex_failure(error)


def static_note(shapes: Mapping[str, Sequence[int]], error=None) -> str:
    dims = ", ".join(f"{k} {'x'.join(str(int(d)) for d in v)}" for k, v in shapes.items())
    if error is not None and not is_tensor_list_failure(error):
        ops = ", ".join(getattr(error, "ops", ()) or ()) or "some ops"
        return (f"converted at static shapes ({dims}): at the model's open dims TFLite has no builtin for "
                f"{ops} (a flex op)")
    return (f"converted at static shapes ({dims}): TFLite lowers a recurrent layer's tensor lists to WHILE only "
            f"at static shapes")
