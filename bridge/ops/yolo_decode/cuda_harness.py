"""YoloDecode on the CUDA harness (bridge.cuda): its C entry points in
cuda_harness.cu beside it, the call the harness gains, and the road `bridge cuda` checks.

    boxes, objectness, class_probs = k.yolo_decode(raw, anchors=[...], num_classes=80, stride=32)
"""
from bridge import ops as specs
from bridge.cuda import F32, F32_ARRAY, I64, INT, Call, Entry, numel, shapes_of

OP = "YoloDecode"

# After the spec's pointers (raw, boxes, objectness, class_probs): n, h, w, the
# anchors (host memory), their count, num_classes, stride, scale_x_y.
ENTRIES = [Entry("bridge_yolo_decode", (I64, I64, I64, F32_ARRAY, INT, INT, I64, F32))]


def yolo_decode(k, raw, **attrs):
    c = Call(k, OP, (raw,), attrs)
    (raw,) = c.arrays
    outs = [c.empty(s) for s in c.spec.infer_shapes(shapes_of(c.arrays), **c.attrs)]
    anchors = [float(a) for a in c.attrs["anchors"]]
    if numel(raw.shape):
        n, h, w, _ = (int(d) for d in raw.shape)
        c.launch("bridge_yolo_decode", *c.ptrs(raw, *outs), n, h, w, (F32 * len(anchors))(*anchors),
                 len(anchors) // 2, c.attrs["num_classes"], c.attrs["stride"], c.attrs["scale_x_y"])
    return tuple(outs)


CALLS = (yolo_decode,)


def _elementwise(k, dev, rng, example, dtype):
    (raw,) = example.cast(dtype)
    spec = specs.get(OP)
    got = [dev.get(o) for o in k.yolo_decode(dev.put(raw), **example.attrs)]
    want = spec.reference(raw, **example.attrs)
    return max(spec.tolerance[dtype].excess(g, r) for g, r in zip(got, want))


CHECKS = [("elementwise", ("float32", "float16"), _elementwise)]
