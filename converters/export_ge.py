"""`bridge export MODEL --to ge -o DIR`: everything the Ascend machine needs.

DIR/model.onnx   static shapes, default-domain opset 11..15 (11 by default), no
                 model-local functions, the fused ops as plain custom nodes:
                 `--parser new` in com.bridge (imported), `--parser legacy` in the
                 default domain with one opset_import (old ATC parsers);
DIR/opp/         the custom OPP package (bridge.ascend.opp): plugins for both
                 parser modes and both routes, op protos, npu_supported_ops.json,
                 CMakeLists.txt, install.sh;
DIR/inputs/      the verification inputs (.bin for msame, .npz for bridge parity);
DIR/atc.sh       the ATC command line for this model, environment included;
DIR/README.md    what to run there, in order, and how to bring the outputs back.

Before writing, the ATC pre-flight must be clean, and (unless --no-verify) both
plugin routes are run here against TensorFlow: the custom nodes on onnxruntime
with bridge's kernels, and the built-in expansion (what ParseOpToGraphFn builds)
on plain onnxruntime.
"""
from __future__ import annotations

import os
import shutil
import stat
import tempfile
from typing import Dict, List, Optional

import numpy as np

from bridge.exporting import Check, ExportError, ExportResult, OptionError, quiet

DESCRIPTION = "Ascend GE/ATC: a static ONNX for ATC, the OPP plugin package, atc.sh and a README"
MODES = ()
SUFFIX = "_ge"
USES_OPSET = True
DEFAULT_SOC = "Ascend310P3"


def add_arguments(group):
    group.add_argument("--parser", choices=("new", "legacy"), default="new",
                       help="ATC ONNX parser the model is laid out for: new (com.bridge domain, CANN >= 7) or "
                            "legacy (custom nodes in the default domain, one opset_import; CANN 5/6)")
    group.add_argument("--soc-version", default=DEFAULT_SOC, help=f"ATC --soc_version (default {DEFAULT_SOC})")


def check_opset(opset: Optional[int]) -> int:
    from bridge.ascend.origins import DEFAULT_OPSET, EXPORT_OPSETS
    if opset is None:
        return DEFAULT_OPSET
    if int(opset) not in EXPORT_OPSETS:
        raise OptionError(f"--opset {opset}: --to ge writes opsets {EXPORT_OPSETS[0]}..{EXPORT_OPSETS[-1]} "
                          f"(11-13 is what every CANN release takes)")
    return int(opset)


# -- the model -------------------------------------------------------------------
def _convert_tf(source, model, opset: int, verbose: bool):
    """tf2onnx at ATC's opset with the com.bridge handlers, no function bodies
    (export_onnx's own pipeline adds functions, which need opset >= 13)."""
    import tf2onnx
    from bridge.converters import export_onnx as eo
    from bridge.converters.tf2onnx_common import custom_opset, register_all
    register_all()
    fn = source.function(model if source.is_keras else None)
    with eo._tf2onnx_logging(verbose) as capture:
        try:
            onnx_model, _ = tf2onnx.convert.from_function(fn, input_signature=source.signature(), opset=opset,
                                                          extra_opset=custom_opset())
        except Exception as e:
            raise eo._handler_failures(capture) or ExportError(f"tf2onnx failed: {type(e).__name__}: {e}") from e
    failure = eo._handler_failures(capture)
    if failure is not None:
        raise failure
    bad = eo.unsupported_nodes(onnx_model, opset)
    if bad:
        raise ExportError(eo._unsupported_message(bad))
    eo._order_outputs(onnx_model, source.output_names)
    eo._fill_output_types(onnx_model)
    return onnx_model, fn


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
    from bridge.ascend.expand import _drop_custom_functions, _set_opsets, opset_of, to_legacy
    out = onnx.ModelProto()
    out.CopyFrom(model)
    _drop_custom_functions(out)
    if len(out.functions):
        out = onnx.inliner.inline_local_functions(out)
    have = opset_of(out)
    if have != opset:
        raise ExportError(f"the ONNX model has default opset {have}, --opset asks {opset}; export it at {opset}")
    fix_shapes(out, shapes)
    if parser == "legacy":
        return to_legacy(out)
    _set_opsets(out, opset, keep_custom=False)  # unused imports (tf2onnx adds ai.onnx.ml) dropped
    return out


