"""What the benchmark scripts share: timing contenders in alternating rounds,
a Keras model as a tf.function and freezing one, BERT-base's sizes, the target
column, and --config items. Imported as
`_common` by scripts run as `python benchmarks/x.py` (their folder is then on
sys.path); imports neither TensorFlow nor onnxruntime itself.
"""
from __future__ import annotations

import contextlib
import gc
import os
import subprocess
import sys
import time
from typing import Callable, Dict, Hashable, Mapping, Optional, Sequence, Tuple

import numpy as np


def alternating_medians(fns: Mapping[Hashable, Callable[[], object]], repeat: int, warmup: int = 1,
                        budget_s: Optional[float] = None,
                        clock: Callable[[], float] = time.perf_counter) -> Tuple[Dict[Hashable, float], int]:
    """({key: median seconds per call}, rounds run). `warmup` untimed rounds
    first; then each round calls every contender once, in turn, so drift on a
    shared machine hits all alike. With `budget_s`, rounds stop once that many
    seconds have passed (after at least three). `clock`: what a call's time is read
from (time.thread_time: this thread's CPU time; the budget stays wall-clock)."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: Dict[Hashable, list] = {k: [] for k in fns}
    start = time.perf_counter()
    rounds = 0
    # as timeit does: Python's collector, walking TensorFlow's millions of objects,
    # would land in whichever call allocated last
    collecting = gc.isenabled()
    gc.disable()
    try:
        for rounds in range(1, repeat + 1):
            for k, fn in fns.items():
                t0 = clock()
                fn()
                times[k].append(clock() - t0)
            if budget_s is not None and rounds >= 3 and time.perf_counter() - start > budget_s:
                break
    finally:
        if collecting:
            gc.enable()
    return {k: float(np.median(v)) for k, v in times.items()}, rounds


def median_pair(ours: Callable[[], object], base: Callable[[], object], repeat: int) -> Tuple[float, float]:
    """Median seconds of two callables, timed in alternating rounds after a warm-up."""
    medians, _ = alternating_medians({"ours": ours, "base": base}, repeat)
    return medians["ours"], medians["base"]


# BERT-base's sizes, for the benchmarks that build the built-in BERT at its real width
BERT_BASE = dict(hidden=768, heads=12, intermediate=3072)


def keras_signature(model):
    """One tf.TensorSpec per Keras input, named as the input."""
    import tensorflow as tf
    return [tf.TensorSpec(t.shape, t.dtype, name=t.name) for t in model.inputs]


def keras_function(model):
    """A tf.function over a Keras model's inputs in order returning its outputs in
    order (a dict would come back sorted by key), as a user writes one."""
    import tensorflow as tf

    def call(*xs):
        out = model(list(xs) if len(xs) > 1 else xs[0], training=False)
        return [out[n] for n in model.output_names] if isinstance(out, dict) else out
    return tf.function(call, input_signature=keras_signature(model), autograph=False)


def freeze(fn, *specs):
    """The concrete function of the tf.function `fn` for `specs` with its
    variables turned into constants: what lets grappler/oneDNN fuse
    Conv+BiasAdd+LeakyRelu."""
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2
    return convert_variables_to_constants_v2(fn.get_concrete_function(*specs))


def target_note(ratio: float, target: Optional[float]) -> str:
    """The 'target' column: empty where none is set."""
    if target is None:
        return ""
    return f">= {target:g}: " + ("met" if ratio >= target else "NOT met")


def parse_config_or_exit(parser, items: Sequence[str]) -> dict:
    """--config KEY=VALUE items as `bridge --config` reads them; a bad item
    ends the script through `parser.error` (exit 2)."""
    from bridge.cli import UsageError
    from bridge.commands._options import parse_config
    try:
        return parse_config(items)
    except UsageError as e:
        parser.error(str(e))


def chosen(parser, text: str, known: Sequence[str]) -> list:
    """The comma-separated names given to --only, each one of `known`; an
    unknown one ends the script through `parser.error` (exit 2)."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown:
        parser.error(f"--only: unknown {unknown[0]!r}; choose from {', '.join(known)}")
    return names


def machine_line() -> str:
    """The line every benchmark table starts with: results differ between CPUs
    (these machines have been AMD Zen 4 and Intel Sapphire Rapids), so each
    table names its CPU and the native libraries' CPU flags."""
    import sys
    from bridge import native
    parts = [f"CPU: {native.cpu_name()}", f"{os.cpu_count()} cores"]
    for module, what in (("bridge.tf_ops", "tf_ops"), ("bridge.onnx_plugins", "ort")):
        if module in sys.modules:
            try:
                lib = sys.modules["bridge.tf_ops"].library_path() if what == "tf_ops" else \
                    sys.modules["bridge.onnx_plugins"].ort_library_path(build=False)
                flags = native.read_build_info(lib).get("cpu_flags") if lib else None
            except Exception:
                flags = None
            if flags is not None:
                parts.append(f"{what} flags: {' '.join(flags) or 'none (portable)'}")
    return "# " + "; ".join(parts)


@contextlib.contextmanager
def one_core_busy():
    """Another process spinning on one core while the block runs: a kernel that
    is fast alone and collapses when it cannot have every core is not fast."""
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)  # let it start spinning
        yield
    finally:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def env(values: Mapping[str, str], clear: Sequence[str] = ()):
    """os.environ with `clear` unset and `values` set while the block runs (a
    kernel reads its settings when it is created), restored afterwards."""
    saved = {k: os.environ.get(k) for k in (*clear, *values)}
    try:
        for k in clear:
            os.environ.pop(k, None)
        os.environ.update(values)
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
