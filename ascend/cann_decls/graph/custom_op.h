// bridge's declaration of CANN's graph/custom_op.h: the interfaces a GE custom operator
// implements (pure virtual, so a class missing a callback cannot be made by
// REG_AUTO_MAPPING_OP's `new`), and REG_AUTO_MAPPING_OP. See ../README.md.
#ifndef BRIDGE_CANN_DECLS_GRAPH_CUSTOM_OP_H_
#define BRIDGE_CANN_DECLS_GRAPH_CUSTOM_OP_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "exe_graph/runtime/eager_op_execution_context.h"
#include "exe_graph/runtime/infer_datatype_context.h"
#include "exe_graph/runtime/infer_shape_context.h"
#include "exe_graph/runtime/op_compile_context.h"
#include "graph/ascend_string.h"
#include "graph/error_codes.h"

namespace ge {
class BaseCustomOp {
 public:
  virtual ~BaseCustomOp() = default;
};

class PortableOp : virtual public BaseCustomOp {
 public:
  virtual graphStatus Serialize(std::vector<uint8_t> &buffer) = 0;
  virtual graphStatus Deserialize(const std::vector<uint8_t> &buffer) = 0;
  ~PortableOp() override = default;
};

class CompilableOp : virtual public BaseCustomOp {
 public:
  ~CompilableOp() override = default;
  virtual graphStatus Compile(gert::OpCompileContext *ctx) = 0;
};

class EagerExecuteOp : virtual public BaseCustomOp {
 public:
  ~EagerExecuteOp() override = default;
  virtual graphStatus Execute(gert::EagerOpExecutionContext *ctx) = 0;
};

class ShapeInferOp : virtual public BaseCustomOp {
 public:
  ~ShapeInferOp() override = default;
  virtual graphStatus InferShape(gert::InferShapeContext *ctx) = 0;
  virtual graphStatus InferDataType(gert::InferDataTypeContext *ctx) = 0;
};

using BaseOpCreator = std::function<std::unique_ptr<BaseCustomOp>()>;
using CustomOpCreateFunc = BaseCustomOp *(*)();

class CustomOpCreatorRegister {
 public:
  CustomOpCreatorRegister(const AscendString &operator_type, const BaseOpCreator &op_creator);
  CustomOpCreatorRegister(const AscendString &operator_type, const CustomOpCreateFunc op_creator);
  ~CustomOpCreatorRegister() = default;
};
}  // namespace ge

#define BRIDGE_DECLS_REG_JOIN_(a, b) a##b
#define BRIDGE_DECLS_REG_JOIN(a, b) BRIDGE_DECLS_REG_JOIN_(a, b)
#define REG_AUTO_MAPPING_OP(custom_op_class) BRIDGE_DECLS_REG_AUTO_MAPPING_OP(__COUNTER__, custom_op_class)
#define BRIDGE_DECLS_REG_AUTO_MAPPING_OP(ctr, custom_op_class)                       \
  static ge::BaseCustomOp *BRIDGE_DECLS_REG_JOIN(bridge_custom_op_creator_, ctr)() { \
    return new custom_op_class();                                                    \
  }                                                                                  \
  static const ge::CustomOpCreatorRegister BRIDGE_DECLS_REG_JOIN(bridge_custom_op_register_, ctr)( \
      #custom_op_class, BRIDGE_DECLS_REG_JOIN(bridge_custom_op_creator_, ctr))

#endif  // BRIDGE_CANN_DECLS_GRAPH_CUSTOM_OP_H_