# -- the files ------------------------------------------------------------------
def atc_script(shapes: Dict[str, tuple], soc: str) -> str:
    shape_arg = ";".join(f"{k}:{','.join(str(d) for d in v)}" for k, v in shapes.items())
    return f"""#!/usr/bin/env bash
# ATC for model.onnx (generated by bridge export --to ge). Run after opp/install.sh.
# SOC_VERSION overrides --soc_version; OPP_PREFIX the folder install.sh installed into.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if [[ -z "${{ASCEND_HOME_PATH:-}}" ]]; then
  for env in /usr/local/Ascend/ascend-toolkit/set_env.sh "$HOME/Ascend/ascend-toolkit/set_env.sh"; do
    if [[ -f "$env" ]]; then source "$env"; break; fi
  done
fi
: "${{ASCEND_HOME_PATH:?source <CANN>/set_env.sh first}}"
export ASCEND_CUSTOM_OPP_PATH="${{OPP_PREFIX:-$here/opp/installed}}/vendors/bridge${{ASCEND_CUSTOM_OPP_PATH:+:$ASCEND_CUSTOM_OPP_PATH}}"
# --input_format=ND: the model's tensors are NHWC / [..., H] as in TensorFlow; the
# plugins transpose around convolutions themselves.
atc --model="$here/model.onnx" --framework=5 --output="$here/model" \\
    --soc_version="${{SOC_VERSION:-{soc}}}" \\
    --input_format=ND --input_shape="{shape_arg}" "$@"
"""


def readme(model_name: str, parser: str, opset: int, inputs: List[str], outputs: List[str], soc: str) -> str:
    bins = ",".join(f"inputs/{n}.bin" for n in inputs)
    return f"""# {model_name} for Ascend (ATC)

Written by `bridge export {model_name} --to ge` (parser `{parser}`, ONNX opset {opset}).
`model.onnx` has static shapes and the fused ops as plain custom nodes; `opp/` is the
custom OPP package whose ONNX parser plugins ATC needs for them.

## On the Ascend machine, in order

1. Copy this folder there and set up CANN: `source <CANN>/set_env.sh` (sets `ASCEND_HOME_PATH`).
2. Build and install the plugins: `./opp/install.sh` (default route: each op is expanded
   onto GE built-in operators, no kernel needed). `./opp/install.sh --custom-op` maps the
   ops to GE custom operators instead (REG_OP protos in `opp/op_proto/`; bring Ascend C
   kernels). Either writes `opp/installed/vendors/bridge/` (pass another PREFIX as the
   last argument and set `OPP_PREFIX` for atc.sh).
3. Convert: `./atc.sh` (exports `ASCEND_CUSTOM_OPP_PATH`, runs ATC for `{soc}`;
   `SOC_VERSION=Ascend910B1 ./atc.sh` for another chip). Writes `model.om`.
   If ATC reports E16002 for a node, run `bridge ascend check model.onnx --plugins opp`
   here first: it lists what ATC would reject.
4. Run on the verification inputs with msame:
   `msame --model model.om --input {bins} --output out --outfmt BIN`
   (msame writes `out/<time>/model_output_<i>.bin`, outputs in this order: {', '.join(outputs)}).

## Back here

Copy the folder of `.bin` files back and compare against TensorFlow on the same inputs:

    bridge parity {model_name} --inputs inputs/inputs.npz --load-outputs ge=out/<time>

(`inputs/inputs.npz` holds the arrays of `inputs/*.bin`.)
"""


