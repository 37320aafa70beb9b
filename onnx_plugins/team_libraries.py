"""A team's own onnxruntime kernel libraries (`--ort-library LIB.so|DIR`).

`add(path)` takes the .so a team built against onnxruntime's C API (or its CMake
folder, built here like bridge's own library: bridge.native.ort_library_build)
and asks onnxruntime which of the team's ops (specs not built into bridge) it
serves: one probe session per op and dtype, a lone node of the op in its domain
with no function to fall back on. A library that serves none of them is an
error naming the ops, the library and the flag. From then on every session
bridge.onnx_plugins.session makes with the op's kernel asked for registers the
library (the `ort` parity runtime: kernels="all"); a session without it runs the
op's function body.
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Tuple

from bridge import ops as _specs
from bridge.errors import LibraryError

FLAG = "--ort-library"
# what onnxruntime says when no kernel and no function serves a node
_NOT_REGISTERED = "is not a registered function/op"

_served: Dict[str, Tuple[Path, Tuple[str, ...]]] = {}  # op -> (library, the dtypes it serves)


class OrtLibraryError(LibraryError):
    """A team's onnxruntime library that cannot be used as given."""


def _library_file(path) -> Path:
    p = Path(path).expanduser()
    if p.is_dir():
        from bridge import native
        try:
            return native.ort_library_build(p).library()
        except native.BuildError as e:
            raise OrtLibraryError(f"{FLAG} {path}: {e}") from None
    if not p.is_file():
        raise OrtLibraryError(f"{FLAG} {path}: no such file (give the .so, or the folder with its CMakeLists.txt)")
    return p.resolve()


def _probe_model(spec, dtype: str):
    """One node of the op, inputs of `dtype` shaped as the op's first example."""
    import numpy as np
    from onnx import helper
    example = next(iter(spec.examples()), None)
    shapes = example.shapes if example is not None else [None] * len(spec.inputs)
    attrs = dict(example.onnx_attrs) if example is not None else {}
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    node = helper.make_node(spec.name, [a.name for a in spec.inputs], [a.name for a in spec.outputs],
                            domain=spec.domain, **{k: list(v) if isinstance(v, tuple) else v for k, v in attrs.items()})
    graph = helper.make_graph(
        [node], "probe",
        [helper.make_tensor_value_info(a.name, elem, s) for a, s in zip(spec.inputs, shapes)],
        [helper.make_tensor_value_info(a.name, elem, None) for a in spec.outputs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid(spec.domain, spec.domain_version)],
                             ir_version=8)  # opset 17's: any onnxruntime bridge supports reads it


def serves(library: Path, spec, dtype: str) -> bool:
    """Whether onnxruntime finds a kernel for the op at `dtype` in `library`."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.log_severity_level = 4  # the probe's refusals are answers, not news
    try:
        so.register_custom_ops_library(str(library))
    except Exception as e:  # onnxruntime's own error types
        raise OrtLibraryError(f"{FLAG} {library}: onnxruntime {ort.__version__} cannot register it: "
                              f"{str(e).splitlines()[0]}") from None
    try:
        ort.InferenceSession(_probe_model(spec, dtype).SerializeToString(), so, providers=["CPUExecutionProvider"])
        return True
    except Exception as e:
        text = str(e)
        if _NOT_REGISTERED in text or "Type Error" in text or "is invalid" in text:
            return False
        raise OrtLibraryError(f"{FLAG} {library}: onnxruntime refuses its kernel for {spec.domain}::{spec.name} "
                              f"({dtype}): {text.splitlines()[0][:300]}") from None


def team_specs() -> List:
    return [s for s in _specs.all_specs() if not _specs.is_builtin(s)]


def add(path) -> List[str]:
    """Registers a team library for the team's ops it serves; returns their names."""
    library = _library_file(path)
    team = team_specs()
    found = []
    for spec in team:
        dtypes = tuple(d for d in spec.dtypes if serves(library, spec, d))
        if dtypes:
            _served[spec.name] = (library, dtypes)
            found.append(spec.name)
    if not found:
        wanted = ", ".join(f"{s.domain}::{s.name}" for s in team) or "none (give the op's spec with --op-spec)"
        built = "" if Path(path).expanduser().resolve() == library else f" (built as {library})"
        raise OrtLibraryError(f"{FLAG} {path}{built} registers no kernel for the team's ops: {wanted}. Its "
                              f"RegisterCustomOps must add each op under its spec's name and domain")
    return found


def library_for(op: str):
    """(library, dtypes) serving a team op, or None."""
    return _served.get(op)


def served() -> Dict[str, Tuple[Path, Tuple[str, ...]]]:
    return dict(_served)


def forget() -> None:
    """Drops every registered library (tests)."""
    _served.clear()


__all__ = ["FLAG", "OrtLibraryError", "add", "forget", "library_for", "serves", "served", "team_specs"]
