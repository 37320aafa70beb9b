"""The one C++ op ABI's rendered header (bridge/ops/cpp_header.py): compiled and
run, it gives back each spec's names, attributes and defaults exactly, also for
a team spec whose strings are hostile; the build's list of kernel cores is the
op folders that hold a kernel.h."""
from __future__ import annotations

import json
import subprocess
from dataclasses import replace

import pytest

from bridge import native, ops
from bridge.ops import cpp_header
from bridge.ops.spec import Attr

ROOT = native._package_dir("bridge")

# Prints the rendered tables and the Attrs struct's defaults as JSON.
PRINT = r"""
#include <cstdio>
#include <string>
#include "HEADER"
using S = bridge::spec::OP;
std::string q(const std::string& s) {
  std::string o = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') { o += '\\'; o += c; }
    else if (c < 0x20) { char b[8]; std::snprintf(b, sizeof b, "\\u%04x", c); o += b; }
    else o += c;
  }
  return o + "\"";
}
std::string q(const char* s) { return s ? q(std::string(s)) : "null"; }
std::string v(float f) { char b[32]; std::snprintf(b, sizeof b, "%.9g", f); return b; }
std::string v(int64_t i) { return std::to_string(i); }
std::string v(const std::string& s) { return q(s); }
template <typename T> std::string v(const std::vector<T>& xs) {
  std::string o = "[";
  for (size_t i = 0; i < xs.size(); ++i) o += (i ? "," : "") + v(xs[i]);
  return o + "]";
}
struct Defaults {  // the rendered Read() with every attribute absent
  std::string* out;
  template <typename T> void Get(const char* name, T* value, bool has_default) const {
    *out += (out->size() > 1 ? "," : "") + q(name) + ":" + (has_default ? v(*value) : "null");
  }
};
int main() {
  std::string o = "{\"name\":" + q(S::kName) + ",\"doc\":" + q(S::kDoc) + ",\"inputs\":[";
  for (int i = 0; i < S::kNumInputs; ++i) o += (i ? "," : "") + q(S::kInputs[i]);
  o += "],\"outputs\":[";
  for (int i = 0; i < S::kNumOutputs; ++i) o += (i ? "," : "") + q(S::kOutputs[i]);
  o += "],\"tf\":[";
  for (int i = 0; i < S::kNumAttrs; ++i) o += (i ? "," : "") + q(S::kAttrs[i].tf);
  o += "],\"onnx\":[";
  for (int i = 0; i < S::kNumOnnxAttrs; ++i)
    o += std::string(i ? "," : "") + "[" + q(S::kOnnxAttrs[i].name) + "," + q(S::kOnnxAttrs[i].type) + "," +
         q(S::kOnnxAttrs[i].def) + "]";
  std::string d = "{";
  S::Attrs attrs;
  S::Read(Defaults{&d}, &attrs);
  o += "],\"defaults\":" + d + "},\"types\":" + q(S::kTfTypes) + "}";
  std::puts(o.c_str());
}
"""


def _run(tmp_path, spec) -> dict:
    for rel, text in cpp_header.render_all([], [spec]).items():  # the spec's header and its shape rule's
        (tmp_path / rel).parent.mkdir(exist_ok=True)
        (tmp_path / rel).write_text(text)
    header = tmp_path / cpp_header.header_name(spec)
    src = tmp_path / "print.cc"
    src.write_text(PRINT.replace("HEADER", header.as_posix()).replace("OP", spec.name))
    exe = tmp_path / "print"
    built = subprocess.run([native.cxx_compiler(), "-std=c++17", f"-I{ROOT}", f"-I{tmp_path}", str(src), "-o", str(exe)],
                           capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr[-3000:]
    return json.loads(subprocess.run([str(exe)], capture_output=True, text=True, timeout=30, check=True).stdout)


def _expected_value(a: Attr):
    if a.required:
        return None
    if a.type == "float":
        return pytest.approx(float(a.default), rel=1e-7)
    if a.type == "list(float)":
        return pytest.approx([float(v) for v in a.default], rel=1e-7)
    return list(a.default) if a.is_list else a.default


@pytest.mark.parametrize("name", [s.name for s in ops.all_specs()])
def test_the_rendered_header_gives_back_the_spec(tmp_path, name):
    spec = ops.get(name)
    got = _run(tmp_path, spec)
    assert got["name"] == spec.name and got["doc"] == spec.doc
    assert got["inputs"] == [a.name for a in spec.inputs] and got["outputs"] == [a.name for a in spec.outputs]
    assert got["tf"] == [cpp_header.tf_declaration(a) for a in spec.attrs]
    assert [n for n, _, _ in got["onnx"]] == [a.name for a in spec.onnx_attrs]
    assert [t for _, t, _ in got["onnx"]] == [a.type for a in spec.onnx_attrs]
    assert [d is None for _, _, d in got["onnx"]] == [a.required for a in spec.onnx_attrs]
    assert list(got["defaults"]) == [a.name for a in spec.attrs]
    for a in spec.attrs:
        assert got["defaults"][a.name] == _expected_value(a), a.name


HOSTILE = 'a "quote", a \\ backslash, */ #include <x> \n a newline, \t a tab, é'


def test_hostile_strings_land_escaped_and_come_back_verbatim(tmp_path):
    spec = replace(ops.get("YoloConvBnLeaky"), name="Hostile", module="hostile", doc=HOSTILE,
                   attrs=(Attr("mode", "string", "it's \"odd\"\\", allowed=("it's \"odd\"\\", "x'y")),
                          Attr("k", "int", -3), Attr("w", "list(float)", (0.5, -2.0))))
    got = _run(tmp_path, spec)
    assert got["doc"] == HOSTILE
    assert got["defaults"] == {"mode": "it's \"odd\"\\", "k": -3, "w": [0.5, -2.0]}
    assert got["tf"][0] == "mode: {'it\\'s \"odd\"\\\\', 'x\\'y'} = 'it\\'s \"odd\"\\\\'"


def test_a_name_that_is_no_identifier_is_refused():
    spec = replace(ops.get("FusedLayerNorm"), attrs=(Attr("bad-name", "float", 1.0),))
    with pytest.raises(ValueError, match="'bad-name' is not a C\\+\\+ identifier"):
        cpp_header.render(spec)
    with pytest.raises(ValueError, match="an #include cannot carry"):
        cpp_header.render_cores([(ops.get("FusedLayerNorm"), 'evil"\n#include "x.h')])


def test_the_cores_are_the_op_folders_with_a_kernel_h():
    cores = native.kernel_cores()
    assert sorted(s.name for s, _ in cores) == sorted(
        s.name for s in ops.all_specs() if (ROOT / "ops" / s.module / "kernel.h").is_file())
    assert {"FusedLayerNorm", "YoloDecode"} <= {s.name for s, _ in cores}
    folder, files = native.op_headers()
    text = (folder / "spec" / "cores.h").read_text()
    for spec, path in cores:
        assert f'#include "ops/{spec.module}/kernel.h"' in text and f"X({spec.name})" in text
        assert path in files and folder / cpp_header.header_name(spec) in files
