"""The root of every error bridge raises on purpose, importable without
TensorFlow or numpy: each layer's own error class (a bad model, an option, a
library, a build, a spec, an export) subclasses `BridgeError`, so a script
catches one type and the CLI turns any of them into its one-line message.

`str(error)` is the message the CLI prints; `exit_code` the status it exits
with (2: a bad argument or file, 1: the work itself failed).
"""
from __future__ import annotations

class BridgeError(Exception):
    """Something bridge was asked to do cannot be done; the message says why
    and, where there is one, what to do instead."""

    exit_code = 2


class LibraryError(BridgeError, ValueError):
    """A team's kernel library (TensorFlow, onnxruntime or LiteRT) that cannot
    be used as given: missing, not a library, or lacking the op."""

