// bridge's declaration of CANN's exe_graph/runtime/storage_shape.h: see ../../README.md.
#ifndef BRIDGE_CANN_DECLS_EXE_GRAPH_RUNTIME_STORAGE_SHAPE_H_
#define BRIDGE_CANN_DECLS_EXE_GRAPH_RUNTIME_STORAGE_SHAPE_H_

#include <cstdint>
#include <initializer_list>

#include "exe_graph/runtime/shape.h"

namespace gert {
class StorageShape {
 public:
  StorageShape();
  StorageShape(const std::initializer_list<int64_t> &origin_shape, const std::initializer_list<int64_t> &storage_shape);
  const Shape &GetOriginShape() const;
  const Shape &GetStorageShape() const;
  Shape &MutableOriginShape();
  Shape &MutableStorageShape();
  bool operator==(const StorageShape &other) const;
  bool operator!=(const StorageShape &other) const;
};
}  // namespace gert

#endif  // BRIDGE_CANN_DECLS_EXE_GRAPH_RUNTIME_STORAGE_SHAPE_H_
