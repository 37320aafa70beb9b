"""TensorFlow prints C++ log lines while it is imported (before its logging is set
up, so TF_CPP_MIN_LOG_LEVEL cannot stop them). The CLI imports it here with the
process's stderr file descriptor pointed elsewhere, and shows what was caught
only if the import fails."""
from __future__ import annotations

import contextlib
import os
import sys
import tempfile


@contextlib.contextmanager
def native_stderr_captured():
    """Redirects file descriptor 2 (what C++ writes to) for the block; replays the
    captured text if the block raises."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        except BaseException:
            os.dup2(saved, 2)
            tmp.seek(0)
            sys.stderr.write(tmp.read().decode(errors="replace"))
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def import_tensorflow(verbose: bool = False):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if verbose or "tensorflow" in sys.modules:
        import tensorflow
        return tensorflow
    with native_stderr_captured():
        import tensorflow
        # Device discovery logs too (cuInit fails loudly on a machine without a
        # GPU when the GPU-enabled wheel is installed): do it now, captured.
        tensorflow.config.list_physical_devices()
    return tensorflow
