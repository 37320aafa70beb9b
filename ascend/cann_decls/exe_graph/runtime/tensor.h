// bridge's declaration of CANN's exe_graph/runtime/tensor.h (gert::Tensor): see ../../README.md.
#ifndef BRIDGE_CANN_DECLS_EXE_GRAPH_RUNTIME_TENSOR_H_
#define BRIDGE_CANN_DECLS_EXE_GRAPH_RUNTIME_TENSOR_H_

#include <cstddef>
#include <cstdint>

#include "exe_graph/runtime/storage_format.h"
#include "exe_graph/runtime/storage_shape.h"
#include "graph/error_codes.h"
#include "graph/types.h"

namespace gert {
class Tensor {
 public:
  Tensor();
  Tensor(const StorageShape &storage_shape, const StorageFormat &storage_format, ge::DataType data_type);
  int64_t GetShapeSize() const;
  template <class T>
  const T *GetData() const;
  template <class T>
  T *GetData();
  const void *GetAddr() const;
  void *GetAddr();
  size_t GetSize() const;
  void SetSize(const size_t size);
  ge::DataType GetDataType() const;
  void SetDataType(const ge::DataType data_type);
  const Shape &GetStorageShape() const;
  Shape &MutableStorageShape();
  const Shape &GetOriginShape() const;
  Shape &MutableOriginShape();
  const StorageShape &GetShape() const;
  StorageShape &GetShape();
  ge::Format GetStorageFormat() const;
  void SetStorageFormat(const ge::Format storage_format);
  ge::Format GetOriginFormat() const;
  void SetOriginFormat(const ge::Format origin_format);
  const StorageFormat &GetFormat() const;
  StorageFormat &MutableFormat();
};
}  // namespace gert

#endif  // BRIDGE_CANN_DECLS_EXE_GRAPH_RUNTIME_TENSOR_H_
