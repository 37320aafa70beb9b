"""FusedLayerNorm's case table: the examples every backend runs and the bad inputs
every backend refuses in the same words."""
from __future__ import annotations

import numpy as np

from ..cases import BadInput, Example
from . import NAME


def examples():
    rng = np.random.default_rng(11)

    def row(id, shape, epsilon=None, mean=1.0, std=3.0, **kw):
        h = shape[-1]
        x = mean + std * rng.standard_normal(shape)
        attrs = {} if epsilon is None else {"epsilon": epsilon}
        return Example(id, (x, rng.standard_normal(h), rng.standard_normal(h)), attrs,
                       {"epsilon": 1e-6 if epsilon is None else epsilon}, **kw)

    return [
        row("3x5x7", (3, 5, 7)),
        row("rank1", (33,), 1e-3),
        row("H=1", (4, 1)),  # the variance is 0: y = beta
        row("1x1", (1, 1), 1e-5),
        row("2x3x1x70", (2, 3, 1, 70)),
        row("empty-batch", (0, 6)),
        row("empty-middle", (2, 0, 16)),
        row("odd-3x1025", (3, 1025), 1e-5),
        row("eps-1e-12", (2, 64), 1e-12),
        row("eps-0.5", (3, 40), 0.5),
        # A large mean cancels the variance away unless the sums are shifted
        # (float32 only: float16 holds 3e4 to 16 units).
        row("mean3e4-H1024", (4, 1024), 1e-5, mean=3e4, std=1.0, dtypes=("float32",)),
        row("mean-3e3-std0.1", (3, 37), 1e-5, mean=-3e3, std=0.1, dtypes=("float32",)),
        row("mean1e4-H4096", (2, 4096), 1e-5, mean=1e4, std=1.0, dtypes=("float32",), large=True),
        row("H9001", (2, 9001), large=True),
    ]



def bad_inputs():
    def shape(id, x, g, b, arg, message):
        return BadInput(id, (x, g, b), {}, arg, f"{NAME}: argument '{arg}': {message}")

    return [
        shape("gamma-size", (2, 4), (3,), (4,), "gamma", "must have shape [H]=[4] (the last dim of x [2,4]), got [3]"),
        shape("beta-size", (2, 3, 5), (5,), (6,), "beta", "must have shape [H]=[5] (the last dim of x [2,3,5]), got [6]"),
        shape("gamma-rank", (2, 4), (1, 4), (4,), "gamma", "must have shape [H]=[4] (the last dim of x [2,4]), got [1,4]"),
        shape("beta-scalar", (2, 4), (4,), (), "beta", "must have shape [H]=[4] (the last dim of x [2,4]), got []"),
        shape("gamma-empty", (2, 4), (0,), (4,), "gamma", "must have shape [H]=[4] (the last dim of x [2,4]), got [0]"),
        shape("x-scalar", (), (1,), (1,), "x", "must have rank >= 1, got a scalar (shape [])"),
    ]
