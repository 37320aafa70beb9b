"""The README's Example section runs as written: its Python blocks, taken from
the README itself, in a fresh interpreter in an empty folder."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def example_blocks(text: str):
    """The ```python blocks of the `## Example` section, in order."""
    section = text.split("\n## Example\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def test_the_example_section_has_the_api_example():
    blocks = example_blocks(README.read_text())
    assert blocks and "import bridge\n" in blocks[0]
    for call in ("bridge.export(", "bridge.parity(", "bridge.fuse(", "except bridge."):
        assert call in blocks[0], call


def test_readme_python_example_runs_as_written(tmp_path):
    code = "\n".join(example_blocks(README.read_text()))
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
    out = r.stdout
    # what the example prints: the export's verification table, parity's verdict, the
    # caught error's own message
    assert "max abs error vs TF" in out and re.search(r"\{'conv_bn_leaky': \d+\}", out)
    assert "PASS:" in out and "--opset 7: supported opsets are" in out
    assert (tmp_path / "yolov3-tiny.onnx").is_file() and (tmp_path / "mine.tflite").is_file()
    assert not (tmp_path / "mine.onnx").exists()
