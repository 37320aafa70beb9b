#!/usr/bin/env bash
# The GPU half of the CUDA work in one run: build the harness, run tests/test_cuda.py
# on the GPU, run benchmarks/cuda.py. For a machine with an NVIDIA GPU, nvcc,
# CMake and PyTorch but not necessarily this project installed (the device tool's
# machine: run it there as `bash benchmarks/cuda_device_check.sh`, see
# benchmarks/RESULTS.md). Writes device.txt, build.log, tests.log, check.txt (the
# `bridge cuda` table), bench.txt and bench.json under $OUT (else ./out-cuda).
# Exits with pytest's status.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-out-cuda}"
mkdir -p "$out"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export BRIDGE_CACHE="${BRIDGE_CACHE:-/tmp/bridge-cache}"
py="${PYTHON:-python3}"
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nvcc --version | tail -2
  "$py" -c "import torch; print('torch', torch.__version__, torch.version.cuda)"; } 2>&1 | tee "$out/device.txt"
"$py" -c "from bridge import cuda; print(cuda.library_path())" 2>&1 | tee "$out/build.log"
"$py" -m pytest tests/test_cuda.py -q -p no:cacheprovider -k "not emulator" 2>&1 | tee "$out/tests.log"
rc=${PIPESTATUS[0]}
"$py" -m bridge cuda 2>&1 | tee "$out/check.txt"
"$py" benchmarks/cuda.py --repeat 20 --inner 20 --json-out "$out/bench.json" 2>&1 | tee "$out/bench.txt"
exit "$rc"
