"""FusedLayerNorm's GE custom operator (route 2): its C++ shape function, y is x."""

INFER_SHAPE = r'''
  ge::TensorDesc x = op.GetInputDescByName("x");
  ge::TensorDesc y = op.GetOutputDescByName("y");
  y.SetShape(x.GetShape());
  y.SetDataType(x.GetDataType());
  return op.UpdateOutputDesc("y", y);
'''
