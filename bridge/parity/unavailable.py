"""The one exception every layer of `bridge parity` raises when a runtime cannot
run the model here. A leaf module: the model source, the exports and the
runtime interface all raise it, so none of them has to import another for it."""
from __future__ import annotations


class Unavailable(Exception):
    """The runtime cannot run this model on this machine; the message says why."""

    @property
    def reason(self) -> str:
        return str(self)
