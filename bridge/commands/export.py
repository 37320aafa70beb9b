"""`bridge export MODEL --to onnx|tflite|ge -o OUT`: one model, fused onto the custom
ops, exported and verified against TensorFlow.

The exporter interface. `--to X` runs the module `bridge.converters.export_X`
(discovered from the folder: adding a target is adding one module), which has:

    DESCRIPTION = "one line for --help"
    MODES = ("custom", "lowered")   # the --mode choices, the first is the default; () if none
    SUFFIX = ".onnx"                # default output name <model name><SUFFIX> when -o is absent
    USES_OPSET = True               # optional: accepts --opset (else --opset is a usage error)
    def add_arguments(group): ...   # optional: its own flags, on an argparse group
                                    #   (names must not clash with the common flags below)
    def export(source, output, *, mode, opset, fuse, seed, verbose, progress, **options) -> ExportResult

- `source` is a `bridge.modelsource.ResolvedModel` (MODEL resolved, --input-shape /
  --batch applied): `.kind`, `.model`, `.inputs`, `.output_names`,
  `.function(model)` (a tf.function with the static input signature),
  `.sample_inputs(seed=)`.
- `options` holds the exporter's own flags (the dests its add_arguments created);
  ignore the rest (`**_`).
- `progress` is a `bridge.exporting.Progress`: wrap each long stage in
  `with progress.stage("converting"):` (lines with elapsed seconds on stderr).
- Return a `bridge.exporting.ExportResult`: files written (atomically: temp file +
  os.replace), summary lines, and `checks` (per output: max error vs TensorFlow;
  any failed check makes the command exit 1). With verification on but nothing
  run (no runtime here can run the file), `not_verified` says why. Build the
  checks with `converters/shared_steps.compare_outputs(..., float64=
  float64_reference(source, feeds))`: an output beyond its bound against TF
  float32 is judged again by bridge parity's rule against the model run in
  float64 (bridge.parity.truth.judge: as close to float64 as TF float32 itself,
  within 3x), pass or FAIL with the rule in the note, so a Keras model that
  float32 cannot resolve is not a false FAIL; without a float64 run (not
  Keras, or no trustworthy twin) the plain verdict stands and the note says why.
- Raise `bridge.exporting.OptionError` for a bad option (exit 2) and
  `bridge.exporting.ExportError` for a failed export (exit 1).
- Import must be cheap: no TensorFlow at module import (this command imports
  every exporter to build --help); import heavy things inside `export`.

Common flags (this file): MODEL, --to, -o, --mode, --opset, --fuse/--no-fuse,
--input-shape NAME:D,D,... (repeatable, the full shape, '?' = dynamic),
--batch N, --seed S, --config KEY=VALUE (built-in models), --atol, -v, --json.
"""
from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys

from bridge.commands._options import parse_config, tensor_names
from bridge.errors import BridgeError

NAME = "export"
USES_TF_OPS = True  # the op library is built (or found) before any model is loaded
HELP = "export a model (fused onto the custom ops) to ONNX, TFLite or Ascend, verified against TensorFlow"
DESCRIPTION = __doc__.split("\n\n")[0]


def targets():
    """{to: module name} of every bridge.converters.export_<to> module present."""
    from bridge.api.export import targets as found
    return found()


def _exporter(to):
    return importlib.import_module(targets()[to])


