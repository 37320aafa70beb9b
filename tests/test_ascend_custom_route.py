"""The GE custom-operator route (`bridge export --to ge --route custom-op`):

- the generated InferShape, as its Python twin, against the spec's shape function on
  many shapes (the spec's case tables, one-step mutations of them, random ones), bad
  ones included, for bridge's three ops and a team's op (examples/custom_op, loaded
  without registering it: the other tests see exactly bridge's ops);
- the same C++ (GE-independent part) compiled here with g++ and run on those cases,
  and the default route's op_proto/ InferShape (the same shape function behind a
  ge::Operator) compiled against a stand-in of the ge::Operator it uses and run on them;
- the names that must agree (REG_OP, the REG_AUTO_MAPPING_OP class, the plugin's GE
  type, npu_supported_ops.json) read back from the generated files;
- the bundle, and `bridge ascend check --plugins` on both routes;
- with CANN's public headers (BRIDGE_GE_CUSTOM_OP_HEADERS), -fsyntax-only -Werror.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from bridge import ops
from bridge.ascend import opp, render_cpp
from bridge.ascend.ge_custom import common, render, shape_cpp, tables
from bridge.ascend.ge_custom.package import package_files
from bridge.ascend.ge_names import ge_op_type
from bridge.ascend.origins import plugin_origins
from bridge.ops.spec import dims

from ascend_models import one_op_model

ROOT = Path(__file__).resolve().parent.parent
TEAM_SPEC = ROOT / "examples" / "custom_op" / "fused_bias_gelu.py"


def _team_spec():
    m = importlib.util.spec_from_file_location("scratch_ge_custom_fused_bias_gelu", TEAM_SPEC)
    module = importlib.util.module_from_spec(m)
    m.loader.exec_module(module)
    return module.SPEC


def _scaffold_spec():
    """The spec `bridge op new` writes (the start of most team ops), not registered."""
    import types
    from bridge.commands.op import SPEC_TEMPLATE
    module = types.ModuleType("scratch_ge_custom_fused_bias_relu")
    exec(compile(SPEC_TEMPLATE.format(name="FusedBiasRelu", module="fused_bias_relu", domain="com.example"),
                 "fused_bias_relu.py", "exec"), module.__dict__)
    return module.SPEC


TEAM = _team_spec()
SCAFFOLD = _scaffold_spec()
SPECS = list(ops.all_specs()) + [TEAM, SCAFFOLD]


def _f32(attrs):
    """Float attributes as GE holds them (float32), so C++ and Python print the same."""
    def one(v):
        if isinstance(v, float):
            return float(np.float32(v))
        if isinstance(v, (tuple, list)) and v and isinstance(v[0], float):
            return tuple(float(np.float32(x)) for x in v)
        return v
    return {k: one(v) for k, v in attrs.items()}


def _cases(spec, count=250):
    """(input shapes, the node's attributes): bad inputs with their attributes, then
    probe shapes under each example's and each bad input's attributes."""
    bad = [(tuple(b.shapes), _f32(b.onnx[0])) for b in spec.bad_inputs() if b.in_onnx]
    attr_sets = [_f32(e.onnx_attrs) for e in spec.examples()] + [a for _, a in bad] or [{}]
    if not spec.examples():
        attr_sets = [_f32(a) for a in tables.team_attrs(spec)]
    uniq = []
    for a in attr_sets:
        if a not in uniq:
            uniq.append(a)
    out = list(bad)
    for i, a in enumerate(uniq[:6]):
        out += [(s, a) for s in tables.probe_shapes(spec, seed=i, count=count)]
    return out


def _twin_says_what_the_spec_says(spec, cases):
    """The table against the spec's shape function on `cases`, both sides reached."""
    table = tables.shape_table(spec)
    results = [tables.spec_result(spec, s, a) for s, a in cases]
    refused = sum(1 for r in results if r[0] == "error")
    accepted = len(results) - refused
    assert refused >= 100 and accepted >= 100, (accepted, refused)
    for (shapes, attrs), want in zip(cases, results):
        got = tables.table_result(spec, table, shapes, attrs)
        assert got == want, f"{spec.name} {[dims(s) for s in shapes]} {attrs}"


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_infer_shape_twin_matches_the_spec(spec):
    _twin_says_what_the_spec_says(spec, _cases(spec))


# -- a team's rule, on shapes of every rank ------------------------------------------------
TEAM_SPECS = [TEAM, SCAFFOLD]


def _held_out_attrs(spec):
    """The examples' attributes, and one set of other values."""
    other = {a.name: (-2.5 if a.type == "float" else 3) for a in spec.onnx_attrs if a.type in ("float", "int")}
    return tables.team_attrs(spec) + ([other] if other else [])


def _wide_probes(spec, seed: int, count: int):
    """Input shapes outside probe_shapes' vocabulary (its dims are 0..8 and ranks 0..4)."""
    rng = np.random.default_rng(seed)
    vocab = [0, 1, 4, 6, 8, 16, 768, None]

    def some(lo, hi):
        return tuple(vocab[int(rng.integers(len(vocab)))] for _ in range(int(rng.integers(lo, hi + 1))))
    out = []
    for _ in range(count):
        first = None if rng.random() < 0.05 else some(0, 6)
        last = first[-1] if first else 4
        shapes = [first]
        for _ in range(len(spec.inputs) - 1):
            pick = rng.random()
            shapes.append(None if pick < 0.05 else (last,) if pick < 0.5 else (None,) if pick < 0.6 else
                          ((last or 0) + 1,) if pick < 0.75 else first if pick < 0.85 else some(0, 3))
        out.append(tuple(shapes))
    return out


def _held_out_cases(spec, count=400):
    shapes = [s for seed in (1001, 1002, 1003) for s in tables.probe_shapes(spec, seed=seed, count=count)]
    shapes += _wide_probes(spec, seed=7, count=count)
    return [(s, a) for a in _held_out_attrs(spec) for s in dict.fromkeys(shapes)]


# (x, bias) -> the output's shape, or the argument the refusal names; both team ops
# are y = f(x + bias) with bias [C], C the last dim of x.
HAND_SHAPES = [
    (((2, 5), (5,)), (2, 5)),
    (((768,), (768,)), (768,)),
    (((1, 1, 1, 1, 1, 3), (3,)), (1, 1, 1, 1, 1, 3)),
    (((2, 3, 4, 5, 6, 7), (7,)), (2, 3, 4, 5, 6, 7)),
    (((0, 4), (4,)), (0, 4)),
    (((4, 0), (0,)), (4, 0)),
    (((1,), (1,)), (1,)),
    (((None, 4), (4,)), (None, 4)),
    (((None, None, None), (None,)), (None, None, None)),
    (((None, None, None, None), None), (None, None, None, None)),
    (((2, 5), None), (2, 5)),
    (((2, 5), (None,)), (2, 5)),
    ((None, (5,)), None),
    ((None, None), None),
    (((), (1,)), "x"),
    (((), None), "x"),
    (((2, 5), (4,)), "bias"),
    (((2, 5), (6,)), "bias"),
    (((2, 768), (767,)), "bias"),
    (((2, 5), (1, 5)), "bias"),
    (((2, 5), ()), "bias"),
    (((3,), (3, 3)), "bias"),
    (((2, 5), (2, 5)), "bias"),
    (((7, 9, 11), (12,)), "bias"),
    (((1, 1, 1, 1, 1, 8), (1,)), "bias"),
]
# An unknown C: FusedBiasGelu takes any bias dim, the scaffold only an unknown one.
HAND_UNKNOWN_C = {"FusedBiasGelu": [(((2, None), (7,)), (2, None)), (((2, None), (None,)), (2, None))],
                  "FusedBiasRelu": [(((2, None), (7,)), "bias"), (((2, None), (None,)), (2, None))]}


@pytest.mark.parametrize("spec", TEAM_SPECS, ids=lambda s: s.name)
def test_team_shapes_written_by_hand(spec):
    table = tables.shape_table(spec)
    for shapes, want in HAND_SHAPES + HAND_UNKNOWN_C[spec.name]:
        for attrs in _held_out_attrs(spec):
            said = tables.spec_result(spec, shapes, attrs)
            if isinstance(want, str):
                assert said[0] == "error" and said[1].startswith(f"{spec.name}: argument '{want}': "), (shapes, said)
            else:
                assert said[0] == "ok" and [None if o is None else tuple(o) for o in said[1]] == [want], (shapes, said)
            assert tables.table_result(spec, table, shapes, attrs) == said, (shapes, attrs)


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_infer_dtype_twin(spec):
    n = len(spec.inputs)
    for d in ("float32", "float16", "bfloat16", "float64", "int32"):
        try:
            spec.check_dtype(d)
            want = ("ok", (d,) * len(spec.outputs))
        except ops.OpError as e:
            want = ("error", str(e))
        try:
            got = ("ok", shape_cpp.infer_dtypes(spec, (d,) * n))
        except ops.OpError as e:
            got = ("error", str(e))
        assert got == want
    if n > 1:
        with pytest.raises(ops.OpError, match=rf"argument '{spec.inputs[1].name}': dtype float16 differs from"):
            shape_cpp.infer_dtypes(spec, ("float32", "float16") + ("float32",) * (n - 2))


def test_every_op_states_its_rule_in_its_spec():
    """The GE table is the spec's own rule, bridge's ops and a team's alike: no file
    beside the spec, no guessing from the shape function."""
    assert not (ROOT / "bridge" / "ascend" / "infer_shape").exists()
    for spec in SPECS:
        assert tables.shape_table(spec) == tuple(spec.shape_rule) and spec.shape_rule


def test_both_routes_carry_the_same_shape_function():
    """The default route's op_proto/shape/<module>_shape.h is the custom-operator
    route's op_graph/src/<module>_shape.h, byte for byte (one renderer, one table)."""
    default = opp.package_files()
    custom = package_files()
    for spec in ops.all_specs():
        assert default[f"{opp.SHAPE_DIR}/{spec.module}_shape.h"] == custom[f"op_graph/src/{spec.module}_shape.h"]
        assert f'#include "shape/{spec.module}_shape.h"' in default[f"{opp.PROTO_DIR}/{spec.module}.cc"]
    assert default[f"{opp.SHAPE_DIR}/bridge_ge_core.h"] == custom["op_graph/src/bridge_ge_core.h"]


def test_team_op_without_a_rule_is_refused_by_name():
    import dataclasses

    def infer(x, bias):
        if x is not None and len(x) != 3:
            raise ops.OpError("OddOp", "x", "must have rank 3")
        return (x,)
    odd = dataclasses.replace(TEAM, name="OddOp", _infer=infer, shape_rule=())
    with pytest.raises(tables.NoShapeTable, match=r"OddOp: its spec states no shape rule"):
        tables.shape_table(odd)
    assert odd not in tables.custom_specs()


def test_names_that_cannot_be_cpp_identifiers_are_refused():
    import dataclasses
    bad = dataclasses.replace(TEAM, onnx_attrs=(ops.Attr("not valid", "int", 1),))
    with pytest.raises(ValueError, match=r"attribute 'not valid' cannot be a C\+\+ identifier"):
        render.check_names(bad)
    with pytest.raises(ValueError, match=r"tensor 'class' cannot"):
        render.check_names(dataclasses.replace(TEAM, inputs=(ops.Arg("class"), ops.Arg("bias"))))


# -- the names that must agree ---------------------------------------------------------
def _one(pattern, text):
    found = re.findall(pattern, text)
    assert len(found) == 1, (pattern, found)
    return found[0]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_the_four_names_agree(spec):
    files = package_files([spec])
    name = ge_op_type(spec)
    proto = _one(r"\bREG_OP\((\w+)\)", files[f"op_graph/include/{spec.module}.h"])
    src = files[f"op_graph/src/{spec.module}.cc"]
    klass = _one(r"(?m)^class (\w+) : public ge::EagerExecuteOp, public ge::ShapeInferOp, public ge::CompilableOp, "
                 r"public ge::PortableOp \{", src)
    mapped = _one(r"REG_AUTO_MAPPING_OP\((\w+)\);", src)
    plugin = files[opp.plugin_file(spec)]
    ge_type = _one(r'REGISTER_CUSTOM_OP\("(\w+)"\)', plugin)
    listed = list(json.loads(files["framework/tensorflow/npu_supported_ops.json"]))
    assert proto == klass == mapped == ge_type == name and listed == [name]
    assert set(re.findall(r'ge::AscendString\("([^"]+)"\)', plugin)) == set(plugin_origins(spec))
    # the class implements every callback of the four interfaces
    for method in ("InferShape", "InferDataType", "Compile", "Serialize", "Deserialize", "Execute"):
        assert re.search(rf"ge::graphStatus {method}\(.*\) override \{{", src), method
    assert f"bridge_kernels::Launch{name}(tensors, attrs, ctx->GetStream()," in src
    # the REG_OP ports and attributes are the spec's, in order (RuntimeAttrs are read by index)
    header = files[f"op_graph/include/{spec.module}.h"]
    assert re.findall(r"\.INPUT\((\w+),", header) == [a.name for a in spec.inputs]
    assert re.findall(r"\.OUTPUT\((\w+),", header) == [a.name for a in spec.outputs]
    assert re.findall(r"\.(?:REQUIRED_)?ATTR\((\w+),", header) == [a.name for a in spec.onnx_attrs]
    reads = re.findall(r"ReadAttr\(runtime, (\d+)U, &attrs->(\w+)\)", src)
    assert reads == [(str(i), a.name) for i, a in enumerate(spec.onnx_attrs)]


def test_default_route_names_come_from_the_same_place():
    files = opp.package_files()
    for spec in ops.all_specs():
        plugin = files[opp.plugin_file(spec)].split("#ifdef BRIDGE_GE_CUSTOM_OP")[-1].split("#else")[0]
        assert _one(r'REGISTER_CUSTOM_OP\("(\w+)"\)', plugin) == ge_op_type(spec)
        assert _one(r"\bREG_OP\((\w+)\)", files[f"{opp.PROTO_DIR}/{spec.module}.h"]) == ge_op_type(spec)
    assert sorted(json.loads(files["framework/tensorflow/npu_supported_ops.json"])) == \
        sorted(ge_op_type(s) for s in ops.all_specs())


# -- the C++, compiled here --------------------------------------------------------------
# The program reads one case a line: the op, each input shape ("-" for an unknown rank,
# else the rank and the dims, "?" unknown), then the attributes in REG_OP order (a list
# as its length and values), and prints what Infer<Op> says.
_READ = {"float": "    {{ double v; in >> v; a.{n} = static_cast<float>(v); }}",
         "int": "    in >> a.{n};",
         "list(int)": "    {{ size_t k; in >> k; a.{n}.resize(k); for (auto &v : a.{n}) in >> v; }}",
         "list(float)": "    {{ size_t k; in >> k; a.{n}.resize(k); for (auto &v : a.{n}) {{ double d; in >> d; "
                        "v = static_cast<float>(d); }} }}"}


def _case_line(spec, shapes, attrs) -> str:
    words = [ge_op_type(spec)]
    for s in shapes:
        words += ["-"] if s is None else [str(len(s))] + ["?" if d is None else str(d) for d in s]
    resolved = spec.resolve_onnx(attrs)
    for a in spec.onnx_attrs:
        v = resolved[a.name]
        words += [str(len(v)), *map(repr, v)] if a.is_list else [repr(v)]
    return " ".join(words)


def _driver(specs) -> str:
    runs = []
    for spec in specs:
        op = ge_op_type(spec)
        reads = "\n".join(_READ[a.type].format(n=a.name) for a in spec.onnx_attrs)
        runs.append(f"""  if (op == "{op}") {{
    std::vector<Dims> ins({len(spec.inputs)});
    for (auto &d : ins) d = ReadDims(in);
    {op}Attrs a;
{reads}
    std::vector<Dims> out;
    std::string e;
    Show(Infer{op}(ins, a, &out, &e), out, e);
    return;
  }}""")
    includes = "\n".join(f'#include "{s.module}_shape.h"' for s in specs)
    return f"""{includes}
#include <cstdio>
#include <iostream>
#include <sstream>
using namespace bridge_ge;
static void Show(bool ok, const std::vector<Dims> &out, const std::string &e) {{
  if (!ok) {{ std::printf("%s\\n", e.c_str()); return; }}
  std::string line = "ok ";
  for (size_t k = 0; k < out.size(); ++k) line += (k ? ";" : "") + ShapeText(out[k]);
  std::printf("%s\\n", line.c_str());
}}
static Dims ReadDims(std::istream &in) {{
  std::string w;
  in >> w;
  Dims d;
  if (w == "-") return d;
  d.known_rank = true;
  d.d.resize(std::stoul(w));
  for (auto &v : d.d) {{ in >> w; v = w == "?" ? kUnknown : std::stoll(w); }}
  return d;
}}
static void Run(const std::string &line) {{
  std::istringstream in(line);
  std::string op;
  in >> op;
  if (op == "float") {{ std::string v; in >> v; std::printf("%s\\n", PyFloat(std::strtod(v.c_str(), nullptr)).c_str()); return; }}
{chr(10).join(runs)}
  std::printf("unknown op %s\\n", op.c_str());
}}
static void Buffers() {{
  std::map<std::string, std::vector<uint8_t>> bins{{{{"float32[1,2]", {{1, 2, 3}}}}, {{"float16[]", {{}}}}}};
  std::vector<uint8_t> buf;
  SerializeBinaries(bins, &buf);
  std::map<std::string, std::vector<uint8_t>> back;
  std::string e;
  const bool read = DeserializeBinaries(buf, &back, &e);
  std::printf("roundtrip %d %d\\n", read ? 1 : 0, back == bins ? 1 : 0);
  int refused = 0;
  for (size_t n = 1; n < buf.size(); ++n) {{
    std::vector<uint8_t> cut(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n));
    refused += DeserializeBinaries(cut, &back, &e) ? 0 : 1;
  }}
  buf.push_back(0);
  refused += DeserializeBinaries(buf, &back, &e) ? 0 : 1;
  std::printf("refused %d of %zu\\n", refused, buf.size() - 1);
}}
int main() {{
  std::string line;
  while (std::getline(std::cin, line)) Run(line);
  Buffers();
  return 0;
}}
"""


def _twin_line(spec, shapes, attrs) -> str:
    kind, value = tables.table_result(spec, tables.shape_table(spec), shapes, attrs)
    return value if kind == "error" else "ok " + ";".join(dims(s) for s in value)


def _program_cases(spec):
    """What the compiled C++ runs on: _cases, and for a team's op also wider shapes (ranks
    to 6) and the hand-written ones (its C++ is compared with the twin)."""
    cases = _cases(spec, count=120)
    if any(spec is t for t in TEAM_SPECS):
        cases += [(s, _f32(a)) for s, a in _held_out_cases(spec, count=60)]
        cases += [(s, _f32(a)) for s, _ in HAND_SHAPES + HAND_UNKNOWN_C[spec.name] for a in _held_out_attrs(spec)]
    return cases


FLOATS = [0.0, -0.0, 1.0, -13.0, 0.1, 1e-05, 1e-4, 0.00012345, 1e15, 1e16, 1.5e16, 123456789012345678.0,
          1.5e-7, 3.4028234663852886e38, 5e-324, 2.5, 1 / 3, 100000.0, 1e22, -2.75e-300, float(np.float32(0.1)),
          float("nan"), float("inf"), float("-inf")]


@pytest.fixture(scope="module")
def host_program(tmp_path_factory):
    """Every op's Infer<Op> on its cases, PyFloat, and the OM buffer, in one program."""
    if shutil.which("g++") is None:
        pytest.skip("no g++ on PATH: the host test of the generated C++ needs one")
    root = tmp_path_factory.mktemp("host")
    (root / "bridge_ge_core.h").write_text(common.CORE_HEADER)
    lines, expected = [], []
    for spec in SPECS:
        (root / f"{spec.module}_shape.h").write_text(shape_cpp.shape_header(spec))
        for shapes, attrs in _program_cases(spec):
            lines.append(_case_line(spec, shapes, attrs))
            expected.append(_twin_line(spec, shapes, attrs))
    for v in FLOATS:
        lines.append(f"float {v!r}")
        expected.append(repr(v))
    (root / "host.cc").write_text(_driver(SPECS))
    exe = root / "host"
    res = subprocess.run(["g++", "-std=c++17", "-O0", "-Wall", "-Wextra", "-Werror", f"-I{root}", str(root / "host.cc"),
                          "-o", str(exe)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-4000:]
    run = subprocess.run([str(exe)], input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout.splitlines(), expected


def test_generated_cpp_says_what_the_twin_says(host_program):
    lines, expected = host_program
    assert len(lines) == len(expected) + 2
    for got, want in zip(lines, expected):
        assert got == want
    assert sum(1 for w in expected if not w.startswith("ok ")) > 200  # refusals compared, word for word


def test_om_buffer_round_trips_and_refuses_every_truncation(host_program):
    lines, expected = host_program
    assert lines[len(expected)] == "roundtrip 1 1"
    total = int(lines[len(expected) + 1].split()[-1])
    assert lines[len(expected) + 1] == f"refused {total} of {total}"


# -- the default route's op_proto/ InferShape, against a stand-in ge::Operator ----------------
# What the generated op_proto/<module>.cc and shape/bridge_ge_operator.h use of GE, and
# nothing more (a stand-in of ours, not CANN's header): attributes by name, TensorDescs
# by name, GE's -1 / [-2] for an unknown dim / rank; the registration macro keeps the
# function where the driver finds it.
GE_OPERATOR_STUB = r"""#ifndef BRIDGE_TEST_GE_OPERATOR_STUB_H_
#define BRIDGE_TEST_GE_OPERATOR_STUB_H_
#include <cstdint>
#include <map>
#include <string>
#include <vector>
namespace ge {
using graphStatus = uint32_t;
constexpr graphStatus GRAPH_SUCCESS = 0;
constexpr graphStatus GRAPH_FAILED = 0xFFFFFFFF;
enum DataType { DT_FLOAT = 0, DT_FLOAT16 = 1, DT_BF16 = 27 };
class AscendString {
 public:
  AscendString() = default;
  explicit AscendString(const std::string &s) : s_(s) {}
  const char *GetString() const { return s_.c_str(); }
 private:
  std::string s_;
};
class Shape {
 public:
  Shape() = default;
  explicit Shape(const std::vector<int64_t> &dims) : dims_(dims) {}
  std::vector<int64_t> GetDims() const { return dims_; }
 private:
  std::vector<int64_t> dims_;
};
class TensorDesc {
 public:
  Shape GetShape() const { return shape_; }
  void SetShape(const Shape &shape) { shape_ = shape; }
  DataType GetDataType() const { return dtype_; }
  void SetDataType(DataType dtype) { dtype_ = dtype; }
 private:
  Shape shape_;
  DataType dtype_ = DT_FLOAT;
};
class Operator {
 public:
  std::map<std::string, TensorDesc> inputs, outputs;
  std::map<std::string, int64_t> ints;
  std::map<std::string, float> floats;
  std::map<std::string, std::vector<int64_t>> int_lists;
  std::map<std::string, std::vector<float>> float_lists;
  std::map<std::string, std::string> strings;
  TensorDesc GetInputDescByName(const char *name) const { return Find(inputs, name); }
  TensorDesc GetOutputDescByName(const char *name) const { return Find(outputs, name); }
  graphStatus UpdateOutputDesc(const char *name, const TensorDesc &desc) {
    if (outputs.count(name) == 0U) return GRAPH_FAILED;
    outputs[name] = desc;
    return GRAPH_SUCCESS;
  }
  graphStatus GetAttr(const char *name, int64_t &v) const { return Get(ints, name, &v); }
  graphStatus GetAttr(const char *name, float &v) const { return Get(floats, name, &v); }
  graphStatus GetAttr(const char *name, std::vector<int64_t> &v) const { return Get(int_lists, name, &v); }
  graphStatus GetAttr(const char *name, std::vector<float> &v) const { return Get(float_lists, name, &v); }
  graphStatus GetAttr(const char *name, AscendString &v) const {
    std::string s;
    if (Get(strings, name, &s) != GRAPH_SUCCESS) return GRAPH_FAILED;
    v = AscendString(s);
    return GRAPH_SUCCESS;
  }
  graphStatus GetName(AscendString &name) const {
    name = AscendString("node0");
    return GRAPH_SUCCESS;
  }
 private:
  static TensorDesc Find(const std::map<std::string, TensorDesc> &m, const char *name) {
    const auto it = m.find(name);
    return it == m.end() ? TensorDesc() : it->second;
  }
  template <typename T>
  static graphStatus Get(const std::map<std::string, T> &m, const char *name, T *v) {
    const auto it = m.find(name);
    if (it == m.end()) return GRAPH_FAILED;
    *v = it->second;
    return GRAPH_SUCCESS;
  }
};
using InferFn = graphStatus (*)(Operator &);
}  // namespace ge
#define IMPLEMT_COMMON_INFERFUNC(func_name) static graphStatus func_name(Operator &op)
#define COMMON_INFER_FUNC_REG(op_name, x) InferFn g_infer_##op_name = x
#endif
"""

_SET_ATTR = {"float": "    {{ double v; in >> v; op.floats[\"{n}\"] = static_cast<float>(v); }}",
             "int": "    in >> op.ints[\"{n}\"];",
             "list(int)": "    {{ size_t k; in >> k; auto &l = op.int_lists[\"{n}\"]; l.resize(k); for (auto &v : l) in >> v; }}",
             "list(float)": "    {{ size_t k; in >> k; auto &l = op.float_lists[\"{n}\"]; l.resize(k); for (auto &v : l) "
                            "{{ double d; in >> d; v = static_cast<float>(d); }} }}"}


def _proto_driver(specs) -> str:
    """Reads _case_line's lines ("bare " first: the node has no attributes) and prints
    what each op_proto InferShape does: "ok" and the outputs as GE holds them, or its
    refusal (on stderr, joined to stdout) and "failed"."""
    externs, runs = [], []
    for spec in specs:
        externs.append(f"extern InferFn g_infer_{spec.name};")
        inputs = ", ".join(f'"{a.name}"' for a in spec.inputs)
        outputs = ", ".join(f'"{a.name}"' for a in spec.outputs)
        sets = "\n".join(_SET_ATTR[a.type].format(n=a.name) for a in spec.onnx_attrs)
        runs.append(f"""  if (type == "{ge_op_type(spec)}") {{
    for (const char *name : {{{inputs}}}) {{
      ge::TensorDesc d;
      d.SetShape(ge::Shape(ReadGeDims(in)));
      d.SetDataType(ge::DT_FLOAT16);
      op.inputs[name] = d;
    }}
    if (!bare) {{
{sets}
    }}
    Call(ge::g_infer_{spec.name}, &op, {{{outputs}}});
    return;
  }}""")
    return f"""#include <cstdio>
#include <iostream>
#include <sstream>
#include "graph/operator.h"
namespace ge {{
{chr(10).join(externs)}
}}
static std::vector<int64_t> ReadGeDims(std::istream &in) {{
  std::string w;
  in >> w;
  if (w == "-") return {{-2}};
  std::vector<int64_t> d(std::stoul(w));
  for (auto &v : d) {{ in >> w; v = w == "?" ? -1 : std::stoll(w); }}
  return d;
}}
static std::string GeShapeText(const std::vector<int64_t> &d) {{
  if (d.size() == 1 && d[0] == -2) return "<unknown rank>";
  std::string out = "[";
  for (size_t i = 0; i < d.size(); ++i) out += (i ? "," : "") + (d[i] == -1 ? std::string("?") : std::to_string(d[i]));
  return out + "]";
}}
static void Call(ge::InferFn fn, ge::Operator *op, const std::vector<const char *> &outputs) {{
  for (const char *o : outputs) op->outputs[o] = ge::TensorDesc();
  if (fn(*op) != ge::GRAPH_SUCCESS) {{ std::printf("failed\\n"); return; }}
  std::string line = "ok ";
  for (size_t k = 0; k < outputs.size(); ++k) {{
    const ge::TensorDesc &d = op->outputs[outputs[k]];
    line += (k ? ";" : "") + GeShapeText(d.GetShape().GetDims());
    if (d.GetDataType() != ge::DT_FLOAT16) line += " dtype " + std::to_string(static_cast<int>(d.GetDataType()));
  }}
  std::printf("%s\\n", line.c_str());
}}
static void Run(const std::string &line) {{
  std::istringstream in(line);
  std::string type;
  in >> type;
  const bool bare = type == "bare";
  if (bare) in >> type;
  ge::Operator op;
{chr(10).join(runs)}
  std::printf("unknown op %s\\n", type.c_str());
}}
int main() {{
  std::setvbuf(stdout, nullptr, _IONBF, 0);  // the refusals on stderr stay in order with the results
  std::string line;
  while (std::getline(std::cin, line)) Run(line);
  return 0;
}}
"""


@pytest.fixture(scope="module")
def proto_program(tmp_path_factory):
    """Every op's default-route InferShape (op_proto/<module>.cc as generated, its
    REG_OP header replaced by the stand-in) on its cases, and on a node without its
    attributes; the lines it printed, and the lines the twin says it should."""
    if shutil.which("g++") is None:
        pytest.skip("no g++ on PATH: the host test of the generated C++ needs one")
    from bridge.ascend.ge_custom.tables import shape_table
    root = tmp_path_factory.mktemp("proto")
    (root / "graph").mkdir()
    (root / "graph/operator.h").write_text(GE_OPERATOR_STUB)
    (root / "op_proto/shape").mkdir(parents=True)
    (root / "op_proto/shape/bridge_ge_core.h").write_text(common.CORE_HEADER)
    (root / "op_proto/shape/bridge_ge_operator.h").write_text(shape_cpp.OPERATOR_HEADER)
    lines, expected, sources = [], [], []
    for spec in SPECS:
        (root / f"op_proto/{spec.module}.h").write_text('#include "graph/operator.h"\n')
        (root / f"op_proto/shape/{spec.module}_shape.h").write_text(opp.op_proto_shape_header(spec))
        (root / f"op_proto/{spec.module}.cc").write_text(opp.op_proto_source(spec))
        sources.append(str(root / f"op_proto/{spec.module}.cc"))
        cases = _program_cases(spec)
        for shapes, attrs in cases:
            lines.append(_case_line(spec, shapes, attrs))
            kind, value = tables.table_result(spec, shape_table(spec), shapes, attrs)
            expected += [f"[bridge op] node 'node0': {value}", "failed"] if kind == "error" else \
                ["ok " + ";".join(dims(s) for s in value)]
        if spec.onnx_attrs:
            lines.append("bare " + _case_line(spec, *cases[0]))
            expected += [f"[bridge op] node 'node0': {shape_cpp.missing_attr(spec, spec.onnx_attrs[0])}", "failed"]
    (root / "driver.cc").write_text(_proto_driver(SPECS))
    exe = root / "proto"
    res = subprocess.run(["g++", "-std=c++17", "-O0", "-Wall", "-Wextra", "-Werror", f"-I{root}", str(root / "driver.cc"),
                          *sources, "-o", str(exe)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-4000:]
    run = subprocess.run([str(exe)], input="\n".join(lines) + "\n", stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, timeout=60)
    assert run.returncode == 0, run.stdout[-2000:]
    return run.stdout.splitlines(), expected


def test_default_route_infer_shape_says_what_the_twin_says(proto_program):
    got, expected = proto_program
    assert sum(1 for w in expected if w == "failed") > 200  # refusals compared, word for word
    assert sum(1 for w in expected if w.startswith("ok ")) > 200
    assert len(got) == len(expected)
    for g, w in zip(got, expected):
        assert g == w


# -- the bundle and `bridge ascend check` ------------------------------------------------------
@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    from bridge.converters.export_ge import package
    spec = ops.get("FusedLayerNorm")
    model = one_op_model("FusedLayerNorm", [(2, 8), (8,), (8,)], {"epsilon": 1e-5})
    shapes = {i.name: tuple(d.dim_value for d in i.type.tensor_type.shape.dim) for i in model.graph.input}
    out = {}
    for route in ("builtin", "custom-op"):
        folder = tmp_path_factory.mktemp(route)
        package(model, str(folder), opset=11, parser="new", shapes=shapes, route=route)
        out[route] = folder
    assert spec.name in {n.op_type for n in model.graph.node}
    return out


def test_custom_route_bundle_layout_and_readme(bundles):
    d = bundles["custom-op"]
    for rel in ("opp/op_graph/include/fused_layer_norm.h", "opp/op_graph/src/fused_layer_norm.cc",
                "opp/op_graph/src/fused_layer_norm_launch.h", "opp/framework/tensorflow/npu_supported_ops.json",
                "opp/framework/onnx_plugin/fused_layer_norm_onnx_plugin.cc", "opp/kernels/README.md",
                "opp/CMakeLists.txt", "opp/install.sh"):
        assert (d / rel).is_file(), rel
    assert not (d / "opp/op_proto").exists()
    readme = (d / "README.md").read_text()
    assert "custom-operator route" in readme and "kernels/fused_layer_norm_launch.cc" in readme
    assert "npu_supported_ops.json" in readme and "tf.load_op_library" in readme
    assert "Route custom-op" in (d / "atc.sh").read_text()
    assert "Route custom-op" not in (bundles["builtin"] / "atc.sh").read_text()
    cmake = (d / "opp/CMakeLists.txt").read_text()
    assert "op_graph/lib/linux/${CMAKE_SYSTEM_PROCESSOR}" in cmake and "add_library(cust_opapi SHARED" in cmake
    assert "kernels/${op}_launch.cc" in cmake
    assert os.access(d / "opp/install.sh", os.X_OK)


@pytest.mark.parametrize("route", ["builtin", "custom-op"])
def test_ascend_check_understands_both_routes(bundles, route, capsys):
    from bridge.cli import main
    d = bundles[route]
    assert main(["ascend", "check", str(d / "model.onnx"), "--plugins", str(d / "opp"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    [entry] = [r for r in report["plugin_routes"] if r["origin_type"] == "com.bridge::1::FusedLayerNorm"]
    if route == "custom-op":
        assert entry == {"origin_type": "com.bridge::1::FusedLayerNorm", "route": "custom-op",
                         "ge_types": {"FusedLayerNorm": ["proto", "class"]}}
    else:
        assert entry["route"].startswith("builtin") and entry["ge_types"] == {"FusedLayerNorm": ["proto"]}


def test_ascend_check_finds_a_ge_type_nothing_defines(bundles, tmp_path, capsys):
    from bridge.cli import main
    src = bundles["custom-op"] / "opp"
    opp_copy = tmp_path / "opp"
    shutil.copytree(src, opp_copy)
    (opp_copy / "op_graph/src/fused_layer_norm.cc").unlink()
    (opp_copy / "op_graph/include/fused_layer_norm.h").unlink()
    assert main(["ascend", "check", str(bundles["custom-op"] / "model.onnx"), "--plugins", str(opp_copy)]) == 1
    out = capsys.readouterr().out
    assert "no-ge-op" in out and "GE op type FusedLayerNorm" in out


# -- against CANN's public headers ----------------------------------------------------------
# Include folders (":"-separated) holding graph/custom_op.h, graph/operator_reg.h and the
# exe_graph/runtime/*.h they include: e.g. hicann/ge's inc/graph_metadef/external and
# inc/graph_metadef, hicann/metadef's inc/external and inc, and securec.h; never in the repo.
GE_HEADERS = [d for d in os.environ.get("BRIDGE_GE_CUSTOM_OP_HEADERS", "").split(":") if d]


@pytest.mark.skipif(not GE_HEADERS or shutil.which("g++") is None,
                    reason="BRIDGE_GE_CUSTOM_OP_HEADERS (CANN's public GE/metadef headers declaring BaseCustomOp, "
                           "EagerExecuteOp, ShapeInferOp, CompilableOp, PortableOp, REG_AUTO_MAPPING_OP) not set")
@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_custom_operator_compiles_against_ge_headers(tmp_path, spec):
    for rel, text in package_files([spec]).items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    inc = [f"-I{tmp_path}/op_graph/include", f"-I{tmp_path}/op_graph/src"]
    inc += [x for d in GE_HEADERS for x in ("-isystem", d)]
    cmd = ["g++", "-std=c++17", "-fsyntax-only", "-Wall", "-Wextra", "-Werror", *inc,
           str(tmp_path / f"op_graph/src/{spec.module}.cc")]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]


# The custom route's parser plugins, against the headers test_ascend_plugin uses.
HEADERS = os.environ.get("BRIDGE_CANN_HEADERS")


@pytest.mark.skipif(not HEADERS or shutil.which("g++") is None,
                    reason="BRIDGE_CANN_HEADERS (CANN public headers + generated ge_onnx.pb.h) not set")
@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_custom_route_plugin_compiles_against_cann_headers(tmp_path, spec):
    (tmp_path / "bridge_plugin_common.h").write_text(render_cpp.COMMON_HEADER)
    (tmp_path / "plugin.cc").write_text(render_cpp.custom_route_plugin_source(spec, plugin_origins(spec)))
    inc = [f"-I{tmp_path}", f"-I{HEADERS}/gen", f"-I{HEADERS}/include"]
    inc += [f"-I{d}" for d in os.environ.get("BRIDGE_PROTOBUF_INCLUDE", "").split(":") if d]
    res = subprocess.run(["g++", "-std=c++17", "-fsyntax-only", "-Wall", "-Wextra", "-Werror", *inc,
                          str(tmp_path / "plugin.cc")], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]


ASCEND = os.environ.get("ASCEND_HOME_PATH")


@pytest.mark.skipif(not ASCEND or not os.path.isdir(os.path.join(ASCEND or "/nonexistent", "include")),
                    reason="ASCEND_HOME_PATH does not point at a CANN install")
def test_custom_route_builds_with_its_cmake(tmp_path):
    files = package_files()
    for rel, text in files.items():
        path = tmp_path / "opp" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for spec in tables.custom_specs():  # stand-in kernels: the route's own code is what is built
        op = ge_op_type(spec)
        (tmp_path / "opp" / "kernels" / f"{spec.module}_launch.cc").write_text(
            f'#include "{spec.module}_launch.h"\nnamespace bridge_kernels {{\n'
            f"ge::graphStatus Launch{op}(const {op}Tensors &, const bridge_ge::{op}Attrs &, void *,\n"
            "                          const std::vector<uint8_t> &) { return ge::GRAPH_FAILED; }\n}\n")
    build = tmp_path / "build"
    for cmd in (["cmake", "-S", str(tmp_path / "opp"), "-B", str(build)], ["cmake", "--build", str(build), "-j2"],
                ["cmake", "--install", str(build), "--prefix", str(tmp_path / "installed")]):
        res = subprocess.run(cmd, capture_output=True, text=True)
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    libs = list((tmp_path / "installed/vendors/bridge/op_graph/lib/linux").glob("*/libcust_opapi.so"))
    assert len(libs) == 1


def test_cli_export_writes_the_custom_route_on_request(tmp_path, capsys):
    import onnx
    from bridge.cli import main
    src = tmp_path / "yd.onnx"
    onnx.save(one_op_model("YoloDecode", [(1, 3, 4, 16)], dict(anchors=[10., 13., 16., 30.], num_classes=3, stride=8)),
              str(src))
    assert main(["export", str(src), "--to", "ge", "--route", "custom-op", "-o", str(tmp_path / "out")]) == 0
    assert "route custom-op" in capsys.readouterr().out
    assert (tmp_path / "out/opp/op_graph/src/yolo_decode.cc").is_file()
    assert "--route custom-op" in (tmp_path / "out/README.md").read_text()
    assert main(["export", str(src), "--to", "ge", "-o", str(tmp_path / "default")]) == 0
    assert (tmp_path / "default/opp/op_proto/yolo_decode.h").is_file()
    assert not (tmp_path / "default/opp/op_graph").exists()


def test_team_op_takes_the_custom_route(tmp_path):
    """Through the CLI (a subprocess: the team op stays out of this process's registry)."""
    import sys
    import onnx
    from onnx import TensorProto, helper
    node = helper.make_node("FusedBiasGelu", ["x", "bias"], ["y"], domain="com.example", name="gelu0")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5]),
                                            helper.make_tensor_value_info("bias", TensorProto.FLOAT, [5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11),
                                                      helper.make_opsetid("com.example", 1)]), str(tmp_path / "g.onnx"))
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "bridge", "export", str(tmp_path / "g.onnx"), "--to", "ge", "--route",
                           "custom-op", "-o", str(out), "--op-spec", str(TEAM_SPEC)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    src = (out / "opp/op_graph/src/fused_bias_gelu.cc").read_text()
    assert "REG_AUTO_MAPPING_OP(FusedBiasGelu);" in src
    assert "FusedBiasGelu" in json.loads((out / "opp/framework/tensorflow/npu_supported_ops.json").read_text())
    assert "kernels/fused_bias_gelu_launch.cc" in (out / "opp/kernels/README.md").read_text()


def test_plugin_of_an_op_without_attributes_refuses_any_attribute():
    """FusedBiasGelu has no attributes: its ParseParamsFn loop is one refusal (the C++
    is compiled where BRIDGE_CANN_HEADERS is set; here its shape is checked)."""
    src = render_cpp.custom_route_plugin_source(TEAM, plugin_origins(TEAM))
    body = src[src.index("static domi::Status ParseParamsFusedBiasGelu"):src.index("}  // namespace\n")]
    assert body.count("{") == body.count("}") and "} else {" not in body
    assert "for (const auto &attr : node->attribute()) {\n    return bridge::Fail(" in body
    assert "(void)op_dest;" in body


def test_cmake_configures_and_asks_for_the_kernels(tmp_path):
    """Configure only, against a stand-in CANN tree (the libraries and the generated
    ge_onnx.pb.h as empty files): without the team's kernels CMake stops and names each
    file; with them it configures. install.sh parses."""
    from bridge import native
    try:
        cmake = native.cmake_exe()
    except Exception as e:  # no cmake: nothing to configure
        pytest.skip(f"no cmake: {e}")
    cann = tmp_path / "cann"
    (cann / "include/proto/onnx").mkdir(parents=True)
    (cann / "lib64").mkdir()
    for f in ("include/proto/onnx/ge_onnx.pb.h", "lib64/libgraph.so", "lib64/libregister.so"):
        (cann / f).write_text("")
    pkg = tmp_path / "opp"
    for rel, text in package_files().items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    env = dict(os.environ, ASCEND_HOME_PATH=str(cann))

    def configure():
        shutil.rmtree(tmp_path / "build", ignore_errors=True)
        return subprocess.run([cmake, "-S", str(pkg), "-B", str(tmp_path / "build")], capture_output=True, text=True,
                              env=env, timeout=120)
    res = configure()
    assert res.returncode != 0
    message = " ".join(res.stderr.split())
    for spec in tables.custom_specs():
        assert f"kernels/{spec.module}_launch.cc" in message
    for spec in tables.custom_specs():
        (pkg / "kernels" / f"{spec.module}_launch.cc").write_text("// stand-in\n")
    res = configure()
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert subprocess.run(["bash", "-n", str(pkg / "install.sh")]).returncode == 0


def test_a_rule_that_reads_what_the_op_lacks_is_refused_with_the_spec():
    import dataclasses
    from bridge.ops import registry, shape_rules
    bad = dataclasses.replace(TEAM, name="NeedyOp", shape_rule=(
        shape_rules.Require("x", shape_rules.Rank(0).ge(shape_rules.Attr("k")), "too small"),
        shape_rules.OutSame(0, 0)))
    with pytest.raises(registry.SpecError, match=r"NeedyOp: field 'shape_rule': \[0\] Require reads 'k' as an int "
                       r"attribute"):
        registry.check(bad, "needy.py")
    with pytest.raises(registry.SpecError, match=r"field 'shape_rule': shapes no output 0"):
        registry.check(dataclasses.replace(TEAM, shape_rule=(shape_rules.Let("c", shape_rules.Dim(0, -1)),)), "x.py")
    with pytest.raises(registry.SpecError, match=r"field 'shape_rule': an op states its shape rule"):
        registry.check(dataclasses.replace(TEAM, shape_rule=()), "x.py")
