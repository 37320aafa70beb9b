"""FusedLayerNorm on GE's built-in LayerNorm, normalising the last axis (ONNX
below opset 17 spells it out: ReduceMean, Sub, Pow, ...; see render_onnx)."""


def build(g):
    x, gamma, beta = g.inputs
    g.outputs = [g.op("LayerNorm", x, gamma, beta, epsilon=g.attr("epsilon"))]

# Shape function of the GE custom operator (route 2): y is x.
INFER_SHAPE = r'''
  ge::TensorDesc x = op.GetInputDescByName("x");
  ge::TensorDesc y = op.GetOutputDescByName("y");
  y.SetShape(x.GetShape());
  y.SetDataType(x.GetDataType());
  return op.UpdateOutputDesc("y", y);
'''
