// bridge's declaration of CANN's exe_graph/runtime/storage_format.h: see ../../README.md.
#ifndef BRIDGE_CANN_DECLS_EXE_GRAPH_RUNTIME_STORAGE_FORMAT_H_
#define BRIDGE_CANN_DECLS_EXE_GRAPH_RUNTIME_STORAGE_FORMAT_H_

#include "graph/types.h"

namespace gert {
class StorageFormat {
 public:
  StorageFormat();
  ge::Format GetOriginFormat() const;
  void SetOriginFormat(const ge::Format origin_format);
  ge::Format GetStorageFormat() const;
  void SetStorageFormat(const ge::Format storage_format);
};
}  // namespace gert

#endif  // BRIDGE_CANN_DECLS_EXE_GRAPH_RUNTIME_STORAGE_FORMAT_H_
