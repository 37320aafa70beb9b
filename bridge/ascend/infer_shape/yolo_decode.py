"""YoloDecode's GE custom operator (route 2): its C++ shape function, rows = H*W*A."""

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
