"""The `bridge` command. Each subcommand is one module in bridge/commands/ with
NAME, HELP, add_arguments(parser) and run(args) -> exit code.

Exit codes: 0 success, 1 a check failed, 2 usage error (bad arguments or files).
"""
from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys

from bridge import commands
from bridge.errors import BridgeError


class UsageError(BridgeError):
    """A bad argument or file: printed without a traceback, exit code 2."""


def _command_modules():
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if not info.name.startswith("_"):
            yield importlib.import_module(f"{commands.__name__}.{info.name}")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bridge", description=(
        "Take models with fused TensorFlow custom ops to ONNX, onnxruntime, TFLite and Ascend, "
        "and prove every runtime computes the same thing."))
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for mod in _command_modules():
        sp = sub.add_parser(mod.NAME, help=mod.HELP, description=getattr(mod, "DESCRIPTION", mod.HELP))
        mod.add_arguments(sp)
        if getattr(mod, "USES_TENSORFLOW", True) or getattr(mod, "TAKES_TEAM_OPS", False):
            _add_team_op_arguments(sp, getattr(mod, "TAKES_IMPORTS", True))
        sp.set_defaults(_run=mod.run, _uses_tensorflow=getattr(mod, "USES_TENSORFLOW", True),
                        _uses_tf_ops=getattr(mod, "USES_TF_OPS", False))
    return p


def _add_team_op_arguments(sp, imports: bool = True) -> None:
    g = sp.add_argument_group("a team's own ops")
    if imports:
        from bridge.team_imports import FLAG as IMPORT_FLAG
        g.add_argument(IMPORT_FLAG, dest="imports", action="append", default=[], metavar="MODULE|FILE.py",
                       help="a Python module (a name importable here, or a .py file) imported before the model "
                            "loads: the Keras classes it registers (keras.saving.register_keras_serializable), "
                            "the op specs it defines (SPEC/SPECS); repeatable")
    g.add_argument("--op-spec", action="append", default=[], metavar="FILE",
                   help="a Python file defining SPEC (a bridge.ops.OpSpec) for an op of your own; repeatable")
    g.add_argument("--op-library", action="append", default=[], metavar="LIB",
                   help="its TensorFlow kernel library (.so, or its CMake folder, built here), loaded before "
                        "the model; repeatable")
    g.add_argument("--ort-library", action="append", default=[], metavar="LIB",
                   help="its onnxruntime kernel library (.so, or its CMake folder, built here), registered in "
                        "every onnxruntime session that runs its op's kernel; repeatable")
    from bridge.litert.team_libraries import FLAG as LITERT_FLAG
    g.add_argument(LITERT_FLAG, metavar="DIR",
                   help="its LiteRT kernels: a folder of .cc files (one per op, against "
                        "litert/native/common.h), built here into bridge's LiteRT kernels for "
                        "--to tflite --mode custom and the tflite-custom parity runtime")


def _load_team_ops(args, tensorflow_loaded: bool) -> None:
    """--op-spec files before any layer is imported; --op-library once TF is
    (bridge.api.team_ops, what bridge.register_op does)."""
    from bridge.api import team_ops
    if not tensorflow_loaded:
        team_ops.load_specs(getattr(args, "op_spec", None) or (), getattr(args, "ort_library", None) or (),
                            getattr(args, "litert_library", None))
        return
    team_ops.load_libraries(getattr(args, "op_library", None) or ())


def _build_error(e: BaseException):
    """The native BuildError behind `e`, if any (Keras wraps what a layer's call() raises)."""
    from bridge.native import build_error_behind
    return build_error_behind(e)


def main(argv=None) -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    args = parser().parse_args(argv)
    from bridge.ops import SpecError
    try:
        _load_team_ops(args, tensorflow_loaded=False)
        if args._uses_tensorflow:
            from bridge.quiet import import_tensorflow
            import_tensorflow(verbose=bool(getattr(args, "verbose", False)))
        if getattr(args, "imports", None):  # after TF (quietly imported), before the op layers read the specs
            from bridge.team_imports import ImportFailed, import_modules
            try:
                import_modules(args.imports)
            except ImportFailed as e:
                raise UsageError(str(e)) from None
        if args._uses_tf_ops or getattr(args, "op_library", None):
            # Built (on first use) before any model is traced, so that a failed
            # build is its own short message, not one wrapped in Keras' traceback.
            import bridge.tf_ops  # noqa: F401
        if args._uses_tensorflow:
            _load_team_ops(args, tensorflow_loaded=True)
        return int(args._run(args) or 0)
    except UsageError as e:
        print(f"bridge {args.command}: error: {e}", file=sys.stderr)
        return 2
    except SpecError as e:
        print(f"bridge {args.command}: error: bad op spec: {e}", file=sys.stderr)
        return 2
    except BridgeError as e:  # a bad library, model or option (2); a failed build or export (1)
        print(f"bridge {args.command}: {'error: ' if e.exit_code == 2 else ''}{e}", file=sys.stderr)
        return e.exit_code
    except Exception as e:
        build_error = _build_error(e)
        if build_error is None:
            raise
        print(f"bridge {args.command}: {build_error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