def _write_tree(files: Dict[str, bytes], output: str) -> List[str]:
    """Writes every file under a temporary sibling folder, then moves the entries
    into `output`: no half-written package on failure."""
    os.makedirs(output, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".ge-export-", dir=output)
    try:
        for rel, data in files.items():
            full = os.path.join(tmp, rel)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "wb") as f:
                f.write(data)
            if rel.endswith(".sh"):
                os.chmod(full, os.stat(full).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        for entry in sorted({rel.split("/")[0] for rel in files}):
            dst = os.path.join(output, entry)
            if os.path.isdir(dst) and not os.path.islink(dst):
                shutil.rmtree(dst)
            os.replace(os.path.join(tmp, entry), dst)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return [os.path.join(output, rel) for rel in sorted(files)]


def package(model, output: str, *, opset: int, parser: str, shapes: Dict[str, tuple], soc: str = DEFAULT_SOC,
            feeds: Optional[Dict[str, np.ndarray]] = None, name: str = "model") -> List[str]:
    """Writes DIR from a GE-bound model (see `ge_model`); raises ExportError when
    the pre-flight against the generated plugins is not clean."""
    from bridge.ascend import opp, preflight
    from bridge.ascend.origins import registered_in_source
    pkg = opp.package_files()
    plugins = set().union(*(registered_in_source(t) for p, t in pkg.items() if p.endswith(".cc")))
    findings = preflight.check(model, plugins=plugins, parser=parser, cann=6 if parser == "legacy" else 8)
    if findings:
        raise ExportError("ATC would reject the model:\n" + "\n".join(f"  {f.node}: {f.problem}" for f in findings))
    files = {f"opp/{p}": t.encode() for p, t in pkg.items()}
    files["model.onnx"] = model.SerializeToString()
    files["atc.sh"] = atc_script(shapes, soc).encode()
    outputs = [o.name for o in model.graph.output]
    files["README.md"] = readme(name, parser, opset, list(shapes), outputs, soc).encode()
    if feeds:
        import io
        for k, v in feeds.items():
            files[f"inputs/{k}.bin"] = np.ascontiguousarray(v).tobytes()
        buf = io.BytesIO()
        np.savez(buf, **feeds)
        files["inputs/inputs.npz"] = buf.getvalue()
    return _write_tree(files, output)


def run_routes(model, feeds: Dict[str, np.ndarray]) -> Dict[str, Dict[str, np.ndarray]]:
    """Both plugin routes on onnxruntime: `custom` (native kernels) and `builtin`
    (the expansion ParseOpToGraphFn builds, standard ops only)."""
    import onnxruntime as ort
    from bridge import onnx_plugins
    from bridge.ascend import expand_builtin, legacy_to_runnable
    names = [o.name for o in model.graph.output]
    runnable = legacy_to_runnable(model)
    custom = onnx_plugins.session(runnable, kernels="all")
    builtin = ort.InferenceSession(expand_builtin(model).SerializeToString(), providers=["CPUExecutionProvider"])
    return {route: dict(zip(names, s.run(names, feeds))) for route, s in (("custom", custom), ("builtin", builtin))}


def export(source, output: str, *, mode=None, opset: Optional[int] = None, fuse: bool = True, seed: int = 0,
           verbose: bool = False, progress=None, atol: Optional[float] = None, verify: bool = True,
           parser: str = "new", soc_version: str = DEFAULT_SOC, **_) -> ExportResult:
    """The `--to ge` exporter (interface: bridge/commands/export.py)."""
    from bridge.converters import export_onnx as eo
    from bridge.modelsource import ModelSourceError
    progress = progress or quiet()
    opset = check_opset(opset)
    if parser not in ("new", "legacy"):
        raise OptionError(f"--parser {parser}: choose new or legacy")
    try:
        shapes = source.concrete_shapes(batch=1)
    except ModelSourceError as e:
        raise OptionError(str(e)) from None
    summary: List[str] = []
    fn = None
    if source.kind == "onnx":
        onnx_model = source.model
    else:
        model = eo._fuse(source.model, progress, summary, {}) if fuse and source.is_keras else source.model
        with progress.stage("converting"):
            onnx_model, fn = _convert_tf(source, model, opset, verbose)
    with progress.stage("laying out for ATC"):
        ge = ge_model(onnx_model, opset=opset, parser=parser, shapes=shapes)
    feeds = source.sample_inputs(seed=seed)
    checks: List[Check] = []
    if verify and fn is not None:
        with progress.stage("verifying both plugin routes"):
            ref = {k: np.asarray(v) for k, v in fn(*[feeds[i.name] for i in source.inputs]).items()}
            for route, got in run_routes(ge, feeds).items():
                for c in eo.compare_outputs(got, ref, atol):
                    c.output = f"{c.output} [{route}]"
                    checks.append(c)
    with progress.stage("writing"):
        files = package(ge, output, opset=opset, parser=parser, shapes=shapes, soc=soc_version, feeds=feeds,
                        name=source.name)
    custom = sum(1 for n in ge.graph.node if n.op_type in _custom_types())
    summary.append(f"wrote {output}/ (parser {parser}, opset {opset}, {len(ge.graph.node)} nodes, {custom} custom; "
                   f"ATC pre-flight clean; then: opp/install.sh, atc.sh)")
    return ExportResult(output=output, format="ge", files=files, summary=summary, checks=checks,
                        seconds=dict(progress.seconds), details={"parser": parser, "opset": opset, "soc": soc_version})


def _custom_types():
    from bridge import ops
    return set(ops.SPECS)
