"""`bridge ascend check MODEL.onnx`: the ATC pre-flight, without CANN. Lists every
node ATC's ONNX parser would reject (bridge.ascend.preflight); exit 0 only when clean."""
from __future__ import annotations

import json
import os

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


def _bundle_opp(model_path):
    """The plugin package of a `bridge export --to ge` bundle (DIR/opp beside
    DIR/model.onnx), which the check then uses without --plugins; else None."""
    opp = os.path.join(os.path.dirname(os.path.abspath(model_path)), "opp")
    return opp if os.path.isdir(opp) and not os.path.islink(opp) else None


def run(args) -> int:
    import onnx
    from bridge.cli import UsageError
    from bridge.ascend import plugin_routes, preflight
    from bridge.ascend.origins import registered_in_dir
    from bridge.table import render
    if not os.path.isfile(args.model):
        raise UsageError(f"no such file: {args.model}")
    try:
        model = onnx.load(args.model, load_external_data=False)
    except Exception as e:
        raise UsageError(f"{args.model} is not an ONNX model: {type(e).__name__}: {e}") from None
    plugins = set()
    routes = None
    if args.plugins is None:
        args.plugins = _bundle_opp(args.model)
    if args.plugins:
        if not os.path.isdir(args.plugins):
            raise UsageError(f"--plugins {args.plugins}: not a folder")
        plugins = registered_in_dir(args.plugins)
        routes = plugin_routes.routes_in_dir(args.plugins)  # GE op types behind them: either route
    try:
        shapes = preflight.parse_input_shapes(args.input_shape)
    except ValueError as e:
        raise UsageError(str(e)) from None
    parser = args.parser or preflight.default_parser(args.cann)
    findings = preflight.check(model, cann=args.cann, plugins=plugins, parser=parser, input_shapes=shapes)
    if routes is not None:
        findings += plugin_routes.check(model, routes)
    if args.json:
        print(json.dumps({"model": args.model, "cann": args.cann, "parser": parser, "clean": not findings,
                          "plugin_origin_types": len(plugins), "findings": [f.as_dict() for f in findings],
                          "plugin_routes": plugin_routes.summary(routes, plugins) if routes else []}, indent=1))
    elif findings:
        rows = [[f.node, f.op_type or "-", f.origin_type or "-", f.code, f.problem] for f in findings]
        print(render(["node", "op", "origin type", "problem", "detail"], rows, align="lllll"))
        print(f"{len(findings)} problem(s): ATC (CANN {args.cann}, {parser} parser) would reject this model")
    else:
        print(f"clean: ATC (CANN {args.cann}, {parser} parser) accepts every node of {args.model} "
              f"({len(model.graph.node)} nodes, {len(plugins)} plugin origin types)")
    return 1 if findings else 0
