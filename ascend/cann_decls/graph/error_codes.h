// bridge's declaration of CANN's graph/error_codes.h (graphStatus): see ../README.md.
#ifndef BRIDGE_CANN_DECLS_GRAPH_ERROR_CODES_H_
#define BRIDGE_CANN_DECLS_GRAPH_ERROR_CODES_H_

#include <cstdint>

namespace ge {
using graphStatus = uint32_t;
constexpr graphStatus GRAPH_SUCCESS = 0U;
constexpr graphStatus GRAPH_FAILED = 0xFFFFFFFFU;
constexpr graphStatus GRAPH_PARAM_INVALID = 50331649U;
}  // namespace ge

#endif  // BRIDGE_CANN_DECLS_GRAPH_ERROR_CODES_H_
