"""`bridge cuda`: the CUDA kernels against the numpy references, on the GPU when
one is here, else on the CPU emulator; a table of errors, exit 1 on any failure."""
from __future__ import annotations

import json
import sys

NAME = "cuda"
HELP = "check the CUDA kernels against the numpy references (on a GPU, else on the CPU emulator)"
USES_TENSORFLOW = False  # a GPU box may have PyTorch and no TensorFlow

DESCRIPTION = (HELP + ". Every op, every kernel road (FusedLayerNorm forward/backward; YoloConvBnLeaky "
               "im2col + cuBLASLt and tensor cores; YoloDecode), float32/TF32/float16, on random inputs of "
               "several shapes; each error as a fraction of docs/ops.md's bound. Builds the kernels first "
               "(nvcc for the GPU; the CUDA headers and a C++ compiler for the emulator).")


def add_arguments(p):
    p.add_argument("--emulate", action="store_true", help="run on the CPU emulator even when a GPU is here")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")


def run(args) -> int:
    """argparse over bridge.api.cuda.check_cuda (the one implementation)."""
    from bridge import native
    from bridge.api.cuda import check_cuda
    from bridge.table import render
    try:
        found = check_cuda(args.emulate, seed=args.seed,
                           progress=False if args.json else (lambda line: print(line, file=sys.stderr, flush=True)))
    except native.BuildError as e:
        print(f"bridge cuda: {e}", file=sys.stderr)
        return 1
    rows, failed = found["rows"], found["failed"]
    if args.json:
        print(json.dumps(found, indent=1))
    else:
        print(render(["op", "road", "dtype", "shape", "error / allowed", "verdict"],
                     [[r["op"], r["road"], r["dtype"], r["shape"],
                       "" if r["excess"] is None else f"{r['excess']:.3f}", r["verdict"]] for r in rows]))
        print(f"{len(rows) - failed} of {len(rows)} checks pass" + (f"; {failed} do not" if failed else ""))
    return 1 if failed else 0
