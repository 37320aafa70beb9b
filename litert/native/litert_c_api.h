// The few LiteRT C API declarations bridge's kernels and harness use, written
// here from LiteRT's public documentation (no package ships LiteRT's headers).
// They are not trusted: bridge/native.py checks at build time that the installed
// libLiteRt.so exports every function declared below (it reads this file for
// the list), the layouts are pinned by static_assert, and a self-test model runs
// once per build (litert/runtime.py). Known to work with ai-edge-litert
// 2.3.0 (the API has not changed since LiteRT 2.0 for these calls).
//
// Keep one declaration per line, `LiteRtStatus LiteRtName(` or `void LiteRtName(`:
// the build check parses them.
#ifndef BRIDGE_LITERT_C_API_H_
#define BRIDGE_LITERT_C_API_H_

#include <stddef.h>
#include <stdint.h>

extern "C" {

typedef int LiteRtStatus;  // an enum in LiteRT: 0 is success
constexpr LiteRtStatus kBridgeLiteRtOk = 0;
constexpr LiteRtStatus kBridgeLiteRtInvalidArgument = 1;
constexpr LiteRtStatus kBridgeLiteRtRuntimeFailure = 3;

typedef size_t LiteRtParamIndex;
typedef int LiteRtHwAcceleratorSet;
constexpr LiteRtHwAcceleratorSet kBridgeLiteRtCpu = 1;  // bit 0: the CPU (XNNPack and the builtin kernels)

// Element types carry TFLite's TfLiteType numbers.
constexpr int kBridgeLiteRtFloat32 = 1;
constexpr int kBridgeLiteRtInt32 = 2;
constexpr int kBridgeLiteRtUInt8 = 3;
constexpr int kBridgeLiteRtInt64 = 4;
constexpr int kBridgeLiteRtBool = 6;
constexpr int kBridgeLiteRtInt16 = 7;
constexpr int kBridgeLiteRtInt8 = 9;
constexpr int kBridgeLiteRtFloat16 = 10;
constexpr int kBridgeLiteRtFloat64 = 11;
constexpr int kBridgeLiteRtHostMemory = 1;  // LiteRtTensorBufferType
constexpr int kBridgeLiteRtLockRead = 0;    // LiteRtTensorBufferLockMode
constexpr int kBridgeLiteRtLockWrite = 1;

constexpr int kBridgeLiteRtMaxRank = 8;

// A tensor's shape: 7 bits of rank and a strides flag share the first 32-bit word.
typedef struct {
  unsigned int rank : 7;
  bool has_strides : 1;
  int32_t dimensions[kBridgeLiteRtMaxRank];
  uint32_t strides[kBridgeLiteRtMaxRank];
} LiteRtLayout;

typedef struct {
  int element_type;  // an enum in LiteRT
  LiteRtLayout layout;
} LiteRtRankedTensorType;

static_assert(sizeof(LiteRtLayout) == 68, "LiteRtLayout: 4 + 8*4 + 8*4 bytes");
static_assert(offsetof(LiteRtLayout, dimensions) == 4, "LiteRtLayout: rank and has_strides in one word");
static_assert(sizeof(LiteRtRankedTensorType) == 72, "LiteRtRankedTensorType: element type + layout");

typedef struct LiteRtEnvironmentT* LiteRtEnvironment;
typedef struct LiteRtModelT* LiteRtModel;
typedef struct LiteRtOptionsT* LiteRtOptions;
typedef struct LiteRtOpaqueOptionsT* LiteRtOpaqueOptions;
typedef struct LiteRtCompiledModelT* LiteRtCompiledModel;
typedef struct LiteRtTensorBufferT* LiteRtTensorBuffer;
typedef struct LiteRtSignatureT* LiteRtSignature;
typedef struct LiteRtTensorT* LiteRtTensor;
typedef struct LiteRtEnvOptionT LiteRtEnvOption;  // only ever passed as an empty list

// A custom op: LiteRT calls Init once per node with the node's custom options
// (the FlexBuffer), GetOutputLayouts when the node is prepared, Run when it runs,
// Destroy once per node. All four get the user_data given at registration, and
// LiteRT 2.x ignores the status they return (see litert/native/common.h).
typedef struct {
  LiteRtStatus (*Init)(void* user_data, const void* init_data, size_t init_data_size);
  LiteRtStatus (*GetOutputLayouts)(void* user_data, size_t num_inputs, const LiteRtLayout* input_layouts,
                                   size_t num_outputs, LiteRtLayout* output_layouts);
  LiteRtStatus (*Run)(void* user_data, size_t num_inputs, const LiteRtTensorBuffer* inputs, size_t num_outputs,
                      LiteRtTensorBuffer* outputs);
  LiteRtStatus (*Destroy)(void* user_data);
} LiteRtCustomOpKernel;
static_assert(sizeof(LiteRtCustomOpKernel) == 4 * sizeof(void*), "LiteRtCustomOpKernel: four callbacks");

LiteRtStatus LiteRtCreateEnvironment(int num_options, const LiteRtEnvOption* options, LiteRtEnvironment* environment);
void LiteRtDestroyEnvironment(LiteRtEnvironment environment);
LiteRtStatus LiteRtCreateModelFromFile(LiteRtEnvironment environment, const char* filename, LiteRtModel* model);
void LiteRtDestroyModel(LiteRtModel model);
LiteRtStatus LiteRtGetNumModelSignatures(LiteRtModel model, LiteRtParamIndex* num_signatures);
LiteRtStatus LiteRtGetModelSignature(LiteRtModel model, LiteRtParamIndex signature_index, LiteRtSignature* signature);
LiteRtStatus LiteRtGetNumSignatureInputs(LiteRtSignature signature, LiteRtParamIndex* num_inputs);
LiteRtStatus LiteRtGetNumSignatureOutputs(LiteRtSignature signature, LiteRtParamIndex* num_outputs);
LiteRtStatus LiteRtGetSignatureInputName(LiteRtSignature signature, LiteRtParamIndex input_idx, const char** input_name);
LiteRtStatus LiteRtGetSignatureOutputName(LiteRtSignature signature, LiteRtParamIndex output_idx, const char** output_name);
LiteRtStatus LiteRtGetSignatureInputTensorByIndex(LiteRtSignature signature, LiteRtParamIndex input_idx, LiteRtTensor* tensor);
LiteRtStatus LiteRtGetSignatureOutputTensorByIndex(LiteRtSignature signature, LiteRtParamIndex output_idx, LiteRtTensor* tensor);
LiteRtStatus LiteRtGetRankedTensorType(LiteRtTensor tensor, LiteRtRankedTensorType* ranked_tensor_type);
LiteRtStatus LiteRtCreateOptions(LiteRtOptions* options);
void LiteRtDestroyOptions(LiteRtOptions options);
LiteRtStatus LiteRtSetOptionsHardwareAccelerators(LiteRtOptions options, LiteRtHwAcceleratorSet hardware_accelerators);
// A typed payload on the options: the CPU accelerator reads identifier "xnnpack",
// a C string of TOML lines ("num_threads = 2"). Added options are the options' own.
LiteRtStatus LiteRtCreateOpaqueOptions(const char* payload_identifier, void* payload_data,
                                       void (*payload_destructor)(void* payload_data), LiteRtOpaqueOptions* options);
void LiteRtDestroyOpaqueOptions(LiteRtOpaqueOptions options);
LiteRtStatus LiteRtAddOpaqueOptions(LiteRtOptions options, LiteRtOpaqueOptions opaque_options);
LiteRtStatus LiteRtAddCustomOpKernelOption(LiteRtOptions options, const char* custom_op_name, int custom_op_version, const LiteRtCustomOpKernel* custom_op_kernel, void* custom_op_kernel_user_data);
LiteRtStatus LiteRtCreateCompiledModel(LiteRtEnvironment environment, LiteRtModel model, LiteRtOptions compilation_options, LiteRtCompiledModel* compiled_model);
void LiteRtDestroyCompiledModel(LiteRtCompiledModel compiled_model);
LiteRtStatus LiteRtCompiledModelResizeInputTensor(LiteRtCompiledModel compiled_model, LiteRtParamIndex signature_index, LiteRtParamIndex input_index, const int* dims, size_t dims_size);
LiteRtStatus LiteRtGetCompiledModelOutputTensorLayouts(LiteRtCompiledModel compiled_model, LiteRtParamIndex signature_index, size_t num_layouts, LiteRtLayout* layouts, bool update_allocation);
LiteRtStatus LiteRtRunCompiledModel(LiteRtCompiledModel compiled_model, LiteRtParamIndex signature_index, size_t num_input_buffers, LiteRtTensorBuffer* input_buffers, size_t num_output_buffers, LiteRtTensorBuffer* output_buffers);
LiteRtStatus LiteRtCreateManagedTensorBuffer(LiteRtEnvironment env, int buffer_type, const LiteRtRankedTensorType* tensor_type, size_t buffer_size, LiteRtTensorBuffer* buffer);
void LiteRtDestroyTensorBuffer(LiteRtTensorBuffer buffer);
LiteRtStatus LiteRtGetTensorBufferTensorType(LiteRtTensorBuffer tensor_buffer, LiteRtRankedTensorType* tensor_type);
LiteRtStatus LiteRtGetTensorBufferSize(LiteRtTensorBuffer tensor_buffer, size_t* size);
LiteRtStatus LiteRtLockTensorBuffer(LiteRtTensorBuffer tensor_buffer, void** host_mem_addr, int lock_mode);
LiteRtStatus LiteRtUnlockTensorBuffer(LiteRtTensorBuffer buffer);

}  // extern "C"

#endif  // BRIDGE_LITERT_C_API_H_
