// bridge's declaration of CANN's exe_graph/runtime/shape.h (gert::Shape): see ../../README.md.
#ifndef BRIDGE_CANN_DECLS_EXE_GRAPH_RUNTIME_SHAPE_H_
#define BRIDGE_CANN_DECLS_EXE_GRAPH_RUNTIME_SHAPE_H_

#include <cstddef>
#include <cstdint>
#include <initializer_list>

namespace gert {
class Shape {
 public:
  static constexpr size_t kMaxDimNum = 25U;
  static constexpr int64_t kInvalidDimValue = INT64_MIN;
  Shape();
  Shape(const std::initializer_list<int64_t> &args);
  bool operator==(const Shape &rht) const;
  bool operator!=(const Shape &rht) const;
  int64_t GetShapeSize() const;
  bool IsScalar() const;
  void SetScalar();
  size_t GetDimNum() const;
  void SetDimNum(const size_t dim_num);
  int64_t GetDim(const size_t idx) const;
  const int64_t &operator[](const size_t idx) const;
  int64_t &operator[](const size_t idx);
  void SetDim(size_t idx, const int64_t dim_value);
  Shape &AppendDim(const int64_t value);
};
}  // namespace gert

#endif  // BRIDGE_CANN_DECLS_EXE_GRAPH_RUNTIME_SHAPE_H_
