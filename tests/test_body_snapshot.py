"""bridge's own ops' ONNX function bodies and lowered (inlined) bodies, node by
node, are what they were before the bodies moved into the specs (snapshot taken
at 1a3e2db by tests/data/make_body_snapshot.py)."""
from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
sys.path.insert(0, str(DATA))

from make_body_snapshot import snapshot  # noqa: E402


@pytest.fixture(scope="module")
def pair():
    with gzip.open(DATA / "body_snapshot.json.gz", "rt") as f:
        want = json.load(f)
    return want, json.loads(json.dumps(snapshot()))


@pytest.mark.parametrize("kind", ["function", "inline"])
def test_bodies_are_node_by_node_the_snapshot(pair, kind):
    want, got = pair
    assert sorted(got[kind]) == sorted(want[kind])
    for key in sorted(want[kind]):
        w, g = want[kind][key], got[kind][key]
        for i, (wn, gn) in enumerate(zip(w, g)):
            assert gn == wn, f"{kind} {key}: node {i} differs:\n  was {wn}\n  now {gn}"
        assert len(g) == len(w), f"{kind} {key}: {len(w)} nodes before, {len(g)} now"
