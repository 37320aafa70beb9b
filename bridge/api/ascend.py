"""`bridge.check_ascend(...)`: what `bridge ascend check MODEL.onnx` does, as a
function: the ATC pre-flight (bridge.ascend.preflight), without CANN."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional


@dataclass
class AscendCheck:
    """Every node ATC's ONNX parser would reject, and why; `.clean` when none."""
    model: str
    cann: int
    parser: str
    nodes: int
    findings: List[Any] = field(default_factory=list)      # bridge.ascend.preflight findings
    plugins: set = field(default_factory=set)               # origin types the plugins register
    routes: Optional[Any] = None                            # GE op types behind the plugins, if given

    @property
    def clean(self) -> bool:
        return not self.findings

    def to_json(self) -> Dict[str, Any]:
        """What `bridge ascend check --json` prints."""
        from bridge.ascend import plugin_routes
        return {"model": self.model, "cann": self.cann, "parser": self.parser, "clean": self.clean,
                "plugin_origin_types": len(self.plugins), "findings": [f.as_dict() for f in self.findings],
                "plugin_routes": plugin_routes.summary(self.routes, self.plugins) if self.routes else []}

    def render(self) -> str:
        """What `bridge ascend check` prints."""
        from bridge.table import render
        if not self.findings:
            return (f"clean: ATC (CANN {self.cann}, {self.parser} parser) accepts every node of {self.model} "
                    f"({self.nodes} nodes, {len(self.plugins)} plugin origin types)")
        rows = [[f.node, f.op_type or "-", f.origin_type or "-", f.code, f.problem] for f in self.findings]
        return (render(["node", "op", "origin type", "problem", "detail"], rows, align="lllll") + "\n" +
                f"{len(self.findings)} problem(s): ATC (CANN {self.cann}, {self.parser} parser) would reject "
                f"this model")


def _bundle_opp(model_path):
    """The plugin package of a `bridge export --to ge` bundle (DIR/opp beside
    DIR/model.onnx), which the check then uses without `plugins`; else None."""
    opp = os.path.join(os.path.dirname(os.path.abspath(model_path)), "opp")
    return opp if os.path.isdir(opp) and not os.path.islink(opp) else None


def check_ascend(model: str, cann: int = 8, plugins: Optional[str] = None, parser: Optional[str] = None,
                 input_shapes: Optional[str] = None) -> AscendCheck:
    """The pre-flight of an .onnx file for CANN `cann` (5..8): `plugins` a folder
    of custom plugins (sources or built .so; default: the bundle's own opp/),
    `parser` "new" or "legacy" (default: legacy for CANN 5/6), `input_shapes` as
    atc --input_shape ("NAME:D,D;..."). Raises OptionError (bad file or option)."""
    import onnx
    from bridge.ascend import plugin_routes, preflight
    from bridge.ascend.origins import registered_in_dir
    from bridge.exporting import OptionError
    model = os.fspath(model)
    if not os.path.isfile(model):
        raise OptionError(f"no such file: {model}")
    try:
        proto = onnx.load(model, load_external_data=False)
    except Exception as e:
        raise OptionError(f"{model} is not an ONNX model: {type(e).__name__}: {e}") from None
    found, routes = set(), None
    plugins = _bundle_opp(model) if plugins is None else os.fspath(plugins)
    if plugins:
        if not os.path.isdir(plugins):
            raise OptionError(f"--plugins {plugins}: not a folder")
        found = registered_in_dir(plugins)
        routes = plugin_routes.routes_in_dir(plugins)  # GE op types behind them: either route
    try:
        shapes = preflight.parse_input_shapes(input_shapes)
    except ValueError as e:
        raise OptionError(str(e)) from None
    parser = parser or preflight.default_parser(cann)
    findings = preflight.check(proto, cann=cann, plugins=found, parser=parser, input_shapes=shapes)
    if routes is not None:
        findings += plugin_routes.check(proto, routes)
    return AscendCheck(model, cann, parser, len(proto.graph.node), findings, found, routes)
