"""FusedLayerNorm's numpy float64 reference, forward and backward."""
from __future__ import annotations

import numpy as np


def reference(x, gamma, beta, *, epsilon):
    if x.shape[-1] == 0:  # rows of nothing: nothing to normalise (and no mean of an empty row)
        return np.zeros(x.shape, np.result_type(x, gamma, beta))
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return gamma * (x - mean) / np.sqrt(var + epsilon) + beta



# The gradients' bounds, in multiples of docs/ops.md's forward bound: dgamma and dbeta
# are sums over rows.
BACKWARD_SCALE = {"float32": 10.0, "float16": 2.0}



def reference_backward(dy, x, gamma, *, epsilon):
    """(dx, dgamma, dbeta) in float64 for the output gradient dy (biased variance,
    as the forward): dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma."""
    dy, x, gamma = (np.asarray(a, dtype=np.float64) for a in (dy, x, gamma))
    h = x.shape[-1]
    if h == 0 or x.size == 0:
        return np.zeros(x.shape), np.zeros(h), np.zeros(h)
    mean = x.mean(axis=-1, keepdims=True)
    rstd = 1.0 / np.sqrt(((x - mean) ** 2).mean(axis=-1, keepdims=True) + epsilon)
    xhat = (x - mean) * rstd
    g = dy * gamma
    dx = rstd * (g - g.mean(axis=-1, keepdims=True) - xhat * (g * xhat).mean(axis=-1, keepdims=True))
    return dx, (dy * xhat).reshape(-1, h).sum(axis=0), dy.reshape(-1, h).sum(axis=0)
