"""The API's `progress=` argument: False (silent), True (the CLI's lines on
stderr) or a callable that receives each line."""
from __future__ import annotations

import sys
from typing import Callable, Optional, Union

from bridge.exporting import OptionError

ProgressArg = Union[bool, None, Callable[[str], None]]


def sink(progress: ProgressArg) -> Optional[Callable[[str], None]]:
    """Where progress lines go; None: nowhere."""
    if progress is None or progress is False:
        return None
    if progress is True:
        return lambda line: print(line, file=sys.stderr, flush=True)
    if callable(progress):
        return progress
    raise OptionError(f"progress={progress!r}: expected True, False or a callable taking one line")
