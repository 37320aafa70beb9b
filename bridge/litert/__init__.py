"""bridge's TFLite kernels as LiteRT custom ops (native/: the C++ library,
built by bridge.native.litert_build; runtime.py: running a .tflite with them)."""
