"""YoloConvBnLeaky: BatchNorm folded into the weights (once per call; constant
folding removes it when the parameters are initializers), then NCHW Conv and
LeakyRelu between transposes, since ATC's ONNX route lays convolutions out NCHW."""


def build(g):
    x, filt, conv_bias, gamma, beta, mean, variance = g.inputs
    eps = g.const(g.attr("epsilon"), "float32")
    scale = g.op("Div", gamma, g.op("Sqrt", g.op("Add", variance, eps)))
    w = g.op("Mul", filt, scale)                       # HWIO * [O]
    b = g.op("Add", g.op("Mul", g.op("Sub", conv_bias, mean), scale), beta)
    x_nchw = g.op("Transpose", x, perm=(0, 3, 1, 2))
    w_oihw = g.op("Transpose", w, perm=(3, 2, 0, 1))
    z = g.op("Conv", x_nchw, w_oihw, b, strides=g.attr("strides"), pads=g.attr("pads"),
             dilations=g.attr("dilations"))
    y = g.op("LeakyRelu", z, alpha=g.attr("alpha"))
    g.outputs = [g.op("Transpose", y, perm=(0, 2, 3, 1))]

# Shape function of the GE custom operator (route 2): NHWC out, TF's arithmetic
# on the node's explicit pads; unknown (-1) dims stay unknown.
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
