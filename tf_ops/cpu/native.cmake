# CMake pieces the native libraries share (tf_ops/CMakeLists.txt,
# onnx_plugins/native/CMakeLists.txt, litert/native/CMakeLists.txt): the
# framework-free kernel cores, Eigen's headers, the CPU target and the oneDNN link.

# BRIDGE_KERNELS_DIR: the framework-free kernel cores (bridge/kernels), included
# as "kernels/<name>.h". bridge/native.py passes it; the default is the one
# beside this file, in a checkout (tf_ops/) or an install (bridge/tf_ops/).
if(EXISTS "${CMAKE_CURRENT_LIST_DIR}/../../bridge/kernels")
  set(_bridge_kernels "${CMAKE_CURRENT_LIST_DIR}/../../bridge/kernels")
else()
  set(_bridge_kernels "${CMAKE_CURRENT_LIST_DIR}/../../kernels")
endif()
set(BRIDGE_KERNELS_DIR "${_bridge_kernels}" CACHE PATH "the bridge/kernels folder")
# BRIDGE_OPS_GEN_DIR: the headers rendered from the op specs (bridge.native.op_headers():
# spec/<op>.h, spec/cores.h), which the kernel cores (bridge/ops/<op>/kernel.h,
# included as "ops/<op>/kernel.h") and the generic hosts include.
set(BRIDGE_OPS_GEN_DIR "" CACHE PATH "the rendered spec headers (spec/cores.h)")
function(bridge_use_kernels target)
  if(NOT EXISTS "${BRIDGE_KERNELS_DIR}/op_failure.h")
    message(FATAL_ERROR "BRIDGE_KERNELS_DIR=${BRIDGE_KERNELS_DIR} is not bridge/kernels (it has no op_failure.h)")
  endif()
  get_filename_component(parent "${BRIDGE_KERNELS_DIR}" DIRECTORY)
  target_include_directories(${target} PRIVATE ${parent})
  if(BRIDGE_OPS_GEN_DIR)
    target_include_directories(${target} PRIVATE ${BRIDGE_OPS_GEN_DIR})
    target_compile_definitions(${target} PRIVATE BRIDGE_HAVE_CORES=1)
  endif()
endfunction()

# BRIDGE_EIGEN_INCLUDE: a folder holding Eigen/Core, for the libraries whose
# framework does not bring Eigen (onnxruntime's, LiteRT's): YoloConvBnLeaky's GEMM
# road (bridge/kernels/conv_gemm.h). bridge.native.eigen_include() finds one.
set(BRIDGE_EIGEN_INCLUDE "" CACHE PATH "a folder with Eigen/Core (Debian libeigen3-dev: /usr/include/eigen3)")
function(bridge_use_eigen target)
  if(NOT EXISTS "${BRIDGE_EIGEN_INCLUDE}/Eigen/Core")
    message(FATAL_ERROR "BRIDGE_EIGEN_INCLUDE=${BRIDGE_EIGEN_INCLUDE} has no Eigen/Core; the kernel cores need "
      "Eigen's headers. Fix: apt-get install libeigen3-dev (or pip install tensorflow, whose headers carry Eigen), "
      "or set BRIDGE_EIGEN_INCLUDE to a folder holding Eigen/Core")
  endif()
  target_include_directories(${target} SYSTEM PRIVATE ${BRIDGE_EIGEN_INCLUDE})
endfunction()

# BRIDGE_CPU_FLAGS: the instruction-set flags bridge/cpu_flags.py chose by what
# compiles on this CPU (-march=native, less any feature the headers refuse; empty
# for a portable build).
set(BRIDGE_CPU_FLAGS "" CACHE STRING "CPU flags, ;-separated (bridge/cpu_flags.py)")
# -fno-trapping-math: without it GCC keeps the clamps in bridge's exp/sigmoid
# (kernels/fast_math.h) as branches and leaves those loops scalar; results are
# the same (no -ffast-math), only floating-point exception flags may differ.
function(bridge_cpu_target target)
  target_compile_options(${target} PRIVATE ${BRIDGE_CPU_FLAGS} -fno-trapping-math)
endfunction()

# Links the oneDNN install at BRIDGE_DNNL_ROOT (bridge.native.onednn_root()) into
# `target` and defines BRIDGE_HAVE_DNNL=1; sets `found` in the caller. Extra
# link options for that case follow in ARGN. libgomp (oneDNN's runtime) is linked
# too: conv_core.h sets its per-thread thread count around each primitive.
function(bridge_link_onednn target found)
  set(${found} FALSE PARENT_SCOPE)
  if(NOT BRIDGE_DNNL_ROOT)
    return()
  endif()
  find_library(DNNL_LIB NAMES dnnl PATHS ${BRIDGE_DNNL_ROOT}/lib ${BRIDGE_DNNL_ROOT}/lib64 NO_DEFAULT_PATH)
  if(NOT DNNL_LIB)
    message(WARNING "BRIDGE_DNNL_ROOT=${BRIDGE_DNNL_ROOT} has no libdnnl; building ${target} without oneDNN")
    return()
  endif()
  target_compile_definitions(${target} PRIVATE BRIDGE_HAVE_DNNL=1)
  target_include_directories(${target} PRIVATE ${BRIDGE_DNNL_ROOT}/include)
  get_filename_component(DNNL_LIB_DIR ${DNNL_LIB} DIRECTORY)
  target_link_libraries(${target} PRIVATE ${DNNL_LIB} gomp)
  target_link_options(${target} PRIVATE "-Wl,-rpath,${DNNL_LIB_DIR}" ${ARGN})
  set(${found} TRUE PARENT_SCOPE)
endfunction()
