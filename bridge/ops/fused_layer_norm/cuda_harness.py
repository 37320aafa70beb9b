"""FusedLayerNorm on the CUDA harness (bridge.cuda): its C entry points in
cuda_harness.cu beside it, the calls the harness gains, and the roads `bridge cuda` checks.

    y = k.fused_layer_norm(x, gamma, beta, epsilon=1e-6)
    dx, dgamma, dbeta = k.fused_layer_norm_backward(dy, x, gamma, epsilon=1e-6)
"""
from bridge import ops as specs
from bridge.cuda import F32, I64, Call, Entry, numel, shapes_of
from bridge.ops import OpError
from bridge.ops.fused_layer_norm import BACKWARD_SCALE, reference_backward

OP = "FusedLayerNorm"

# After the spec's pointers (x, gamma, beta, y): rows, H, epsilon. The backward
# takes dy, x, gamma, dx, dgamma, dbeta.
ENTRIES = [Entry("bridge_fused_layer_norm", (I64, I64, F32)),
           Entry("bridge_fused_layer_norm_backward", (I64, I64, F32), pointers=6)]


def _rows(shape):
    """(rows, row length): normalised over the last axis."""
    h = int(shape[-1])
    return (numel(shape) // h if h else 0), h


def fused_layer_norm(k, x, gamma, beta, **attrs):
    c = Call(k, OP, (x, gamma, beta), attrs)
    (shape,) = c.spec.infer_shapes(shapes_of(c.arrays), **c.attrs)
    y = c.empty(shape)
    rows, h = _rows(shape)
    if rows:
        c.launch("bridge_fused_layer_norm", *c.ptrs(*c.arrays, y), rows, h, c.attrs["epsilon"])
    return y


def fused_layer_norm_backward(k, dy, x, gamma, **attrs):
    """(dx, dgamma, dbeta) of FusedLayerNorm at x for the output gradient dy."""
    c = Call(k, OP, (dy, x, gamma), attrs, names=("dy", "x", "gamma"))
    dy, x, gamma = c.arrays
    (shape,) = c.spec.infer_shapes([tuple(x.shape), tuple(gamma.shape), tuple(gamma.shape)], **c.attrs)
    if tuple(dy.shape) != tuple(shape):
        raise OpError(c.spec.name, "dy", f"must have the shape of x {list(shape)}, got {list(dy.shape)}")
    rows, h = _rows(shape)
    dx, dgamma, dbeta = c.empty(shape), c.empty((h,)), c.empty((h,))
    if h:  # no rows still leaves dgamma and dbeta (h values each) for the kernel to write
        c.launch("bridge_fused_layer_norm_backward", *c.ptrs(dy, x, gamma, dx, dgamma, dbeta), rows, h,
                 c.attrs["epsilon"])
    return dx, dgamma, dbeta


CALLS = (fused_layer_norm, fused_layer_norm_backward)


def _forward(k, dev, rng, example, dtype):
    x, gamma, beta = example.cast(dtype)
    spec = specs.get(OP)
    y = dev.get(k.fused_layer_norm(dev.put(x), dev.put(gamma), dev.put(beta), **example.attrs))
    return spec.tolerance[dtype].excess(y, spec.reference(x, gamma, beta, **example.attrs))


def _backward(k, dev, rng, example, dtype):
    x, gamma, _ = example.cast(dtype)
    spec = specs.get(OP)
    dy = rng.normal(size=x.shape).astype(dtype)
    epsilon = spec.resolve(example.attrs)["epsilon"]
    got = [dev.get(a) for a in k.fused_layer_norm_backward(dev.put(dy), dev.put(x), dev.put(gamma), epsilon=epsilon)]
    want = reference_backward(dy, x, gamma, epsilon=epsilon)
    return max(spec.tolerance[dtype].excess(g, w) / BACKWARD_SCALE[dtype] for g, w in zip(got, want))


CHECKS = [("forward", ("float32", "float16"), _forward),
          ("backward", ("float32", "float16"), _backward)]
