// bridge's declaration of CANN's exe_graph/runtime/eager_op_execution_context.h: see ../../README.md.
#ifndef BRIDGE_CANN_DECLS_EXE_GRAPH_RUNTIME_EAGER_OP_EXECUTION_CONTEXT_H_
#define BRIDGE_CANN_DECLS_EXE_GRAPH_RUNTIME_EAGER_OP_EXECUTION_CONTEXT_H_

#include <cstddef>

#include "exe_graph/runtime/extended_kernel_context.h"
#include "exe_graph/runtime/storage_format.h"
#include "exe_graph/runtime/storage_shape.h"
#include "exe_graph/runtime/tensor.h"
#include "graph/ascend_string.h"
#include "graph/types.h"

namespace gert {
using rtStream = void *;

class EagerOpExecutionContext : public ExtendedKernelContext {
 public:
  rtStream GetStream() const;
  const Tensor *GetInputTensor(size_t index) const;
  const Tensor *GetRequiredInputTensor(size_t ir_index) const;
  const Tensor *GetOptionalInputTensor(size_t ir_index) const;
  const Tensor *GetDynamicInputTensor(size_t ir_index, size_t relative_index) const;
  Tensor *MallocOutputTensor(size_t index, const StorageShape &shape, const StorageFormat &format, ge::DataType dtype);
  Tensor *MakeOutputRefInput(size_t output_index, size_t input_index) const;
  void *MallocWorkSpace(size_t size);
  const Tensor *GetOutputTensor(size_t index) const;
  rtStream RequestAttachedStream(const ge::AscendString &key);
};
}  // namespace gert

#endif  // BRIDGE_CANN_DECLS_EXE_GRAPH_RUNTIME_EAGER_OP_EXECUTION_CONTEXT_H_
