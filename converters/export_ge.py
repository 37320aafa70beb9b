"""`bridge export MODEL --to ge -o DIR`: everything the Ascend machine needs.

DIR/model.onnx   static shapes, default-domain opset 11..15 (without --opset: 11,
                 or the first above it the model converts at, e.g. 12 for
                 Einsum or GatherV2 with batch_dims; the summary says why), no
                 model-local functions, the fused ops as plain custom nodes:
                 `--parser new` in com.bridge (imported), `--parser legacy` in the
                 default domain with one opset_import (old ATC parsers);
DIR/opp/         the custom OPP package (bridge.ascend.opp): plugins for both
                 parser modes and both routes, op protos, npu_supported_ops.json,
                 CMakeLists.txt, install.sh; with `--route custom-op` instead the
                 GE custom-operator package (bridge.ascend.ge_custom: op_graph/,
                 REG_AUTO_MAPPING_OP classes, kernels/ for the team's launch code);
DIR/inputs/      the verification inputs (.bin for msame, .npz for bridge parity);
DIR/atc.sh       the ATC command line for this model, environment included;
DIR/names.json   each input's name in the original model, in model.onnx (renamed
                 where ATC's --input_shape cannot carry it) and its .bin file;
DIR/README.md    what to run there, in order, and how to bring the outputs back.

Before writing, the ATC pre-flight must be clean, and (unless --no-verify) both
plugin routes are run here against TensorFlow: the custom nodes on onnxruntime
with bridge's kernels, and the built-in expansion (what ParseOpToGraphFn builds)
on plain onnxruntime.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import stat
from dataclasses import dataclass
from typing import Dict, List, Optional

import numpy as np

from bridge import atomic
from bridge.exporting import NOT_WRITTEN, Check, ExportError, ExportResult, OptionError, quiet
from bridge.untrusted import UntrustedNameError, file_stems, inside, md_cell, md_code, shell_word, shown, write_npz

from . import road_limits
from .shared_steps import model_to_export

DESCRIPTION = "Ascend GE/ATC: a static ONNX for ATC, the OPP plugin package, atc.sh and a README"
MODES = ()
SUFFIX = "_ge"
USES_OPSET = True
DEFAULT_SOC = "Ascend310P3"
ROUTES = ("builtin", "custom-op")


def add_arguments(group):
    group.add_argument("--parser", choices=("new", "legacy"), default="new",
                       help="ATC ONNX parser the model is laid out for: new (com.bridge domain, CANN >= 7) or "
                            "legacy (custom nodes in the default domain, one opset_import; CANN 5/6)")
    group.add_argument("--soc-version", default=DEFAULT_SOC, help=f"ATC --soc_version (default {DEFAULT_SOC})")
    group.add_argument("--route", choices=ROUTES, default="builtin",
                       help="builtin (default): the ops expanded onto GE built-in operators, no kernel needed; "
                            "custom-op: GE custom operators (REG_OP + REG_AUTO_MAPPING_OP classes in opp/op_graph), "
                            "launching the kernels your team supplies in opp/kernels/")


def check_opset(opset: Optional[int]) -> int:
    from bridge.ascend.origins import DEFAULT_OPSET, EXPORT_OPSETS
    if opset is None:
        return DEFAULT_OPSET
    if int(opset) not in EXPORT_OPSETS:
        raise OptionError(f"--opset {opset}: --to ge writes opsets {EXPORT_OPSETS[0]}..{EXPORT_OPSETS[-1]} "
                          f"(11-13 is what every CANN release takes)")
    return int(opset)


# -- the model -------------------------------------------------------------------
def fix_shapes(model, shapes: Dict[str, tuple]) -> None:
    """Static input dims in place (ATC wants them, and atc.sh passes the same)."""
    for inp in model.graph.input:
        if inp.name in shapes and inp.type.HasField("tensor_type"):
            dims = inp.type.tensor_type.shape.dim
            want = shapes[inp.name]
            if len(dims) != len(want):
                raise ExportError(f"input {inp.name!r} has rank {len(dims)}, the static shape {list(want)} rank {len(want)}")
            for d, v in zip(dims, want):
                d.Clear()
                d.dim_value = int(v)


def ge_model(model, *, opset: int, parser: str, shapes: Dict[str, tuple]):
    """An ONNX model (custom mode) made ATC's: functions dropped (ATC takes none),
    static shapes, the parser's domain layout. Returns a new ModelProto."""
    import onnx
    from bridge.ascend.expand import drop_custom_functions, opset_of, set_opsets, to_legacy
    out = onnx.ModelProto()
    out.CopyFrom(model)
    drop_custom_functions(out)
    if len(out.functions):
        out = onnx.inliner.inline_local_functions(out)
    have = opset_of(out)
    if have != opset:
        raise ExportError(f"the ONNX model has default opset {have}, --opset asks {opset}; export it at {opset}")
    fix_shapes(out, shapes)
    if parser == "legacy":
        return to_legacy(out)
    set_opsets(out, opset, keep_custom=False)  # unused imports (tf2onnx adds ai.onnx.ml) dropped
    return out


