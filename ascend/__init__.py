"""Ascend (GE / ATC): the ONNX parser plugin package, the ATC pre-flight, and the
built-in-operator expansion the `ge` parity runtime runs.

For the parity framework:
- `expand_builtin(model) -> ModelProto`: custom nodes (com.bridge or legacy
  default-domain) replaced by the decomposition the ParseOpToGraphFn plugins build
  (standard ops only, the model's opset);
- `legacy_to_runnable(model) -> ModelProto`: a `--parser legacy` model's custom
  nodes moved back to com.bridge, so onnxruntime with the native kernels runs it.
"""
from __future__ import annotations

from typing import Dict

from bridge.ascend.expand import expand_builtin, is_custom, legacy_to_runnable, to_legacy  # noqa: F401


def backend_status(spec) -> Dict[str, str]:
    """The `ascend` column of `bridge ops`: "yes" when the generated plugin package
    registers every origin type both parser modes produce for this op."""
    from bridge.ascend.opp import package_files, plugin_file
    from bridge.ascend.origins import PARSERS, expected_origins, registered_in_source
    from bridge.ascend.builtin import supported_specs
    if spec not in supported_specs():
        from bridge.ascend.builtin import decomposition
        try:
            decomposition(spec.name)
        except ValueError as e:
            return {"ascend": f"no: {e}"[:80]}
    try:
        source = package_files()[plugin_file(spec)]
    except Exception as e:  # the table shows why instead of failing
        return {"ascend": f"plugin generation failed: {type(e).__name__}: {e}"[:80]}
    registered = registered_in_source(source)
    missing = [o for p in PARSERS for o in expected_origins(spec, p) if o not in registered]
    return {"ascend": "yes" if not missing else f"missing {', '.join(missing)}"}


__all__ = ["expand_builtin", "legacy_to_runnable", "to_legacy", "is_custom", "backend_status"]
