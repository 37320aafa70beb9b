// bridge's declaration of CANN's graph/graph.h (ge::Graph): see ../README.md.
#ifndef BRIDGE_CANN_DECLS_GRAPH_GRAPH_H_
#define BRIDGE_CANN_DECLS_GRAPH_GRAPH_H_

#include <cstddef>
#include <utility>
#include <vector>

#include "graph/operator.h"

namespace ge {
class Graph {
 public:
  explicit Graph(const char_t *name);
  Graph() = default;
  ~Graph() = default;
  Graph &SetInputs(const std::vector<Operator> &inputs);
  Graph &SetOutputs(const std::vector<Operator> &outputs);
  Graph &SetOutputs(const std::vector<std::pair<Operator, std::vector<size_t>>> &output_indexs);
  Graph &SetOutputs(const std::vector<std::pair<Operator, AscendString>> &outputs);
  Graph &SetTargets(const std::vector<Operator> &targets);
  bool IsValid() const;
  graphStatus AddOp(const Operator &op);
  graphStatus FindOpByName(const char_t *name, Operator &op) const;
};
}  // namespace ge

#endif  // BRIDGE_CANN_DECLS_GRAPH_GRAPH_H_
