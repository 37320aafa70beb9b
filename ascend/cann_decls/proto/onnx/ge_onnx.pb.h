// bridge's declaration of what protoc makes of CANN's ge_onnx.proto (package ge.onnx) and the
// few protobuf runtime types that generated code exposes, for the parser plugins' NodeProto
// and AttributeProto reads: see ../../README.md.
#ifndef BRIDGE_CANN_DECLS_PROTO_ONNX_GE_ONNX_PB_H_
#define BRIDGE_CANN_DECLS_PROTO_ONNX_GE_ONNX_PB_H_

#include <cstdint>
#include <string>

namespace google {
namespace protobuf {
class Message {
 public:
  virtual ~Message();
};

template <typename Element>
class RepeatedField {
 public:
  using const_iterator = const Element *;
  int size() const;
  const Element &Get(int index) const;
  const_iterator begin() const;
  const_iterator end() const;
};

template <typename Element>
class RepeatedPtrField {
 public:
  class const_iterator {
   public:
    const Element &operator*() const;
    const Element *operator->() const;
    const_iterator &operator++();
    bool operator==(const const_iterator &other) const;
    bool operator!=(const const_iterator &other) const;
  };
  int size() const;
  const Element &Get(int index) const;
  const_iterator begin() const;
  const_iterator end() const;
};
}  // namespace protobuf
}  // namespace google

namespace ge {
namespace onnx {
enum AttributeProto_AttributeType : int {
  AttributeProto_AttributeType_UNDEFINED = 0,
  AttributeProto_AttributeType_FLOAT = 1,
  AttributeProto_AttributeType_INT = 2,
  AttributeProto_AttributeType_STRING = 3,
  AttributeProto_AttributeType_TENSOR = 4,
  AttributeProto_AttributeType_GRAPH = 5,
  AttributeProto_AttributeType_FLOATS = 6,
  AttributeProto_AttributeType_INTS = 7,
  AttributeProto_AttributeType_STRINGS = 8,
  AttributeProto_AttributeType_TENSORS = 9,
  AttributeProto_AttributeType_GRAPHS = 10,
};

class AttributeProto : public ::google::protobuf::Message {
 public:
  using AttributeType = AttributeProto_AttributeType;
  static constexpr AttributeType UNDEFINED = AttributeProto_AttributeType_UNDEFINED;
  static constexpr AttributeType FLOAT = AttributeProto_AttributeType_FLOAT;
  static constexpr AttributeType INT = AttributeProto_AttributeType_INT;
  static constexpr AttributeType STRING = AttributeProto_AttributeType_STRING;
  static constexpr AttributeType TENSOR = AttributeProto_AttributeType_TENSOR;
  static constexpr AttributeType GRAPH = AttributeProto_AttributeType_GRAPH;
  static constexpr AttributeType FLOATS = AttributeProto_AttributeType_FLOATS;
  static constexpr AttributeType INTS = AttributeProto_AttributeType_INTS;
  static constexpr AttributeType STRINGS = AttributeProto_AttributeType_STRINGS;
  static constexpr AttributeType TENSORS = AttributeProto_AttributeType_TENSORS;
  static constexpr AttributeType GRAPHS = AttributeProto_AttributeType_GRAPHS;
  const std::string &name() const;
  AttributeType type() const;
  float f() const;
  int64_t i() const;
  const std::string &s() const;
  int floats_size() const;
  float floats(int index) const;
  const ::google::protobuf::RepeatedField<float> &floats() const;
  int ints_size() const;
  int64_t ints(int index) const;
  const ::google::protobuf::RepeatedField<int64_t> &ints() const;
};

class NodeProto : public ::google::protobuf::Message {
 public:
  const std::string &name() const;
  const std::string &op_type() const;
  const std::string &domain() const;
  int input_size() const;
  const std::string &input(int index) const;
  int output_size() const;
  const std::string &output(int index) const;
  int attribute_size() const;
  const AttributeProto &attribute(int index) const;
  const ::google::protobuf::RepeatedPtrField<AttributeProto> &attribute() const;
};
}  // namespace onnx
}  // namespace ge

#endif  // BRIDGE_CANN_DECLS_PROTO_ONNX_GE_ONNX_PB_H_
