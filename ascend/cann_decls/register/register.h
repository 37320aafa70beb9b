// bridge's declaration of CANN's register/register.h (with register_error_codes.h,
// register_fmk_types.h and the ImplyType of register_types.h): the ONNX parser plugin's
// registration, REGISTER_CUSTOM_OP. See ../README.md.
#ifndef BRIDGE_CANN_DECLS_REGISTER_REGISTER_H_
#define BRIDGE_CANN_DECLS_REGISTER_REGISTER_H_

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <set>
#include <string>
#include <vector>

#include "graph/ascend_string.h"
#include "graph/graph.h"
#include "graph/operator.h"
#include "graph/types.h"

namespace google {
namespace protobuf {
class Message;
}  // namespace protobuf
}  // namespace google

namespace domi {
using Status = uint32_t;
constexpr Status SUCCESS = 0U;
constexpr Status FAILED = 0xFFFFFFFFU;
constexpr Status PARAM_INVALID = 50331649U;

enum FrameworkType { CAFFE = 0, MINDSPORE = 1, TENSORFLOW = 3, ANDROID_NN = 4, ONNX = 5, FRAMEWORK_RESERVED = 6 };

enum class ImplyType : unsigned int {
  BUILDIN = 0,
  TVM,
  CUSTOM,
  AI_CPU,
  CCE,
  GELOCAL,
  HCCL,
  INVALID = 0xFFFFFFFF,
};

using ParseParamFunc = std::function<Status(const google::protobuf::Message *, ge::Operator &)>;
using ParseParamByOpFunc = std::function<Status(const ge::Operator &, ge::Operator &)>;
using ParseOpToGraphFunc = std::function<Status(const ge::Operator &, ge::Graph &)>;
using ParseSubgraphFuncV2 = std::function<Status(const ge::AscendString &subgraph_name, const ge::Graph &graph)>;

Status AutoMappingByOpFn(const ge::Operator &op_src, ge::Operator &op);

class OpRegistrationData {
 public:
  OpRegistrationData(const ge::char_t *om_optype);
  ~OpRegistrationData();
  OpRegistrationData &FrameworkType(const domi::FrameworkType &fmk_type);
  OpRegistrationData &OriginOpType(const std::vector<ge::AscendString> &ori_op_type_list);
  OpRegistrationData &OriginOpType(const ge::char_t *ori_op_type);
  OpRegistrationData &ParseParamsFn(const ParseParamFunc &parseParamFn);
  OpRegistrationData &ParseParamsByOperatorFn(const ParseParamByOpFunc &parse_param_by_op_fn);
  OpRegistrationData &ParseSubgraphPostFn(const ParseSubgraphFuncV2 &subgraph_post_fn);
  OpRegistrationData &ImplyType(const domi::ImplyType &imply_type);
  OpRegistrationData &DelInputWithCond(int32_t input_idx, const ge::char_t *attr_name, bool attr_value);
  OpRegistrationData &InputReorderVector(const std::vector<int32_t> &input_order);
  OpRegistrationData &ParseOpToGraphFn(const ParseOpToGraphFunc &parse_op_to_graph_fn);
  domi::ImplyType GetImplyType() const;
  domi::FrameworkType GetFrameworkType() const;
  ParseParamFunc GetParseParamFn() const;
  ParseOpToGraphFunc GetParseOpToGraphFn() const;
};

class OpReceiver {
 public:
  OpReceiver(OpRegistrationData &reg_data);  // NOLINT: REGISTER_CUSTOM_OP converts implicitly
  ~OpReceiver() = default;
};
}  // namespace domi

namespace ge {
using OpRegistrationData = domi::OpRegistrationData;
using OpReceiver = domi::OpReceiver;
}  // namespace ge

#define REGISTER_CUSTOM_OP(name) BRIDGE_REGISTER_CUSTOM_OP_UNIQ_HELPER(__COUNTER__, (name))
#define BRIDGE_REGISTER_CUSTOM_OP_UNIQ_HELPER(ctr, name) BRIDGE_REGISTER_CUSTOM_OP_UNIQ(ctr, name)
#define BRIDGE_REGISTER_CUSTOM_OP_UNIQ(ctr, name) \
  static OpReceiver register_op##ctr __attribute__((unused)) = OpRegistrationData(name)

#endif  // BRIDGE_CANN_DECLS_REGISTER_REGISTER_H_
