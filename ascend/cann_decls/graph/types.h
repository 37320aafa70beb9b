// bridge's declaration of CANN's graph/types.h (the parts the generated C++ uses): see ../README.md.
#ifndef BRIDGE_CANN_DECLS_GRAPH_TYPES_H_
#define BRIDGE_CANN_DECLS_GRAPH_TYPES_H_

#include <cstddef>
#include <cstdint>

namespace ge {
using char_t = char;
using float32_t = float;
using float64_t = double;

enum DataType {
  DT_FLOAT = 0,
  DT_FLOAT16 = 1,
  DT_INT8 = 2,
  DT_INT32 = 3,
  DT_UINT8 = 4,
  DT_INT16 = 6,
  DT_UINT16 = 7,
  DT_UINT32 = 8,
  DT_INT64 = 9,
  DT_UINT64 = 10,
  DT_DOUBLE = 11,
  DT_BOOL = 12,
  DT_STRING = 13,
  DT_COMPLEX64 = 16,
  DT_COMPLEX128 = 17,
  DT_BF16 = 27,
  DT_UNDEFINED = 28,
  DT_MAX
};

enum Format {
  FORMAT_NCHW = 0,
  FORMAT_NHWC = 1,
  FORMAT_ND = 2,
  FORMAT_NC1HWC0 = 3,
  FORMAT_FRACTAL_Z = 4,
  FORMAT_RESERVED
};

enum Placement { kPlacementHost = 0, kPlacementDevice = 1, kPlacementEnd };
}  // namespace ge

#endif  // BRIDGE_CANN_DECLS_GRAPH_TYPES_H_
