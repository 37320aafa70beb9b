// bridge's declaration of CANN's exe_graph/runtime/runtime_attrs.h (with the
// TypedContinuousVector of continuous_vector.h): see ../../README.md.
#ifndef BRIDGE_CANN_DECLS_EXE_GRAPH_RUNTIME_RUNTIME_ATTRS_H_
#define BRIDGE_CANN_DECLS_EXE_GRAPH_RUNTIME_RUNTIME_ATTRS_H_

#include <cstddef>
#include <cstdint>

#include "exe_graph/runtime/tensor.h"

namespace gert {
template <typename T>
class TypedContinuousVector {
 public:
  size_t GetSize() const;
  size_t GetCapacity() const;
  T *MutableData();
  const T *GetData() const;
};

class ContinuousVectorVector;

class RuntimeAttrs {
 public:
  template <typename T>
  const T *GetAttrPointer(size_t index) const;
  const int64_t *GetInt(const size_t index) const;
  const TypedContinuousVector<int64_t> *GetListInt(const size_t index) const;
  const ContinuousVectorVector *GetListListInt(const size_t index) const;
  const char *GetStr(const size_t index) const;
  const Tensor *GetTensor(const size_t index) const;
  const float *GetFloat(const size_t index) const;
  const bool *GetBool(const size_t index) const;
  const TypedContinuousVector<float> *GetListFloat(const size_t index) const;
  size_t GetAttrNum() const;
  RuntimeAttrs() = delete;
  RuntimeAttrs(const RuntimeAttrs &) = delete;
  RuntimeAttrs(RuntimeAttrs &&) = delete;
  RuntimeAttrs &operator=(const RuntimeAttrs &) = delete;
  RuntimeAttrs &operator=(RuntimeAttrs &&) = delete;
};
}  // namespace gert

#endif  // BRIDGE_CANN_DECLS_EXE_GRAPH_RUNTIME_RUNTIME_ATTRS_H_
