// bridge's declaration of CANN's graph/operator.h (ge::Operator): see ../README.md. Every
// non-deprecated `const char *` overload of SetAttr / GetAttr / SetInput is here, so overload
// resolution picks (or refuses) what CANN's would; AttrValue and NamedAttrs ones are left out.
#ifndef BRIDGE_CANN_DECLS_GRAPH_OPERATOR_H_
#define BRIDGE_CANN_DECLS_GRAPH_OPERATOR_H_

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "graph/ascend_string.h"
#include "graph/error_codes.h"
#include "graph/tensor.h"
#include "graph/types.h"

namespace ge {
class Graph;

class Operator {
 public:
  using OpInt = int64_t;
  using OpFloat = float32_t;
  using OpString = std::string;
  using OpAscendString = AscendString;
  using OpBool = bool;
  using OpTensor = Tensor;
  using OpType = DataType;
  using OpListInt = std::vector<int64_t>;
  using OpListFloat = std::vector<float32_t>;
  using OpListString = std::vector<std::string>;
  using OpListAscendString = std::vector<AscendString>;
  using OpListBool = std::vector<bool>;
  using OpListTensor = std::vector<Tensor>;
  using OpBytes = std::vector<uint8_t>;
  using OpListListInt = std::vector<std::vector<int64_t>>;
  using OpListType = std::vector<DataType>;

  Operator() {}
  explicit Operator(const char_t *type);
  Operator(const AscendString &name, const AscendString &type);
  Operator(const char_t *name, const char_t *type);
  virtual ~Operator() = default;

  bool IsEmpty() const;
  graphStatus GetName(AscendString &name) const;
  graphStatus GetOpType(AscendString &type) const;

  Operator &SetInput(const char_t *dst_name, const Operator &src_oprt);
  Operator &SetInput(const char_t *dst_name, const Operator &src_oprt, const char_t *name);
  Operator &SetInput(const char_t *dst_name, const Operator &src_oprt, uint32_t index);
  Operator &SetInput(uint32_t dst_index, const Operator &src_oprt, uint32_t src_index);
  Operator &SetInput(const char_t *dst_name, uint32_t dst_index, const Operator &src_oprt, const char_t *name);
  Operator &SetInput(const char_t *dst_name, uint32_t dst_index, const Operator &src_oprt);
  Operator &AddControlInput(const Operator &src_oprt);

  graphStatus GetInputConstData(const char_t *dst_name, Tensor &data) const;
  TensorDesc GetInputDescByName(const char_t *name) const;
  TensorDesc GetInputDesc(uint32_t index) const;
  TensorDesc GetOutputDescByName(const char_t *name) const;
  TensorDesc GetOutputDesc(uint32_t index) const;
  graphStatus TryGetInputDesc(const char_t *name, TensorDesc &tensor_desc) const;
  graphStatus UpdateInputDesc(const char_t *name, const TensorDesc &tensor_desc);
  graphStatus UpdateOutputDesc(const char_t *name, const TensorDesc &tensor_desc);
  graphStatus UpdateInputDesc(const uint32_t index, const TensorDesc &tensor_desc);
  graphStatus UpdateOutputDesc(const uint32_t index, const TensorDesc &tensor_desc);
  int32_t GetDynamicOutputNum(const char_t *name) const;
  int32_t GetDynamicInputNum(const char_t *name) const;
  TensorDesc GetDynamicInputDesc(const char_t *name, uint32_t index) const;
  graphStatus UpdateDynamicInputDesc(const char_t *name, uint32_t index, const TensorDesc &tensor_desc);
  TensorDesc GetDynamicOutputDesc(const char_t *name, uint32_t index) const;
  graphStatus UpdateDynamicOutputDesc(const char_t *name, uint32_t index, const TensorDesc &tensor_desc);
  graphStatus InferShapeAndType();
  size_t GetInputsSize() const;
  size_t GetOutputsSize() const;

