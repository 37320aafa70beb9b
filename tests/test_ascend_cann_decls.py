"""Every generated Ascend C++ source compiled in CI, against bridge's own declarations of
the CANN API it uses (ascend/cann_decls, written from Huawei's documentation: CANN's
headers are on no package index): `g++ -fsyntax-only -Wall -Wextra -Werror`, one
translation unit per file set (its sources #included in turn), the sets side by side.

The sets: the default package's parser plugins (ParseOpToGraphFn onto built-in operators)
and the same plugins built with -DBRIDGE_GE_CUSTOM_OP; its op_proto/ shape functions; the
custom-operator route (REG_OP protos, the op classes with REG_AUTO_MAPPING_OP, its plugins)
for bridge's ops and the two team ops. With CANN's real headers the per-file tests in
test_ascend_plugin / test_ascend_custom_route compile them again.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from bridge.ascend import opp
from bridge.ascend.ge_custom.package import package_files

from test_ascend_custom_route import SPECS

DECLS = Path(__file__).resolve().parent.parent / "ascend" / "cann_decls"
GXX = ["g++", "-std=c++17", "-fsyntax-only", "-Wall", "-Wextra", "-Werror", "-isystem", str(DECLS)]

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ on PATH")

# name -> (the package's files, the sources to compile, include folders, defines)
FILE_SETS = {
    "builtin-plugins": (opp.package_files, [f"{opp.PLUGIN_DIR}/*.cc"], [opp.PLUGIN_DIR], []),
    "builtin-plugins-custom-op": (opp.package_files, [f"{opp.PLUGIN_DIR}/*.cc"], [opp.PLUGIN_DIR],
                                  ["-DBRIDGE_GE_CUSTOM_OP"]),
    "op_proto": (opp.package_files, [f"{opp.PROTO_DIR}/*.cc"], [opp.PROTO_DIR], []),
    "custom-op-route": (lambda: package_files(SPECS), ["op_graph/src/*.cc", f"{opp.PLUGIN_DIR}/*.cc"],
                        ["op_graph/include", "op_graph/src", opp.PLUGIN_DIR], []),
}


def _write(files, root: Path):
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def _unity(root: Path, patterns, name="unity.cc") -> Path:
    sources = sorted(p for pat in patterns for p in root.glob(pat))
    assert sources, patterns
    unity = root / name
    unity.write_text("".join(f'#include "{p}"\n' for p in sources))
    return unity


def _command(root: Path, includes, defines, unity: Path):
    return GXX + defines + [f"-I{root / d}" for d in includes] + [str(unity)]


def _compile_all(jobs):
    """{name: (returncode, stderr)} of the commands, run side by side."""
    running = {name: subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for name, cmd in jobs.items()}
    out = {}
    for name, proc in running.items():
        _, err = proc.communicate(timeout=300)
        out[name] = (proc.returncode, err)
    return out


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    jobs = {}
    for name, (files, patterns, includes, defines) in FILE_SETS.items():
        root = tmp_path_factory.mktemp(name)
        _write(files(), root)
        jobs[name] = _command(root, includes, defines, _unity(root, patterns))
    return _compile_all(jobs)


@pytest.mark.parametrize("name", list(FILE_SETS))
def test_generated_sources_compile_against_the_declarations(compiled, name):
    code, err = compiled[name]
    assert code == 0, err[-4000:]


def test_the_team_ops_are_in_the_custom_route_set():
    files = FILE_SETS["custom-op-route"][0]()
    for spec in SPECS:
        assert f"op_graph/src/{spec.module}.cc" in files and opp.plugin_file(spec) in files


# -- planted bugs: the declarations refuse what CANN's headers refuse --------------------------
def _plant(files, rel, old, new):
    assert files[rel].count(old) >= 1, (rel, old)
    files[rel] = files[rel].replace(old, new, 1)


def test_planted_bugs_are_refused(tmp_path):
    """One compile of both packages with a broken call in each file: every one is reported
    at its own file (a declaration set that took anything would pass them all)."""
    default = opp.package_files()
    ln, yd, cbl = ("fused_layer_norm", "yolo_decode", "yolo_conv_bn_leaky")
    plugin = f"{opp.PLUGIN_DIR}/{{}}_onnx_plugin.cc"
    # a call with one argument too many (SetInput takes a port, a source and its output index)
    first = re.search(r'\w+\.SetInput\("x1", \w+, 0U\);', default[plugin.format(yd)]).group(0)
    _plant(default, plugin.format(yd), first, first.replace("0U);", "0U, 1U);"))
    # functions GE does not have
    _plant(default, f"{opp.PLUGIN_DIR}/bridge_plugin_common.h", "ge::OperatorFactory::CreateOperator(",
           "ge::OperatorFactory::Create(")
    _plant(default, plugin.format(ln), "graph.SetInputs(", "graph.SetInput(")
    _plant(default, plugin.format(ln).replace(ln, cbl), 'op_dest.SetAttr("original_type", ',
           'op_dest.SetOriginalType(')
    # REG_OP with an attribute type GE has no Op<Type> for
    _plant(default, f"{opp.PROTO_DIR}/{yd}.h", ".ATTR(scale_x_y, Float, 1.0)", ".ATTR(scale_x_y, Floats, 1.0)")
    # a double where SetAttr has float, int and bool overloads: ambiguous there and here
    _plant(default, plugin.format(cbl), 'op_dest.SetAttr("alpha", attr_alpha);', 'op_dest.SetAttr("alpha", 0.1);')
    custom = package_files(SPECS[:1])
    name = SPECS[0].module
    # a callback of the wrong signature: it overrides nothing, the class stays abstract
    _plant(custom, f"op_graph/src/{name}.cc", "ge::graphStatus InferDataType(gert::InferDataTypeContext *ctx) override",
           "ge::graphStatus InferDataType(gert::InferShapeContext *ctx) override")
    _write(default, tmp_path / "default")
    _write(custom, tmp_path / "custom")
    jobs = {"default": _command(tmp_path / "default", [opp.PLUGIN_DIR, opp.PROTO_DIR], [],
                                _unity(tmp_path / "default", [f"{opp.PLUGIN_DIR}/*.cc", f"{opp.PROTO_DIR}/*.cc"])),
            "custom": _command(tmp_path / "custom", ["op_graph/include", "op_graph/src"], [],
                               _unity(tmp_path / "custom", ["op_graph/src/*.cc"]))}
    done = _compile_all(jobs)
    assert all(code != 0 for code, _ in done.values())
    errors = done["default"][1] + done["custom"][1]
    want = {f"{yd}_onnx_plugin.cc": r"no matching function for call to 'ge::Operator::SetInput\(",
            "bridge_plugin_common.h": r"'Create' is not a member of 'ge::OperatorFactory'",
            f"{ln}_onnx_plugin.cc": r"has no member named 'SetInput'",
            f"{cbl}_onnx_plugin.cc": r"has no member named 'SetOriginalType'|call of overloaded 'SetAttr\(",
            f"{yd}.h": r"'OpFloats' was not declared",
            f"{name}.cc": r"marked 'override', but does not override"}
    for where, pattern in want.items():
        lines = [x for x in errors.splitlines() if where in x and "error" in x]
        assert any(re.search(pattern, x.replace("\u2018", "'").replace("\u2019", "'")) for x in lines), \
            (where, pattern, errors[-3000:])
    assert re.search(r"call of overloaded 'SetAttr\(const char \[6\], double\)' is ambiguous",
                     errors.replace("\u2018", "'").replace("\u2019", "'")), errors[-3000:]
    assert "invalid new-expression of abstract class type" in errors.replace("\u2018", "'").replace("\u2019", "'")
