// bridge's declaration of CANN's exe_graph/runtime/infer_shape_context.h: see ../../README.md.
#ifndef BRIDGE_CANN_DECLS_EXE_GRAPH_RUNTIME_INFER_SHAPE_CONTEXT_H_
#define BRIDGE_CANN_DECLS_EXE_GRAPH_RUNTIME_INFER_SHAPE_CONTEXT_H_

#include <cstddef>

#include "exe_graph/runtime/extended_kernel_context.h"
#include "exe_graph/runtime/shape.h"
#include "exe_graph/runtime/tensor.h"

namespace gert {
class InferShapeContext : public ExtendedKernelContext {
 public:
  const Shape *GetInputShape(const size_t index) const;
  const Tensor *GetInputTensor(const size_t index) const;
  const Tensor *GetOptionalInputTensor(const size_t ir_index) const;
  const Shape *GetOptionalInputShape(const size_t ir_index) const;
  const Shape *GetDynamicInputShape(const size_t ir_index, const size_t relative_index) const;
  const Tensor *GetRequiredInputTensor(const size_t ir_index) const;
  const Shape *GetRequiredInputShape(const size_t ir_index) const;
  Shape *GetOutputShape(const size_t index);
};
}  // namespace gert

#endif  // BRIDGE_CANN_DECLS_EXE_GRAPH_RUNTIME_INFER_SHAPE_CONTEXT_H_
