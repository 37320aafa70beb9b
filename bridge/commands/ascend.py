"""`bridge ascend check MODEL.onnx`: the ATC pre-flight, without CANN. Lists every
node ATC's ONNX parser would reject (bridge.ascend.preflight); exit 0 only when clean."""
from __future__ import annotations

import json

NAME = "ascend"
HELP = "Ascend helpers: `check` lists every node ATC would reject (pre-flight, no CANN needed)"
USES_TENSORFLOW = False  # runs on a box with onnx/onnxruntime only



def add_arguments(p):
    sub = p.add_subparsers(dest="ascend_command", metavar="ACTION")
    sub.required = True
    c = sub.add_parser("check", help="list every node ATC would reject; exit 0 only when clean")
    c.add_argument("model", metavar="MODEL.onnx")
    c.add_argument("--cann", type=int, choices=(5, 6, 7, 8), default=8,
                   help="CANN release: 5/6 take opsets 9-13 and imply the legacy parser; 7 9-18; 8 (default) "
                        "what current packages register")
    c.add_argument("--plugins", metavar="DIR",
                   help="custom plugins (sources or built .so) whose registered origin types count, e.g. an "
                        "exported DIR/opp or an installed vendors/<name>")
    c.add_argument("--parser", choices=("new", "legacy"), help="ATC parser generation (default: legacy for --cann 5/6)")
    c.add_argument("--input-shape", metavar="NAME:D,D;...", help="the shapes atc --input_shape will fix")
    c.add_argument("--json", action="store_true", help="print JSON instead of a table")


def run(args) -> int:
    """argparse over bridge.api.ascend.check_ascend (the one implementation)."""
    from bridge.api.ascend import check_ascend
    from bridge.cli import UsageError
    from bridge.exporting import OptionError
    try:
        found = check_ascend(args.model, cann=args.cann, plugins=args.plugins, parser=args.parser,
                             input_shapes=args.input_shape)
    except OptionError as e:
        raise UsageError(str(e)) from None
    print(json.dumps(found.to_json(), indent=1) if args.json else found.render())
    return 0 if found.clean else 1
