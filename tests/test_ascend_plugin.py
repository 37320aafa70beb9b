"""The generated OPP package: registrations, attribute names and types against the
spec, valid JSON, and (where headers or CANN exist) the C++ compiles."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest

from bridge import ops
from bridge.ascend import backend_status, opp
from bridge.ascend.origins import PARSERS, expected_origins, plugin_origins, registered_in_dir, registered_in_source

_PROTO = {"float": "FLOAT", "int": "INT", "list(int)": "INTS", "list(float)": "FLOATS"}
_REG = {"float": "Float", "int": "Int", "list(int)": "ListInt", "list(float)": "ListFloat"}


@pytest.fixture(scope="module")
def files():
    return opp.package_files()


@pytest.mark.parametrize("spec", ops.all_specs(), ids=lambda s: s.name)
def test_both_routes_register_every_origin_type_of_both_parsers(spec, files):
    src = files[opp.plugin_file(spec)]
    custom, builtin = src.split("#ifdef BRIDGE_GE_CUSTOM_OP")[-1].split("#else")
    want = {o for p in PARSERS for o in expected_origins(spec, p)}
    assert f"{spec.domain}::{spec.domain_version}::{spec.name}" in want
    for route in (custom, builtin):
        assert registered_in_source(route) == want
    assert f'REGISTER_CUSTOM_OP("{spec.name}")' in custom and "ParseOpToGraphFn" not in custom
    assert 'REGISTER_CUSTOM_OP("PartitionedCall")' in builtin and f"ParseOpToGraphFn(ParseOpToGraph{spec.name})" in builtin
    assert backend_status(spec) == {"ascend": "yes"}


@pytest.mark.parametrize("spec", ops.all_specs(), ids=lambda s: s.name)
def test_plugin_attributes_match_the_schema(spec, files):
    src = files[opp.plugin_file(spec)]
    parsed = dict(re.findall(r'attr\.name\(\) == "(\w+)"\) \{\n\s+if \(attr\.type\(\) != ge::onnx::AttributeProto::(\w+)\)', src))
    assert parsed == {a.name: _PROTO[a.type] for a in spec.onnx_attrs}
    for a in spec.onnx_attrs:
        assert f'op_dest.SetAttr("{a.name}", attr_{a.name});' in src
        if a.required:
            assert f"required attribute '{a.name}' is missing" in src
    header = files[f"{opp.PROTO_DIR}/{spec.module}.h"]
    reg = dict(re.findall(r"\.(?:REQUIRED_)?ATTR\((\w+), (\w+)", header))
    assert reg == {a.name: _REG[a.type] for a in spec.onnx_attrs}
    assert re.findall(r"\.INPUT\((\w+),", header) == [a.name for a in spec.inputs]
    assert re.findall(r"\.OUTPUT\((\w+),", header) == [a.name for a in spec.outputs]


def test_npu_supported_ops_json_lists_every_op(files):
    data = json.loads(files["framework/tensorflow/npu_supported_ops.json"])
    assert sorted(data) == sorted(ops.SPECS)
    assert all(v == {"isGray": False, "isHeavy": False} for v in data.values())


def test_registered_in_dir_reads_sources_and_libraries(tmp_path, files):
    (tmp_path / "a.cc").write_text(files[opp.plugin_file(ops.get("YoloDecode"))])
    (tmp_path / "libx.so").write_bytes(b"\x00\x7fELF junk com.bridge::1::FusedLayerNorm\x00more")
    found = registered_in_dir(str(tmp_path))
    assert set(plugin_origins(ops.get("YoloDecode"))) <= found
    assert "com.bridge::1::FusedLayerNorm" in found
    assert "com.bridge::1::YoloConvBnLeaky" not in found


def _write(files, root):
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)


# CANN's public headers (register/register.h, graph/*.h) and a generated
# proto/onnx/ge_onnx.pb.h, laid out as <dir>/include and <dir>/gen; never in the repo.
HEADERS = os.environ.get("BRIDGE_CANN_HEADERS")


@pytest.mark.skipif(not HEADERS or shutil.which("g++") is None,
                    reason="BRIDGE_CANN_HEADERS (CANN public headers + generated ge_onnx.pb.h) not set")
@pytest.mark.parametrize("define", ["", "-DBRIDGE_GE_CUSTOM_OP"], ids=["builtin", "custom-op"])
def test_plugins_compile_against_cann_headers(tmp_path, files, define):
    _write(files, tmp_path)
    inc = [f"-I{tmp_path}/{opp.PLUGIN_DIR}", f"-I{HEADERS}/gen", f"-I{HEADERS}/include"]
    inc += [f"-I{d}" for d in os.environ.get("BRIDGE_PROTOBUF_INCLUDE", "").split(":") if d]
    for spec in ops.all_specs():
        cmd = ["g++", "-std=c++17", "-fsyntax-only", "-Wall", "-Wextra", "-Werror", *filter(None, [define]), *inc,
               str(tmp_path / opp.plugin_file(spec))]
        res = subprocess.run(cmd, capture_output=True, text=True)
        assert res.returncode == 0, res.stderr[-3000:]
        proto = ["g++", "-std=c++17", "-fsyntax-only", "-Wall", "-Wextra", "-Werror", f"-I{tmp_path}/{opp.PROTO_DIR}",
                 f"-I{HEADERS}/include", str(tmp_path / opp.PROTO_DIR / f"{spec.module}.cc")]
        res = subprocess.run(proto, capture_output=True, text=True)
        assert res.returncode == 0, res.stderr[-3000:]


ASCEND = os.environ.get("ASCEND_HOME_PATH")


@pytest.mark.skipif(not ASCEND or not os.path.isdir(os.path.join(ASCEND or "/nonexistent", "include")),
                    reason="ASCEND_HOME_PATH does not point at a CANN install")
@pytest.mark.parametrize("custom", ["OFF", "ON"])
def test_package_builds_with_its_cmake(tmp_path, files, custom):
    _write(files, tmp_path / "opp")
    build = tmp_path / "build"
    for cmd in (["cmake", "-S", str(tmp_path / "opp"), "-B", str(build), f"-DBRIDGE_GE_CUSTOM_OP={custom}"],
                ["cmake", "--build", str(build), "-j2"],
                ["cmake", "--install", str(build), "--prefix", str(tmp_path / "installed")]):
        res = subprocess.run(cmd, capture_output=True, text=True)
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    lib = tmp_path / "installed/vendors/bridge/framework/onnx/libcust_onnx_parsers.so"
    assert lib.exists()
    assert all(set(plugin_origins(s)) <= registered_in_dir(str(lib.parent)) for s in ops.all_specs())
