// bridge's declaration of CANN's exe_graph/runtime/extended_kernel_context.h (what every
// callback context shares; CANN derives it from KernelContext, protected): see ../../README.md.
#ifndef BRIDGE_CANN_DECLS_EXE_GRAPH_RUNTIME_EXTENDED_KERNEL_CONTEXT_H_
#define BRIDGE_CANN_DECLS_EXE_GRAPH_RUNTIME_EXTENDED_KERNEL_CONTEXT_H_

#include <cstddef>

#include "exe_graph/runtime/runtime_attrs.h"
#include "graph/types.h"

namespace gert {
class ExtendedKernelContext {
 public:
  size_t GetComputeNodeInputNum() const;
  size_t GetComputeNodeOutputNum() const;
  const RuntimeAttrs *GetAttrs() const;
  const ge::char_t *GetNodeType() const;
  const ge::char_t *GetNodeName() const;
  const ge::char_t *GetKernelName() const;
  const ge::char_t *GetKernelType() const;

 protected:
  ExtendedKernelContext() = default;
};
}  // namespace gert

#endif  // BRIDGE_CANN_DECLS_EXE_GRAPH_RUNTIME_EXTENDED_KERNEL_CONTEXT_H_
