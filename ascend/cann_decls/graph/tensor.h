// bridge's declaration of CANN's graph/tensor.h (ge::Shape, TensorDesc, Tensor): see ../README.md.
#ifndef BRIDGE_CANN_DECLS_GRAPH_TENSOR_H_
#define BRIDGE_CANN_DECLS_GRAPH_TENSOR_H_

#include <cstdint>
#include <vector>

#include "graph/ascend_string.h"
#include "graph/error_codes.h"
#include "graph/types.h"

namespace ge {
class Shape {
 public:
  Shape();
  explicit Shape(const std::vector<int64_t> &dims);
  size_t GetDimNum() const;
  int64_t GetDim(size_t idx) const;
  graphStatus SetDim(size_t idx, int64_t value);
  std::vector<int64_t> GetDims() const;
  int64_t GetShapeSize() const;
};

class TensorDesc {
 public:
  TensorDesc();
  explicit TensorDesc(Shape shape, Format format = FORMAT_ND, DataType dt = DT_FLOAT);
  TensorDesc(const TensorDesc &desc);
  TensorDesc(TensorDesc &&desc);
  TensorDesc &operator=(const TensorDesc &desc);
  TensorDesc &operator=(TensorDesc &&desc);
  void Update(const Shape &shape, Format format = FORMAT_ND, DataType dt = DT_FLOAT);
  Shape GetShape() const;
  void SetShape(const Shape &shape);
  graphStatus SetUnknownDimNumShape();
  Format GetFormat() const;
  void SetFormat(Format format);
  Shape GetOriginShape() const;
  void SetOriginShape(const Shape &origin_shape);
  Format GetOriginFormat() const;
  void SetOriginFormat(Format origin_format);
  DataType GetDataType() const;
  void SetDataType(DataType dt);
  graphStatus GetName(AscendString &name) const;
  void SetName(const char_t *name);
};

class Tensor {
 public:
  Tensor();
  explicit Tensor(const TensorDesc &tensor_desc);
  Tensor(const TensorDesc &tensor_desc, const std::vector<uint8_t> &data);
  Tensor(const TensorDesc &tensor_desc, const uint8_t *data, size_t size);
  Tensor(TensorDesc &&tensor_desc, std::vector<uint8_t> &&data);
  TensorDesc GetTensorDesc() const;
  graphStatus SetTensorDesc(const TensorDesc &tensor_desc);
  const uint8_t *GetData() const;
  uint8_t *GetData();
  size_t GetSize() const;
  graphStatus SetData(std::vector<uint8_t> &&data);
  graphStatus SetData(const std::vector<uint8_t> &data);
  graphStatus SetData(const uint8_t *data, size_t size);
  graphStatus SetData(const char_t *data);
  graphStatus SetFormat(const Format &format);
  Format GetFormat() const;
  graphStatus SetDataType(const DataType &dtype);
  DataType GetDataType() const;
};
}  // namespace ge

#endif  // BRIDGE_CANN_DECLS_GRAPH_TENSOR_H_
