// bridge's declaration of CANN's graph/operator_factory.h: see ../README.md.
#ifndef BRIDGE_CANN_DECLS_GRAPH_OPERATOR_FACTORY_H_
#define BRIDGE_CANN_DECLS_GRAPH_OPERATOR_FACTORY_H_

#include <vector>

#include "graph/operator.h"

namespace ge {
class OperatorFactory {
 public:
  static Operator CreateOperator(const char_t *operator_name, const char_t *operator_type);
  static graphStatus GetOpsTypeList(std::vector<AscendString> &all_ops);
  static bool IsExistOp(const char_t *operator_type);
};
}  // namespace ge

#endif  // BRIDGE_CANN_DECLS_GRAPH_OPERATOR_FACTORY_H_
