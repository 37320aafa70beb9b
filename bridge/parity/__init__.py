"""`bridge parity`: run one model through every runtime and prove they agree,
down to the first layer that diverges.

    from bridge.parity import run_parity
    report = run_parity("yolov3-tiny", per_layer=True, config={"input_size": 96})
    report.passed, report.to_json()

Runtime adapters live one per file in bridge/parity/runtimes/ and follow the
interface in bridge/parity/runtime.py.
"""
from bridge.parity.runtime import Runtime, Unavailable
from bridge.parity.runner import ParityReport, known_runtimes, run_parity
from bridge.parity.source import ModelSource, open_source

__all__ = ["Runtime", "Unavailable", "ParityReport", "run_parity", "known_runtimes", "ModelSource", "open_source"]
