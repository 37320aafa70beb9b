// bridge's declaration of CANN's exe_graph/runtime/op_compile_context.h (the 2026 one, whose
// OpCompileContext has the input tensors): see ../../README.md.
#ifndef BRIDGE_CANN_DECLS_EXE_GRAPH_RUNTIME_OP_COMPILE_CONTEXT_H_
#define BRIDGE_CANN_DECLS_EXE_GRAPH_RUNTIME_OP_COMPILE_CONTEXT_H_

#include <cstddef>

#include "exe_graph/runtime/extended_kernel_context.h"
#include "exe_graph/runtime/tensor.h"
#include "graph/ascend_string.h"
#include "graph/error_codes.h"
#include "platform/platform_infos_def.h"

namespace gert {
class OpCompileContext : public ExtendedKernelContext {
 public:
  const Tensor *GetInputTensor(size_t index) const;
  const Tensor *GetRequiredInputTensor(size_t ir_index) const;
  const Tensor *GetOptionalInputTensor(size_t ir_index) const;
  const Tensor *GetDynamicInputTensor(size_t ir_index, size_t relative_index) const;
  const Tensor *GetOutputTensor(size_t index) const;
  ge::graphStatus GetOption(const ge::AscendString &option_key, ge::AscendString &option) const;
  ge::graphStatus GetPlatformInfos(fe::PlatFormInfos &platform_info, fe::OptionalInfos &optional_infos) const;
};
}  // namespace gert

#endif  // BRIDGE_CANN_DECLS_EXE_GRAPH_RUNTIME_OP_COMPILE_CONTEXT_H_
