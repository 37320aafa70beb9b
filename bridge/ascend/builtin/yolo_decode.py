"""YoloDecode from Sigmoid/Exp/Mul/Add/Reshape. The plugin cannot know H and W
when ATC parses the node, so the grid and the reshape targets come from the
input's Shape (ATC folds them to constants once --input_shape fixes it); -1 in
the first reshape stands for A, so the anchor count never has to be computed."""
from bridge.ascend.decomposition import AsFloat, ints


def build(g):
    (raw,) = g.inputs
    c = g.attr("num_classes")
    sxy = g.attr("scale_x_y")
    shape = g.op("Shape", raw)
    nhw = g.op("Gather", shape, g.const(ints(0, 1, 2), "int64", (3,)), axis=0)
    p = g.op("Reshape", raw, g.op("Concat", nhw, g.const(ints(-1, c + 5), "int64", (2,)), axis=0))
    tx, ty, twh, tobj, tcls = g.op("Split", p, n_out=5, sizes=ints(1, 1, 2, 1, c), axis=-1)

    zero = g.const(0, "int64")
    one = g.const(1, "int64")
    offset = g.const((1.0 - sxy) * 0.5, "float32")     # -(scale_x_y - 1) / 2

    def grid(axis, target):                             # cell index along H (1) or W (2), shaped to broadcast
        size = g.op("Gather", shape, g.const(axis, "int64"), axis=0)
        cells = g.op("Cast", g.op("Range", zero, size, one), to="float32")
        return g.op("Reshape", g.op("Add", cells, offset), g.const(ints(*target), "int64", (5,)))

    gx = grid(2, (1, 1, -1, 1, 1))
    gy = grid(1, (1, -1, 1, 1, 1))
    scale = g.const(sxy, "float32")
    stride = g.const(AsFloat(g.attr("stride")), "float32")
    bx = g.op("Mul", g.op("Add", g.op("Mul", g.op("Sigmoid", tx), scale), gx), stride)
    by = g.op("Mul", g.op("Add", g.op("Mul", g.op("Sigmoid", ty), scale), gy), stride)
    bwh = g.op("Mul", g.op("Exp", twh), g.const(g.attr("anchors"), "float32", (-1, 2)))

    n = g.op("Gather", shape, g.const(ints(0), "int64", (1,)), axis=0)

    def rows(value, tail):                              # [N, H, W, A, k] -> [N, H*W*A, ...]
        return g.op("Reshape", value, g.op("Concat", n, g.const(tail, "int64", (len(tail.items),)), axis=0))

    boxes = rows(g.op("Concat", bx, by, bwh, axis=-1), ints(-1, 4))
    objectness = rows(g.op("Sigmoid", tobj), ints(-1))
    class_probs = rows(g.op("Sigmoid", tcls), ints(-1, c))
    g.outputs = [boxes, objectness, class_probs]

# Shape function of the GE custom operator (route 2): rows = H*W*A.
INFER_SHAPE = r'''
  ge::TensorDesc raw = op.GetInputDescByName("raw");
  std::vector<int64_t> s = raw.GetShape().GetDims();
  std::vector<float> anchors;
  int64_t num_classes = 0;
  if (s.size() != 4 || op.GetAttr("anchors", anchors) != ge::GRAPH_SUCCESS ||
      op.GetAttr("num_classes", num_classes) != ge::GRAPH_SUCCESS || anchors.size() < 2) {
    return ge::GRAPH_FAILED;
  }
  const int64_t a = static_cast<int64_t>(anchors.size() / 2);
  const int64_t rows = (s[1] < 0 || s[2] < 0) ? -1 : s[1] * s[2] * a;
  const std::vector<std::pair<const char *, std::vector<int64_t>>> outs{
      {"boxes", {s[0], rows, 4}}, {"objectness", {s[0], rows}}, {"class_probs", {s[0], rows, num_classes}}};
  for (const auto &o : outs) {
    ge::TensorDesc d = op.GetOutputDescByName(o.first);
    d.SetShape(ge::Shape(o.second));
    d.SetDataType(raw.GetDataType());
    if (op.UpdateOutputDesc(o.first, d) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
  }
  return ge::GRAPH_SUCCESS;
'''
