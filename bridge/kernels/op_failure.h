// A failure the user caused (bad input or attributes), framework-free: the
// onnxruntime and LiteRT kernels throw it and turn it into their runtime's error.
// The message says the same as the Python specs' bridge.ops.OpError:
// "Op: argument 'arg': message", with shapes written by dims() as [2,3].
#ifndef BRIDGE_KERNELS_OP_FAILURE_H_
#define BRIDGE_KERNELS_OP_FAILURE_H_

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace bridge {

struct OpFailure : std::runtime_error {
  OpFailure(const std::string& op, const std::string& arg, const std::string& msg)
      : std::runtime_error(op + ": argument '" + arg + "': " + msg) {}
};

inline std::string dims(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace bridge

#endif  // BRIDGE_KERNELS_OP_FAILURE_H_
