"""bridge parity's files for people and spreadsheets: --csv (one row per
runtime x output and x layer, msit's column names) and --report DIR (one
self-contained HTML page), on a small Keras model with an image-like output.
The page is rendered in headless Chromium where Debian's `chromium` is
installed (apt-get install chromium); the test says so and skips elsewhere."""
from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess

import numpy as np
import pytest

from bridge.cli import main

RUNTIMES = "tf,tf-fused,ort-lowered"


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """Conv-BN-LeakyReLU twice and a 1x1 head: outputs an N,H,W,C map and a
    pooled vector; saved as .keras."""
    import keras
    keras.utils.set_random_seed(3)
    inp = keras.Input((13, 13, 3), name="image")
    x = inp
    for i in (1, 2):
        x = keras.layers.Conv2D(8, 3, padding="same", use_bias=False, name=f"conv_{i}")(x)
        x = keras.layers.BatchNormalization(name=f"bn_{i}")(x)
        x = keras.layers.LeakyReLU(0.1, name=f"leaky_{i}")(x)
    head = keras.layers.Conv2D(5, 1, name="head")(x)
    pooled = keras.layers.GlobalAveragePooling2D(name="pooled")(head)
    model = keras.Model(inp, [head, pooled], name="small")
    rng = np.random.default_rng(0)
    for i in (1, 2):
        model.get_layer(f"bn_{i}").set_weights([rng.uniform(0.5, 1.5, 8), rng.normal(size=8) * 0.1,
                                                 rng.normal(size=8) * 0.1, rng.uniform(0.5, 1.5, 8)])
    folder = tmp_path_factory.mktemp("small")
    path = folder / "small.keras"
    model.save(path)
    out = folder / "out"
    argv = ["parity", str(path), "--runtimes", RUNTIMES, "--per-layer", "-q", "--json", str(out / "r.json"),
            "--csv", str(out / "r.csv"), "--report", str(out / "html")]
    out.mkdir()
    rc = main(argv)
    return {"rc": rc, "json": json.loads((out / "r.json").read_text()), "csv": out / "r.csv",
            "html": out / "html" / "report.html", "folder": folder}


def test_csv_has_a_row_per_runtime_output_and_layer_with_msit_names(small):
    assert small["rc"] == 0
    with open(small["csv"], newline="") as f:
        rows = list(csv.DictReader(f))
    header = list(rows[0])
    for name in ("CosineSimilarity", "MaxAbsoluteError", "RMSE", "MeanRelativeError", "RelativeEuclideanDistance",
                 "ErrorP50", "ErrorP99", "ErrorP99.9", "ElementsPastBound", "Status", "Covers"):
        assert name in header, name
    data = small["json"]
    for r in data["runtimes"]:
        mine = [row for row in rows if row["Runtime"] == r["name"]]
        outputs = {row["Name"]: row for row in mine if row["Kind"] == "output"}
        assert set(outputs) == set(r["outputs"]), r["name"]
        for name, numbers in r["outputs"].items():  # the same numbers as --json, to the 6 digits written
            row = outputs[name]
            assert float(row["CosineSimilarity"]) == pytest.approx(numbers["cosine"], rel=1e-5)
            assert float(row["RMSE"]) == pytest.approx(numbers["rmse"], rel=1e-5, abs=1e-30)
            assert int(row["ElementsPastBound"]) == numbers["past_bound"]
            assert row["Status"] == numbers["status"]
        layers = [row for row in mine if row["Kind"] == "layer"]
        assert len(layers) == (len(r["layers"]["layers"]) if r["layers"] else 0), r["name"]
    fused = [row for row in rows if row["Runtime"] == "tf-fused" and row["Kind"] == "layer" and row["Covers"]]
    assert fused and fused[0]["Covers"] == "conv_1+bn_1+leaky_1"    # a fused block names its source layers


def test_report_is_one_self_contained_page(small):
    page = small["html"].read_text()
    assert os.listdir(small["html"].parent) == ["report.html"]
    assert "<script" not in page.lower()
    # nothing fetched: the only links are inline data (the heatmaps' pixels inside their SVG)
    urls = {u for u in re.findall(r"""(?:src|href)\s*=\s*["']([^"'#][^"']*)["']""", page) if not u.startswith("data:")}
    assert not urls, urls
    assert page.count("<svg") >= 5        # by depth (2 runtimes with layers), a histogram per output, heatmaps
    assert "as close to float64 as TF float32 itself" in page and "PASS" in page
    assert "First divergence" in page and "no layer fails" in page


def test_report_escapes_names_from_the_model(small, tmp_path):
    """A name from the model (untrusted) lands escaped in the page."""
    from bridge.parity import html_report
    from bridge.parity.runner import ParityReport, RuntimeResult
    from bridge.parity.compare import compare
    row = RuntimeResult("ort", "", "ok")
    row.outputs = {"<img src=x onerror=alert(1)>": compare(np.ones((1, 4, 4, 2)), np.ones((1, 4, 4, 2)),
                                                           detail=True)}
    report = ParityReport("<b>m</b>", "keras", "tf", 0, {"x": ((1,), "float32")}, [row], False)
    page = html_report.render(report)
    assert "<img" not in page and "<b>m" not in page and "&lt;img src=x" in page


def test_missing_matplotlib_is_a_usage_error_before_the_run(monkeypatch, small, capsys):
    from bridge.parity import html_report

    def refuse():
        raise html_report.ReportError("--report needs matplotlib: pip install 'bridge-ops[report]'")
    monkeypatch.setattr(html_report, "require", refuse)
    out = small["folder"] / "none"
    rc = main(["parity", str(small["folder"] / "small.keras"), "--runtimes", "tf", "-q", "--report", str(out)])
    assert rc == 2 and not out.exists() and "needs matplotlib" in capsys.readouterr().err


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# .ci/run installs Debian's chromium and sets this, so CI renders the page rather than skipping
CHROMIUM_REQUIRED = os.environ.get("BRIDGE_REQUIRE_CHROMIUM") == "1"


def test_chromium_is_there_where_ci_requires_it():
    if not CHROMIUM_REQUIRED:
        pytest.skip("BRIDGE_REQUIRE_CHROMIUM is not set (only .ci/run requires the browser)")
    assert CHROMIUM is not None, "BRIDGE_REQUIRE_CHROMIUM=1 but no chromium on PATH (apt-get install chromium)"


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (apt-get install chromium)")
def test_report_renders_in_headless_chromium_with_its_plots(small, tmp_path):
    from matplotlib import image
    shot = tmp_path / "page.png"
    # no network here: without the background-networking flags chromium keeps trying Google's hosts
    run = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                          "--no-first-run", "--disable-background-networking", "--disable-component-update",
                          "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}",
                          "--window-size=1400,3000", small["html"].as_uri()], capture_output=True, timeout=120)
    assert shot.exists(), f"chromium wrote no screenshot: {run.stderr.decode(errors='replace')[-500:]}"
    assert shot.exists(), "chromium wrote no screenshot"
    pixels = image.imread(shot)[..., :3]
    assert pixels.std() > 0.05                                    # not blank
    blue = np.all(np.abs(pixels - np.array([0x1f, 0x77, 0xb4]) / 255) < 0.08, axis=-1)
    assert blue.sum() > 200                                       # the by-depth curves are drawn (matplotlib's C0)
    green = np.all(np.abs(pixels - np.array([0xe3, 0xf6, 0xe3]) / 255) < 0.03, axis=-1)
    assert green.sum() > 2000                                     # the verdict table's passing rows
