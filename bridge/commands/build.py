"""`bridge build`: build the native libraries ahead of time."""
from __future__ import annotations

import json
import sys

NAME = "build"
TAKES_IMPORTS = False  # loads no model: --import is for the commands that do
HELP = "build the native libraries (TensorFlow ops, onnxruntime kernels) into the cache"
from bridge.api.build import ON_REQUEST, TARGETS  # noqa: F401  (the choices; cheap: no native import)

def add_arguments(p):
    p.add_argument("targets", nargs="*", metavar="TARGET",
                   help=f"what to build: {', '.join(TARGETS + ON_REQUEST)} (default: {', '.join(TARGETS)}), or the "
                        f"CMake folder of a team's TensorFlow or onnxruntime kernel library, or the folder of its LiteRT op files")
    p.add_argument("--force", action="store_true", help="rebuild even when the cache has the library")
    p.add_argument("--portable", action="store_true",
                   help="build without CPU-specific flags (-march=native), for other machines of this architecture")
    p.add_argument("--cuda", action="store_true", help="also build the TensorFlow GPU kernels (needs nvcc)")
    p.add_argument("--json", action="store_true",
                   help="print each library's build record (path, CPU flags, compiler, ...) as JSON")


def run(args) -> int:
    """argparse over bridge.api.build.build (the one implementation)."""
    from bridge import native
    from bridge.api.build import build
    from bridge.cli import UsageError
    from bridge.exporting import OptionError
    try:
        records = build(args.targets, force=args.force, portable=args.portable, cuda=args.cuda,
                        progress=None if args.json else print)
    except OptionError as e:
        raise UsageError(str(e)) from None
    except native.BuildError as e:
        print(f"bridge build: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(records, indent=1))
    return 0