# -- the files ------------------------------------------------------------------
# Every model string below lands through bridge.untrusted: shell_word in scripts
# and in the README's commands, md_code in its prose, file_stems for file names,
# and _write_tree checks each path it writes stays in DIR.
def check_soc(soc: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", soc or ""):
        raise OptionError(f"--soc-version {soc!r}: expected a chip name such as {DEFAULT_SOC} or Ascend910B1")
    return soc


def atc_script(shapes: Dict[str, tuple], soc: str, route: str = "builtin") -> str:
    """`shapes`: {name in model.onnx: dims}; the names must be atc_names.carried."""
    shape_arg = ";".join(f"{k}:{','.join(str(int(d)) for d in v)}" for k, v in shapes.items())
    route_note = "" if route == "builtin" else (
        "# Route custom-op: the nodes become GE custom operators (opp/op_graph, libcust_opapi.so)\n"
        "# launching the kernels in opp/kernels/; install.sh fails until they are there.\n")
    return f"""#!/usr/bin/env bash
# ATC for model.onnx (generated by bridge export --to ge). Run after opp/install.sh.
{route_note}# SOC_VERSION overrides --soc_version; OPP_PREFIX the folder install.sh installed into.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if [[ -z "${{ASCEND_HOME_PATH:-}}" ]]; then
  for env in /usr/local/Ascend/ascend-toolkit/set_env.sh "$HOME/Ascend/ascend-toolkit/set_env.sh"; do
    if [[ -f "$env" ]]; then source "$env"; break; fi
  done
fi
: "${{ASCEND_HOME_PATH:?source <CANN>/set_env.sh first}}"
export ASCEND_CUSTOM_OPP_PATH="${{OPP_PREFIX:-$here/opp/installed}}/vendors/bridge${{ASCEND_CUSTOM_OPP_PATH:+:$ASCEND_CUSTOM_OPP_PATH}}"
# The model's input names, verbatim in single quotes (names.json: how they map to
# the original model's).
input_shape={shell_word(shape_arg)}
soc_default={shell_word(soc)}
# --input_format=ND: the model's tensors are NHWC / [..., H] as in TensorFlow; the
# plugins transpose around convolutions themselves.
atc --model="$here/model.onnx" --framework=5 --output="$here/model" \\
    --soc_version="${{SOC_VERSION:-$soc_default}}" \\
    --input_format=ND --input_shape="$input_shape" "$@"
"""


@dataclass
class BundleInput:
    name: str       # in the original model (and inputs/inputs.npz)
    atc_name: str   # in model.onnx and atc.sh
    file: str       # the msame .bin file, relative to DIR


def bundle_inputs(model, names: List[str]) -> List[BundleInput]:
    from bridge.ascend.atc_names import atc_names
    atc = atc_names(model, names)
    stems = file_stems([atc[n] for n in names])
    return [BundleInput(n, atc[n], f"inputs/{stems[atc[n]]}.bin") for n in names]


_BUILTIN_STEP = """2. Build and install the plugins: `./opp/install.sh` (default route: each op is expanded
   onto GE built-in operators, no kernel needed). `./opp/install.sh --custom-op` maps the
   ops to GE custom operators instead (REG_OP protos in `opp/op_proto/`; bring Ascend C
   kernels). Either writes `opp/installed/vendors/bridge/` (pass another PREFIX as the
   last argument and set `OPP_PREFIX` for atc.sh)."""


def _custom_step(model_word: str) -> str:
    from bridge.ascend.ge_custom.package import kernels_table
    return f"""2. This bundle holds the **custom-operator route** (`--route custom-op`): each op is a GE
   custom operator (`REG_OP` proto in `opp/op_graph/include/`, an implementation class
   registered with `REG_AUTO_MAPPING_OP` in `opp/op_graph/src/`: InferShape/InferDataType
   from the op spec, Compile/Serialize/Deserialize of per-shape kernel binaries for the OM,
   Execute checking the attributes and calling your launch function). **You supply the
   kernels** (`opp/kernels/README.md`):

{kernels_table("   ")}

   Then `./opp/install.sh` builds `libcust_opapi.so` and the ONNX parser plugin and writes
   `opp/installed/vendors/bridge/` (`op_graph/lib/linux/<arch>/libcust_opapi.so`,
   `op_graph/include/`, `framework/onnx/`, `framework/tensorflow/npu_supported_ops.json`;
   pass another PREFIX as the last argument and set `OPP_PREFIX` for atc.sh).
   {md_code(f"bridge export {model_word} --to ge")} without `--route` gives the built-in route
   (no kernels needed) instead.

   TensorFlow on the NPU (the TF adapter) takes the same package: load bridge's TF op
   library in the TF process (`tf.load_op_library` on the `libbridge_tf_ops.so` that
   `bridge build` makes, or your team's `--op-library`) so TF knows the ops, export
   `ASCEND_CUSTOM_OPP_PATH` as atc.sh does, and the adapter finds them in
   `framework/tensorflow/npu_supported_ops.json` and GE the implementation classes of the
   same names."""


def readme(model_name: str, model_arg: str, parser: str, opset: int, inputs: List[BundleInput], outputs: List[str],
           soc: str, route: str = "builtin", fixed: str = "") -> str:
    bins = ",".join(i.file for i in inputs)
    model_word = shell_word(model_arg)
    renamed = [i for i in inputs if i.atc_name != i.name or i.file != f"inputs/{i.name}.bin"]
    names = ""
    if renamed:
        rows = "\n".join(f"| {md_cell(i.name)} | {md_cell(i.atc_name)} | {md_cell(i.file)} |" for i in renamed)
        names = f"""
## Input names

ATC's `--input_shape` cannot carry `:` `;` `,`, quotes, white space or control characters in
a name, and file names keep to `A-Z a-z 0-9 _ . -`: these inputs are named differently here
(`names.json` has every input):

| in the original model | in model.onnx and atc.sh | msame input |
| --- | --- | --- |
{rows}
"""
    return f"""# {md_code(model_name)} for Ascend (ATC)

Written by {md_code(f"bridge export {model_word} --to ge" + ("" if route == "builtin" else f" --route {route}"))} (parser `{parser}`, ONNX opset {opset}).
`model.onnx` has static shapes and the fused ops as plain custom nodes; `opp/` is the
custom OPP package whose ONNX parser plugins ATC needs for them.
{_fixed_section(fixed)}
## On the Ascend machine, in order

1. Copy this folder there and set up CANN: `source <CANN>/set_env.sh` (sets `ASCEND_HOME_PATH`).
{_BUILTIN_STEP if route == "builtin" else _custom_step(model_word)}
3. Convert: `./atc.sh` (exports `ASCEND_CUSTOM_OPP_PATH`, runs ATC for `{soc}`;
   `SOC_VERSION=Ascend910B1 ./atc.sh` for another chip). Writes `model.om`.
   If ATC reports E16002 for a node, run `bridge ascend check model.onnx --plugins opp`
   here first: it lists what ATC would reject.
4. Run on the verification inputs with msame:

       msame --model model.om --input {shell_word(bins)} --output out --outfmt BIN

   (msame writes `out/<time>/model_output_<i>.bin`, outputs in this order: {', '.join(md_code(o) for o in outputs)}).
{names}
## Back here

Copy the folder of `.bin` files back and compare against TensorFlow on the same inputs:

    bridge parity {model_word} --load-inputs inputs/inputs.npz --load-outputs ge=out/<time>

(`inputs/inputs.npz` holds the arrays of `inputs/*.bin`, keyed by the original model's input names.)
"""


def _fixed_section(fixed: str) -> str:
    """The README's word on dims the model leaves open (`fixed`: fixed_dims' text)."""
    if not fixed:
        return ""
    return ("\nThe model leaves some dims open; this bundle fixes them at the shape bridge verified\n"
            f"({md_code(fixed)}). ATC's dynamic options (`--dynamic_dims` gears,\n"
            "`--input_shape_range`) vary by CANN release: add them to `atc.sh` yourself, or export again\n"
            "with `--input-shape NAME:D,D,...` for another fixed shape.\n")


def names_json(inputs: List[BundleInput], outputs: List[str]) -> str:
    return json.dumps({"inputs": [{"model": i.name, "model.onnx": i.atc_name, "file": i.file} for i in inputs],
                       "outputs": outputs}, indent=1) + "\n"


def _write_tree(files: Dict[str, bytes], output: str) -> List[str]:
    """Writes every file under a temporary folder inside `output`, then moves the entries
    into `output`: no half-written package on failure. Every path must stay in `output`."""
    with atomic.staging_folder(output, "ge-export") as tmp:
        for rel, data in files.items():
            try:
                full = inside(tmp, rel)
            except UntrustedNameError as e:
                raise ExportError(f"refusing to write {e}") from None
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "xb") as f:
                f.write(data)
            if rel.endswith(".sh"):
                os.chmod(full, os.stat(full).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        for entry in sorted({rel.split("/")[0] for rel in files}):
            dst = os.path.join(output, entry)
            if os.path.islink(dst):  # replaced, never followed
                os.unlink(dst)
            elif os.path.isdir(dst):
                shutil.rmtree(dst)
            os.replace(os.path.join(tmp, entry), dst)
    return [os.path.join(output, rel) for rel in sorted(files)]


def package(model, output: str, *, opset: int, parser: str, shapes: Dict[str, tuple], soc: str = DEFAULT_SOC,
            feeds: Optional[Dict[str, np.ndarray]] = None, name: str = "model", model_arg: Optional[str] = None,
            route: str = "builtin", fixed: str = "") -> List[str]:
    """Writes DIR from a GE-bound model (see `ge_model`); raises ExportError when
    the pre-flight against the generated plugins is not clean. Inputs whose names
    ATC cannot carry are renamed in DIR/model.onnx (bridge.ascend.atc_names)."""
    from bridge.ascend import plugin_routes, preflight
    from bridge.ascend.origins import registered_in_source
    check_soc(soc)
    pkg = package_for(route)
    plugins = set().union(*(registered_in_source(t) for p, t in pkg.items() if p.endswith(".cc")))
    findings = preflight.check(model, plugins=plugins, parser=parser, cann=6 if parser == "legacy" else 8)
    routes = plugin_routes.PluginRoutes()  # and the GE op type behind each registration is in the package
    for p, t in pkg.items():
        if p.endswith((".cc", ".h")):
            plugin_routes.routes_in_source(t, routes)
    findings += plugin_routes.check(model, routes)
    if findings:
        raise ExportError("ATC would reject the model:\n" + "\n".join(f"  {shown(f.node)}: {f.problem}"
                                                                        for f in findings))
    inputs = bundle_inputs(model, list(shapes))
    if any(i.atc_name != i.name for i in inputs):
        import onnx
        from bridge.ascend.atc_names import rename
        renamed = onnx.ModelProto()
        renamed.CopyFrom(model)
        rename(renamed.graph, {i.name: i.atc_name for i in inputs})
        model = renamed
    outputs = [o.name for o in model.graph.output]
    files = {f"opp/{p}": t.encode() for p, t in pkg.items()}
    files["model.onnx"] = model.SerializeToString()
    files["atc.sh"] = atc_script({i.atc_name: shapes[i.name] for i in inputs}, soc, route).encode()
    files["README.md"] = readme(name, model_arg or name, parser, opset, inputs, outputs, soc, route, fixed).encode()
    files["names.json"] = names_json(inputs, outputs).encode()
    if feeds:
        import io
        for i in inputs:
            files[i.file] = np.ascontiguousarray(feeds[i.name]).tobytes()
        buf = io.BytesIO()
        try:
            write_npz(buf, feeds)
        except UntrustedNameError as e:
            raise ExportError(f"cannot write inputs/inputs.npz: {e}; rename the input in the model") from None
        files["inputs/inputs.npz"] = buf.getvalue()
    return _write_tree(files, output)


def package_for(route: str) -> Dict[str, str]:
    """{relative path: text} of DIR/opp for `route`."""
    from bridge.ascend import opp
    if route == "builtin":
        return opp.package_files()
    if route == "custom-op":
        from bridge.ascend.ge_custom.package import package_files
        from bridge.ascend.ge_custom.tables import NoShapeTable
        try:
            return package_files()
        except (NoShapeTable, ValueError) as e:
            raise ExportError(f"--route custom-op: {e}") from None
    raise OptionError(f"--route {route}: choose one of {', '.join(ROUTES)}")


def export(source, output: str, *, mode=None, opset: Optional[int] = None, fuse: bool = True, seed: int = 0,
           verbose: bool = False, progress=None, atol: Optional[float] = None, verify=None,
           parser: str = "new", soc_version: str = DEFAULT_SOC, route: str = "builtin", **_) -> ExportResult:
    """The `--to ge` exporter (interface: bridge/commands/export.py). `verify`: a
    bridge.parity.verify.Verifier, run on the bundle's model before any file is
    written (None: not verified)."""
    from bridge.converters.export_onnx import at_lowest_opset, convert_raw, embed_external, renamed_lines
    from bridge.ascend.origins import EXPORT_OPSETS
    from bridge.modelsource import ModelSourceError
    progress = progress or quiet()
    # no --opset: the lowest opset ATC takes at which the model converts (11 unless it needs more)
    opsets = [o for o in EXPORT_OPSETS if o >= check_opset(None)] if opset is None else [check_opset(opset)]
    opset = opsets[0]
    check_soc(soc_version)
    if parser not in ("new", "legacy"):
        raise OptionError(f"--parser {parser}: choose new or legacy")
    if route not in ROUTES:
        raise OptionError(f"--route {route}: choose one of {', '.join(ROUTES)}")
    try:
        shapes = source.concrete_shapes(batch=1)
    except ModelSourceError as e:
        raise OptionError(str(e)) from None
    summary: List[str] = []
    details = {"parser": parser, "opset": opset, "soc": soc_version, "route": route}
    fn = None
    if source.kind == "onnx":
        onnx_model = with_external_data(source)
    else:
        model = model_to_export(source, fuse, progress, summary, details)
        if route == "builtin" and source.is_keras:  # the plugins' expansion is float32 only
            try:
                model, note = road_limits.float32_model(model, "ge")
            except ValueError as e:
                raise ExportError(str(e)) from None
            if note:
                summary.append(note)
        with progress.stage("converting"):
            # ATC's opsets (11..) are below the function bodies' 13: bare com.bridge nodes, no functions
            fn = source.function(model)
            # tf2onnx's large-model path for its memory (see export_onnx.export), the tensors put back
            (onnx_model, external), opset, note = at_lowest_opset(
                lambda o: convert_raw(fn, source.signature(), opset=o, output_names=source.output_names,
                                      verbose=verbose, large=True), opsets)
            onnx_model = embed_external(onnx_model, external)
        details["opset"] = opset
        if note:
            summary.append(note)
    with progress.stage("laying out for ATC"):
        ge = ge_model(onnx_model, opset=opset, parser=parser, shapes=shapes)
    feeds = source.sample_inputs(seed=seed)
    checks: List[Check] = []
    not_verified = ""
    if verify and fn is not None:
        with progress.stage("verifying the plugin routes"):
            checks = verify.ge(ge, route)
    elif verify:
        not_verified = "an ONNX source: no TensorFlow model to compare against"
    fixed = fixed_dims(source, shapes)
    if not all(c.passed for c in checks):  # a bundle that fails its check is not written
        return ExportResult(output=output, format="ge", summary=summary + [_fixed_line(fixed)] * bool(fixed), checks=checks,
                            seconds=dict(progress.seconds), details=details, not_written=NOT_WRITTEN)
    with progress.stage("writing"):
        files = package(ge, output, opset=opset, parser=parser, shapes=shapes, soc=soc_version, feeds=feeds,
                        name=source.name, model_arg=source.arg, route=route, fixed=fixed)
    custom = sum(1 for n in ge.graph.node if n.op_type in _custom_types())
    summary.append(f"wrote {output}/ (parser {parser}, opset {opset}, {len(ge.graph.node)} nodes, {custom} custom; "
                   f"ATC pre-flight clean; then: opp/install.sh, atc.sh)")
    summary += renamed_lines(ge)
    if fixed:
        summary.append(_fixed_line(fixed))
    if route == "custom-op":
        summary.append("route custom-op: GE custom operators in opp/op_graph; supply the kernels listed in "
                       "opp/kernels/README.md before opp/install.sh")
    renamed = [i for i in bundle_inputs(ge, list(shapes)) if i.atc_name != i.name]
    if renamed:
        summary.append(f"{len(renamed)} input name(s) ATC's --input_shape cannot carry renamed in model.onnx, e.g. "
                       f"{shown(renamed[0].name)} -> {shown(renamed[0].atc_name)} (names.json has them all)")
    return ExportResult(output=output, format="ge", files=files, summary=summary, checks=checks,
                        seconds=dict(progress.seconds), details=details, not_verified=not_verified)


def fixed_dims(source, shapes: Dict[str, tuple]) -> str:
    """The inputs whose dims the model leaves open (other than the batch, which
    ATC's bundle always fixes at 1), at the sample shape the bundle fixes them at:
    "ids[1, 16]"; '' when none. model.onnx and atc.sh are static: ATC's dynamic
    options (--dynamic_dims gears, --input_shape_range) differ by CANN release and
    need gears chosen for the deployment."""
    return ", ".join(f"{i.name}{list(shapes[i.name])}" for i in source.inputs if any(d is None for d in i.shape[1:]))


def _fixed_line(fixed: str) -> str:
    return (f"dims the model leaves open are fixed at the verified sample shape for ATC: {fixed}; export again "
            f"with --input-shape NAME:D,D,... for another shape") if fixed else ""


def with_external_data(source):
    """An .onnx MODEL with its external data read in (DIR/model.onnx must be whole);
    the locations were checked against onnx's rules when the MODEL was resolved
    (bridge.modelsource), and onnx's loader checks them again."""
    import onnx
    from onnx.external_data_helper import load_external_data_for_model, uses_external_data
    from onnx.external_data_helper import _get_all_tensors
    model = source.model
    if not any(uses_external_data(t) for t in _get_all_tensors(model)):
        return model
    if not source.path:
        raise ExportError("the ONNX model keeps tensors in external data and has no file to find them beside: "
                          "export the .onnx file")
    whole = onnx.ModelProto()
    whole.CopyFrom(model)
    try:
        load_external_data_for_model(whole, os.path.dirname(os.path.abspath(source.path)))
    except Exception as e:
        raise ExportError(f"cannot read the external data of {source.path}: {e}") from None
    return whole


def _custom_types():
    from bridge import ops
    return set(ops.SPECS)
