// bridge's declaration of CANN's exe_graph/runtime/infer_datatype_context.h: see ../../README.md.
#ifndef BRIDGE_CANN_DECLS_EXE_GRAPH_RUNTIME_INFER_DATATYPE_CONTEXT_H_
#define BRIDGE_CANN_DECLS_EXE_GRAPH_RUNTIME_INFER_DATATYPE_CONTEXT_H_

#include <cstddef>

#include "exe_graph/runtime/extended_kernel_context.h"
#include "graph/error_codes.h"
#include "graph/types.h"

namespace gert {
class InferDataTypeContext : public ExtendedKernelContext {
 public:
  ge::DataType GetInputDataType(const size_t index) const;
  ge::DataType GetOptionalInputDataType(const size_t ir_index) const;
  ge::DataType GetDynamicInputDataType(const size_t ir_index, const size_t relative_index) const;
  ge::DataType GetRequiredInputDataType(const size_t ir_index) const;
  ge::DataType GetOutputDataType(const size_t index) const;
  ge::graphStatus SetOutputDataType(const size_t index, const ge::DataType datatype);
};
}  // namespace gert

#endif  // BRIDGE_CANN_DECLS_EXE_GRAPH_RUNTIME_INFER_DATATYPE_CONTEXT_H_
