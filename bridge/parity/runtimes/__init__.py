"""The parity runtime adapters, one file each (see bridge/parity/runtime.py for
the interface). Discovery imports every module here and takes its `RUNTIME`."""
from __future__ import annotations

import importlib
import pkgutil
from typing import Dict, Tuple, Type

from bridge.parity.runtime import Runtime


def discover() -> Tuple[Dict[str, Type[Runtime]], Dict[str, str]]:
    """({runtime name: adapter class}, {module: why it did not import}). An adapter
    module that fails to import costs its own row, never the command."""
    found: Dict[str, Type[Runtime]] = {}
    broken: Dict[str, str] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        try:
            mod = importlib.import_module(f"{__name__}.{info.name}")
        except Exception as e:
            broken[info.name.replace("_", "-")] = f"adapter did not import: {type(e).__name__}: {e}"
            continue
        cls = getattr(mod, "RUNTIME", None)
        if cls is None:  # tolerate an adapter that only defines its class
            cls = next((v for v in vars(mod).values() if isinstance(v, type) and issubclass(v, Runtime)
                        and v.__module__ == mod.__name__ and getattr(v, "name", "")), None)
        if cls is not None and cls.name:
            found[cls.name] = cls
    return dict(sorted(found.items(), key=lambda kv: (kv[1].order, kv[0]))), broken