def add_arguments(p):
    p.add_argument("model", metavar="MODEL",
                   help="a built-in model name, a .keras file, a SavedModel directory or a frozen GraphDef .pb")
    p.add_argument("--inputs", metavar="NAME:0,...", help="a .pb's input tensors, as tf2onnx --graphdef takes "
                   "them (default: its placeholders)")
    p.add_argument("--outputs", metavar="NAME:0,...", help="a .pb's output tensors (required for a .pb)")
    p.add_argument("--to", required=True, choices=list(targets()), help="the target format")
    p.add_argument("-o", "--output", help="the file (or folder) to write (default: MODEL name + the target's suffix)")
    p.add_argument("--mode", help="the export mode; per target: " + "; ".join(
        f"{to}: {'|'.join(getattr(m, 'MODES', ()) or ('-',))}" for to, m in _loaded_exporters().items()))
    p.add_argument("--opset", type=int, help="ONNX opset (targets that write ONNX)")
    p.add_argument("--fuse", action=argparse.BooleanOptionalAction, default=True,
                   help="rewrite the Keras model onto the fused ops first (default: on)")
    p.add_argument("--input-shape", action="append", metavar="NAME:D,D,...",
                   help="static input shape, batch included ('?' keeps a dim dynamic); repeatable")
    p.add_argument("--batch", type=int, help="fix the batch size of every input (default: dynamic)")
    p.add_argument("--seed", type=int, default=0, help="seed of built-in weights and of the verification inputs")
    p.add_argument("--config", action="append", metavar="KEY=VALUE", default=[],
                   help="built-in model option, e.g. width=0.25 (repeatable)")
    p.add_argument("--atol", type=float, help="verification tolerance (per element, times max(1, |ref|)); "
                                             "default per dtype as bridge parity")
    p.add_argument("--no-verify", dest="verify", action="store_false", help="skip the run against TensorFlow")
    p.add_argument("-v", "--verbose", action="store_true", help="show the converters' own logging")
    p.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    from bridge.api.export import own_options
    per_target = {to: own_options(mod) for to, mod in _loaded_exporters().items()}
    targets_of: dict = {}  # option string -> the targets that declare it
    for to, actions in per_target.items():
        for action in actions.values():
            targets_of.setdefault(action.option_strings[0], []).append(to)
    own = {}
    seen: dict = {}   # option string -> the action already on the parser
    for to, actions in per_target.items():
        if not actions:
            continue
        group = None
        own[to] = []
        for dest, action in actions.items():
            flag = action.option_strings[0]
            if flag in seen:  # two targets take one flag (--quantize): one flag, both targets' choices
                shared = seen[flag]
                if shared.choices is not None and action.choices is not None:
                    shared.choices = list(dict.fromkeys([*shared.choices, *action.choices]))
                shared.help = f"{shared.help}; --to {to}: {action.help}"
            else:
                group = group or p.add_argument_group(f"--to {to}")
                if len(targets_of[flag]) > 1:
                    action.help = f"--to {to}: {action.help}"
                seen[flag] = group._add_action(action)
            own[to].append(dest)
    p.set_defaults(_export_own_options=own)


def _loaded_exporters():
    mods = {}
    for to in targets():
        try:
            mods[to] = _exporter(to)
        except Exception:  # an exporter that cannot import still shows as a choice; run says why
            pass
    return mods


def run(args) -> int:
    """argparse over bridge.api.export.export (the one implementation)."""
    from bridge.cli import UsageError
    from bridge.api.export import export
    from bridge.exporting import ExportError
    if not args.verbose:
        logging.getLogger("tensorflow").setLevel(logging.ERROR)
    own = {d: getattr(args, d) for d in args._export_own_options.get(args.to, [])}
    try:
        result = export(args.model, args.to, args.output, mode=args.mode, opset=args.opset, fuse=args.fuse,
                        input_shapes=args.input_shape, batch=args.batch, seed=args.seed,
                        config=parse_config(args.config), atol=args.atol, verify=args.verify,
                        verbose=args.verbose, progress=True, graph_inputs=tensor_names(args.inputs),
                        graph_outputs=tensor_names(args.outputs), **own)  # stderr: --json output on stdout stays clean
    except ExportError as e:
        print(f"bridge export: {e}", file=sys.stderr)
        return 1
    except UsageError:
        raise
    except BridgeError as e:
        if e.exit_code == 1:
            raise
        raise UsageError(str(e)) from None
    print(json.dumps(result.to_json(), indent=1, default=str) if args.json else result.render())
    return 0 if result.ok else 1
