// The C-ABI harness (cuda_harness/harness.cu) with every kernel, launch and
// runtime call on the CPU emulator (emulator.h, emulator.cc) and the stand-in
// cuBLASLt (cublaslt.cc): the same sources the GPU runs, checked without a GPU.
#include "emulator.h"

#include "harness.cu"