  Operator &SetAttr(const char_t *name, int64_t attr_value);
  Operator &SetAttr(const char_t *name, int32_t attr_value);
  Operator &SetAttr(const char_t *name, uint32_t attr_value);
  graphStatus GetAttr(const char_t *name, int64_t &attr_value) const;
  graphStatus GetAttr(const char_t *name, int32_t &attr_value) const;
  graphStatus GetAttr(const char_t *name, uint32_t &attr_value) const;
  Operator &SetAttr(const char_t *name, const std::vector<int64_t> &attr_value);
  Operator &SetAttr(const char_t *name, const std::vector<int32_t> &attr_value);
  Operator &SetAttr(const char_t *name, const std::vector<uint32_t> &attr_value);
  Operator &SetAttr(const char_t *name, std::initializer_list<int64_t> &&attr_value);
  graphStatus GetAttr(const char_t *name, std::vector<int64_t> &attr_value) const;
  graphStatus GetAttr(const char_t *name, std::vector<int32_t> &attr_value) const;
  graphStatus GetAttr(const char_t *name, std::vector<uint32_t> &attr_value) const;
  Operator &SetAttr(const char_t *name, float32_t attr_value);
  graphStatus GetAttr(const char_t *name, float32_t &attr_value) const;
  Operator &SetAttr(const char_t *name, const std::vector<float32_t> &attr_value);
  graphStatus GetAttr(const char_t *name, std::vector<float32_t> &attr_value) const;
  Operator &SetAttr(const char_t *name, const char_t *attr_value);
  Operator &SetAttr(const char_t *name, const AscendString &attr_value);
  graphStatus GetAttr(const char_t *name, AscendString &attr_value) const;
  Operator &SetAttr(const char_t *name, const std::vector<AscendString> &attr_values);
  graphStatus GetAttr(const char_t *name, std::vector<AscendString> &attr_values) const;
  Operator &SetAttr(const char_t *name, bool attr_value);
  graphStatus GetAttr(const char_t *name, bool &attr_value) const;
  Operator &SetAttr(const char_t *name, const std::vector<bool> &attr_value);
  graphStatus GetAttr(const char_t *name, std::vector<bool> &attr_value) const;
  Operator &SetAttr(const char_t *name, const Tensor &attr_value);
  graphStatus GetAttr(const char_t *name, Tensor &attr_value) const;
  Operator &SetAttr(const char_t *name, const std::vector<Tensor> &attr_value);
  graphStatus GetAttr(const char_t *name, std::vector<Tensor> &attr_value) const;
  Operator &SetAttr(const char_t *name, const OpBytes &attr_value);
  graphStatus GetAttr(const char_t *name, OpBytes &attr_value) const;
  Operator &SetAttr(const char_t *name, const std::vector<std::vector<int64_t>> &attr_value);
  graphStatus GetAttr(const char_t *name, std::vector<std::vector<int64_t>> &attr_value) const;
  Operator &SetAttr(const char_t *name, const std::vector<DataType> &attr_value);
  graphStatus GetAttr(const char_t *name, std::vector<DataType> &attr_value) const;
  Operator &SetAttr(const char_t *name, const DataType &attr_value);
  graphStatus GetAttr(const char_t *name, DataType &attr_value) const;

  void DynamicInputRegister(const char_t *name, const uint32_t num, bool is_push_back = true);
  void DynamicInputRegister(const char_t *name, const uint32_t num, const char_t *datatype_symbol,
                            bool is_push_back = true);
  void DynamicOutputRegister(const char_t *name, const uint32_t num, bool is_push_back = true);
  void DynamicOutputRegister(const char_t *name, const uint32_t num, const char_t *datatype_symbol,
                             bool is_push_back = true);

 protected:
  // What REG_OP's registrations call (operator_reg.h).
  void InputRegister(const char_t *name);
  void OptionalInputRegister(const char_t *name);
  void OutputRegister(const char_t *name);
  void RequiredAttrRegister(const char_t *name);
  template <typename T>
  void AttrRegister(const char_t *name, const T &default_value);
};

using OperatorPtr = std::shared_ptr<Operator>;
}  // namespace ge

#endif  // BRIDGE_CANN_DECLS_GRAPH_OPERATOR_H_
