"""A team's own ops in this process: what `--op-spec`, `--op-library`,
`--ort-library` and `--litert-library` do on the command line.

Specs are registered first, then the kernel libraries; a TensorFlow library
needs TensorFlow, so that step comes once TensorFlow is imported (the CLI
imports it between the two, quietly). Register a team's op before the first
export or parity run that uses it: some layers read the registry once.
"""
from __future__ import annotations

import os
from typing import Iterable, List, Optional, Sequence, Union

PathLike = Union[str, "os.PathLike[str]"]


def _paths(items) -> List[str]:
    if items is None:
        return []
    if isinstance(items, (str, os.PathLike)):
        return [os.fspath(items)]
    return [os.fspath(p) for p in items]


def load_specs(op_spec: Iterable = (), ort_library: Iterable[PathLike] = (),
               litert_library: Optional[PathLike] = None) -> list:
    """The steps that need no TensorFlow: the `bridge.ops` entry points, the spec
    files (or OpSpec objects), the onnxruntime libraries and the LiteRT op folder.
    Returns the OpSpecs registered from `op_spec`. Raises SpecError or a
    LibraryError (OrtLibraryError, LiteRTLibraryError) with the CLI's message."""
    from bridge import ops
    from bridge.ops import registry
    ops.load_entry_points()
    found = []
    items = [op_spec] if isinstance(op_spec, (str, os.PathLike, ops.OpSpec)) else list(op_spec or ())
    for item in items:
        if isinstance(item, ops.OpSpec):
            found.append(registry.register(item, f"bridge.register_op({item.name})"))
        else:
            found.extend(ops.load_spec_file(os.fspath(item)))
    libraries = _paths(ort_library)
    if libraries:
        from bridge.onnx_plugins import team_libraries
        for path in libraries:
            team_libraries.add(path)
    if litert_library is not None:
        from bridge.litert import team_libraries as litert_libraries
        litert_libraries.add(os.fspath(litert_library))
    return found


def load_libraries(op_library: Iterable[PathLike] = ()) -> None:
    """The TensorFlow kernel libraries (a .so or its CMake folder, built here);
    imports TensorFlow and bridge.tf_ops. Raises TeamOpError (a LibraryError)."""
    libraries = _paths(op_library)
    if not libraries:
        return
    from bridge import tf_ops
    for path in libraries:
        tf_ops.load_op_library(path)


def register_op(spec, library: Optional[PathLike] = None, ort_library: Optional[PathLike] = None,
                litert_library: Optional[PathLike] = None) -> list:
    """Registers a team's op in this process, as `--op-spec SPEC --op-library
    LIBRARY --ort-library ORT_LIBRARY --litert-library LITERT_LIBRARY` do.

    `spec`: a Python file defining SPEC (or SPECS), or a `bridge.ops.OpSpec`.
    `library`: its TensorFlow kernel (.so or CMake folder; imports TensorFlow).
    `ort_library`: its onnxruntime kernel (.so or CMake folder).
    `litert_library`: the folder of its LiteRT kernel files.
    Returns the OpSpecs registered. Raises SpecError or a LibraryError."""
    found = load_specs([spec], _paths(ort_library), litert_library)
    if library is not None:
        quiet_tensorflow()
        load_libraries([library])
    return found


def load(op_spec: Sequence = (), op_library: Sequence = (), ort_library: Sequence = (),
         litert_library: Optional[PathLike] = None, imports: Sequence = ()) -> None:
    """Every step, in the CLI's order, for API calls that take its team-op options."""
    if op_spec or ort_library or litert_library is not None:
        load_specs(op_spec, ort_library, litert_library)
    load_imports(imports)
    if op_library:
        quiet_tensorflow()
        load_libraries(op_library)


def load_imports(imports: Sequence = ()) -> None:
    """What `--import MODULE|FILE.py` does (bridge.team_imports): each module
    imported after TensorFlow and before the op layers read the specs, so the
    Keras classes and op specs it registers are there. Raises ImportFailed (a
    bridge.BridgeError)."""
    items = _paths(imports)
    if not items:
        return
    from bridge.quiet import import_tensorflow
    from bridge.team_imports import import_modules
    import_tensorflow()
    import_modules(items)


def quiet_tensorflow(verbose: bool = False):
    """TensorFlow imported without its C++ start-up lines, and bridge's op library
    built or found before any model is traced, so that a failed build is its own
    short BuildError rather than one wrapped in Keras' traceback."""
    from bridge.quiet import import_tensorflow
    tf = import_tensorflow(verbose=verbose)
    import bridge.tf_ops  # noqa: F401
    return tf
