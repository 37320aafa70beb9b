// bridge's declaration of CANN's graph/ascend_string.h: see ../README.md.
#ifndef BRIDGE_CANN_DECLS_GRAPH_ASCEND_STRING_H_
#define BRIDGE_CANN_DECLS_GRAPH_ASCEND_STRING_H_

#include <cstddef>

#include "graph/types.h"

namespace ge {
class AscendString {
 public:
  AscendString() = default;
  AscendString(const char_t *name);  // NOLINT: implicit in CANN too
  AscendString(const char_t *name, size_t length);
  ~AscendString() = default;
  const char_t *GetString() const;
  size_t GetLength() const;
  size_t Hash() const;
  bool operator<(const AscendString &d) const;
  bool operator>(const AscendString &d) const;
  bool operator<=(const AscendString &d) const;
  bool operator>=(const AscendString &d) const;
  bool operator==(const AscendString &d) const;
  bool operator!=(const AscendString &d) const;
  size_t Find(const AscendString &ascend_string) const;
};
}  // namespace ge

#endif  // BRIDGE_CANN_DECLS_GRAPH_ASCEND_STRING_H_
