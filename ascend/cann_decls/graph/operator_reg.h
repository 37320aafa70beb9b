// bridge's declaration of CANN's graph/operator_reg.h: REG_OP and its port / attribute
// macros, and the op_proto shape-function registration. See ../README.md.
//
// CANN's REG_OP expands to a class op::<Op> deriving ge::Operator whose constructor registers
// the ports and attributes; ours keeps that shape (the same macro names and arguments, the
// attribute default built as Operator::Op<Type>(default), so a wrong type name or a default
// of the wrong type fails here as it does there) with a chain of declared calls for a body.
#ifndef BRIDGE_CANN_DECLS_GRAPH_OPERATOR_REG_H_
#define BRIDGE_CANN_DECLS_GRAPH_OPERATOR_REG_H_

#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "graph/operator.h"
#include "graph/operator_factory.h"
#include "graph/tensor.h"
#include "graph/types.h"

namespace ge {
class TensorType {
 public:
  explicit TensorType(DataType dt);
  TensorType(const std::initializer_list<DataType> &initial_types);
  static TensorType ALL();
  static TensorType FLOAT();
  static TensorType NumberType();
  static TensorType RealNumberType();
  static TensorType IndexNumberType();
};

// bridge's: what the REG_OP body is chained on (declared, never defined).
class BridgeOpRegChain {
 public:
  BridgeOpRegChain &Input(const char_t *name, const TensorType &types);
  BridgeOpRegChain &OptionalInput(const char_t *name, const TensorType &types);
  BridgeOpRegChain &DynamicInput(const char_t *name, const TensorType &types);
  BridgeOpRegChain &Output(const char_t *name, const TensorType &types);
  BridgeOpRegChain &DynamicOutput(const char_t *name, const TensorType &types);
  template <typename T>
  BridgeOpRegChain &Attr(const char_t *name, const T &default_value);
  template <typename T>
  BridgeOpRegChain &RequiredAttr(const char_t *name);
  void End(const char_t *op_type);
};

using InferShapeFunc = std::function<graphStatus(Operator &)>;
using VerifyFunc = std::function<graphStatus(Operator &)>;

class InferShapeFuncRegister {
 public:
  InferShapeFuncRegister(const char_t *operator_type, const InferShapeFunc &infer_shape_func);
};

class VerifyFuncRegister {
 public:
  VerifyFuncRegister(const char_t *operator_type, const VerifyFunc &verify_func);
};
}  // namespace ge

#define REG_OP(x)                                              \
  namespace op {                                               \
  class x : public Operator {                                  \
   public:                                                     \
    explicit x(const char_t *name) : Operator(name, #x) {      \
      BridgeRegister();                                        \
    }                                                          \
    explicit x(const AscendString &name) : Operator(name, #x) { \
      BridgeRegister();                                        \
    }                                                          \
    x() : Operator(#x) {                                       \
      BridgeRegister();                                        \
    }                                                          \
                                                               \
   private:                                                    \
    void BridgeRegister() {                                    \
      BridgeOpRegChain()

// Each macro follows a `.` in the generated text: `.INPUT(x, t)` is `.Input("x", t)`.
#define INPUT(x, t) Input(#x, t)
#define OPTIONAL_INPUT(x, t) OptionalInput(#x, t)
#define DYNAMIC_INPUT(x, t) DynamicInput(#x, t)
#define OUTPUT(x, t) Output(#x, t)
#define DYNAMIC_OUTPUT(x, t) DynamicOutput(#x, t)
#define ATTR(x, Type, ...) Attr(#x, Op##Type(__VA_ARGS__))
#define REQUIRED_ATTR(x, Type) RequiredAttr<Op##Type>(#x)
// It closes the class and namespace op that REG_OP opened (no `;` follows it).
#define OP_END_FACTORY_REG(x)                                                      \
  End(#x);                                                                         \
  }                                                                                \
  }                                                                                \
  ;                                                                                \
  static_assert(sizeof(x) >= sizeof(Operator), "OP_END_FACTORY_REG names the op REG_OP began"); \
  }

#define BRIDGE_DECLS_PASTE_(a, b) a##b
#define BRIDGE_DECLS_PASTE(a, b) BRIDGE_DECLS_PASTE_(a, b)

#define IMPLEMT_COMMON_INFERFUNC(func_name) static graphStatus func_name(Operator &op)
#define IMPLEMT_VERIFIER(op_name, func_name) static graphStatus func_name(op::op_name op)
#define COMMON_INFER_FUNC_REG(op_name, x)                                                      \
  static const InferShapeFuncRegister BRIDGE_DECLS_PASTE(bridge_infer_register_, __COUNTER__)( \
      #op_name, [](Operator &v) { return x(v); })

#endif  // BRIDGE_CANN_DECLS_GRAPH_OPERATOR_REG_H_
