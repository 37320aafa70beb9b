"""YoloConvBnLeaky's GE custom operator (route 2): its C++ shape function, NHWC
out by TF's arithmetic on the node's explicit pads; unknown (-1) dims stay unknown."""

INFER_SHAPE = r'''
  ge::TensorDesc x = op.GetInputDescByName("x");
  ge::TensorDesc w = op.GetInputDescByName("filter");
  std::vector<int64_t> xs = x.GetShape().GetDims();
  std::vector<int64_t> ws = w.GetShape().GetDims();
  std::vector<int64_t> strides, pads, dilations;
  if (xs.size() != 4 || ws.size() != 4 || op.GetAttr("strides", strides) != ge::GRAPH_SUCCESS ||
      op.GetAttr("pads", pads) != ge::GRAPH_SUCCESS || op.GetAttr("dilations", dilations) != ge::GRAPH_SUCCESS ||
      strides.size() != 2 || pads.size() != 4 || dilations.size() != 2) {
    return ge::GRAPH_FAILED;
  }
  std::vector<int64_t> out{xs[0], -1, -1, ws[3]};
  for (int axis = 0; axis < 2; ++axis) {
    const int64_t size = xs[1 + axis];
    if (size < 0 || ws[axis] < 0) continue;
    const int64_t effective = (ws[axis] - 1) * dilations[axis] + 1;
    const int64_t padded = size + pads[axis] + pads[axis + 2];
    out[1 + axis] = padded < effective ? 0 : (padded - effective) / strides[axis] + 1;
  }
  ge::TensorDesc y = op.GetOutputDescByName("y");
  y.SetShape(ge::Shape(out));
  y.SetDataType(x.GetDataType());
  return op.UpdateOutputDesc("y", y);
'''
