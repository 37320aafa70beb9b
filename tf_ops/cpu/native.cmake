# CMake pieces both native libraries share (tf_ops/CMakeLists.txt and
# onnx_plugins/native/CMakeLists.txt): the CPU target and the oneDNN link.

# BRIDGE_CPU_FLAGS: the instruction-set flags bridge/cpu_flags.py chose by what
# compiles on this CPU (-march=native, less any feature the headers refuse; empty
# for a portable build).
set(BRIDGE_CPU_FLAGS "" CACHE STRING "CPU flags, ;-separated (bridge/cpu_flags.py)")
function(bridge_cpu_target target)
  target_compile_options(${target} PRIVATE ${BRIDGE_CPU_FLAGS})
endfunction()

# Links the oneDNN install at BRIDGE_DNNL_ROOT (bridge.native.onednn_root()) into
# `target` and defines BRIDGE_HAVE_DNNL=1; sets `found` in the caller. Extra
# link options for that case follow in ARGN.
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
  target_link_libraries(${target} PRIVATE ${DNNL_LIB})
  target_link_options(${target} PRIVATE "-Wl,-rpath,${DNNL_LIB_DIR}" ${ARGN})
  set(${found} TRUE PARENT_SCOPE)
endfunction()
