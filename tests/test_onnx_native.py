"""The native onnxruntime kernels: their tables agree with the specs, they are
the ones that run when registered, and bad input makes Run fail clearly."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper
from onnxruntime.capi.onnxruntime_pybind11_state import Fail, InvalidArgument, RuntimeException

from bridge import onnx_plugins
from bridge import ops as specs
from bridge.onnx_plugins.one_op import one_op_model

from conftest import assert_close, onednn_has_f32_brgemm

ORT_ERRORS = (Fail, InvalidArgument, RuntimeException)  # session creation reports RuntimeException


@pytest.fixture(scope="module")
def library():
    return onnx_plugins.ort_library_path()


def test_cpp_tables_match_the_specs(library):
    described = onnx_plugins.library_ops(library)
    assert set(described) == set(specs.SPECS)
    for spec in specs.all_specs():
        d = described[spec.name]
        assert d["inputs"] == [i.name for i in spec.inputs]
        assert d["outputs"] == [o.name for o in spec.outputs]
        assert [a["name"] for a in d["attrs"]] == [a.name for a in spec.onnx_attrs]
        for a, cpp in zip(spec.onnx_attrs, d["attrs"]):
            assert cpp["type"] == a.type, a.name
            if a.required:
                assert cpp["default"] is None, a.name
                continue
            cast = float if a.element_type == "float" else int
            value = [cast(v) for v in cpp["default"].split(",") if v] if a.is_list else cast(cpp["default"])
            assert value == pytest.approx(list(a.default) if a.is_list else a.default), a.name


def test_backend_status_sees_the_library(library):
    for spec in specs.all_specs():
        assert onnx_plugins.backend_status(spec) == {"onnx_schema": "yes", "onnx_function": "yes", "ort_kernel": "yes"}


def _two_op_model(rng):
    """FusedLayerNorm feeding YoloDecode (x is [N,H,W,A*(5+C)])."""
    ln, dec = specs.get("FusedLayerNorm"), specs.get("YoloDecode")
    g, b = rng.standard_normal(12).astype(np.float32), rng.standard_normal(12).astype(np.float32)
    attrs = dict(anchors=[3.0, 4.0, 5.0, 6.0], num_classes=1, stride=4)
    nodes = [helper.make_node("FusedLayerNorm", ["x", "gamma", "beta"], ["h"], domain="com.bridge", epsilon=1e-4),
             helper.make_node("YoloDecode", ["h"], ["boxes", "objectness", "class_probs"], domain="com.bridge",
                              **attrs)]
    graph = helper.make_graph(nodes, "two", [helper.make_tensor_value_info("x", 1, ["n", 2, 3, 12])],
                              [helper.make_tensor_value_info(n, 1, None) for n in ("boxes", "objectness", "class_probs")],
                              initializer=[onnx.numpy_helper.from_array(g, "gamma"),
                                           onnx.numpy_helper.from_array(b, "beta")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = rng.standard_normal((2, 2, 3, 12)).astype(np.float32)
    ref = dec.reference_onnx(ln.reference_onnx(x, g, b, epsilon=1e-4), **attrs)
    return model, x, ref


@pytest.mark.parametrize("kernels,native", [("all", {"FusedLayerNorm", "YoloDecode"}), ("none", set()),
                                            (["FusedLayerNorm"], {"FusedLayerNorm"}),
                                            (["YoloDecode"], {"YoloDecode"})])
def test_registered_kernels_run_and_the_others_fall_back_to_functions(library, rng, kernels, native):
    model, x, ref = _two_op_model(rng)
    before = {op: onnx_plugins.kernel_calls(op) for op in ("FusedLayerNorm", "YoloDecode")}
    outs = onnx_plugins.session(model, kernels=kernels).run(None, {"x": x})
    for got, r in zip(outs, ref):
        assert_close("YoloDecode", got, r, "float32", scale=10, what=f"kernels={kernels}")
    ran = {op for op in before if onnx_plugins.kernel_calls(op) > before[op]}
    assert ran == native


@pytest.mark.parametrize("kernels,native", [("all", {"FusedLayerNorm", "YoloDecode"}), ("none", set()),
                                            (["YoloDecode"], {"YoloDecode"})])
def test_session_from_a_path_with_external_data(library, rng, tmp_path, monkeypatch, kernels, native):
    """A file with external data (what an export over 2 GB writes) and no
    functions: with every op native the path goes to onnxruntime untouched (the
    file is never parsed here); otherwise the missing functions are added in
    memory and the tensor data still comes from the file's folder, whatever the
    working directory. The file and its folder are left as they were."""
    model, x, ref = _two_op_model(rng)
    path = tmp_path / "model" / "m.onnx"
    path.parent.mkdir()
    onnx.save(model, str(path), save_as_external_data=True, location="m.onnx.data", size_threshold=0)
    stored = onnx.load(str(path), load_external_data=False)
    assert all(t.data_location == onnx.TensorProto.EXTERNAL for t in stored.graph.initializer)
    assert not stored.functions
    files = {p.name: p.read_bytes() for p in path.parent.iterdir()}
    monkeypatch.chdir(tmp_path)  # the data file is not next to the working directory
    if kernels == "all":
        monkeypatch.setattr(onnx, "load", lambda *a, **k: pytest.fail("the model was re-read in Python"))
    before = {op: onnx_plugins.kernel_calls(op) for op in ("FusedLayerNorm", "YoloDecode")}
    outs = onnx_plugins.session(path, kernels=kernels).run(None, {"x": x})
    for got, r in zip(outs, ref):
        assert_close("YoloDecode", got, r, "float32", scale=10, what=f"kernels={kernels}")
    assert {op for op in before if onnx_plugins.kernel_calls(op) > before[op]} == native
    assert {p.name: p.read_bytes() for p in path.parent.iterdir()} == files


def test_profiling_names_the_custom_kernel(library, rng, tmp_path):
    """An independent witness to the kernel counter: onnxruntime's own profile
    shows one FusedLayerNorm node with the library, only standard ops without."""
    x = rng.standard_normal((4, 16)).astype(np.float32)
    model = one_op_model("FusedLayerNorm", [x, x[0], x[1]], opset=16)
    kinds = {}
    for kernels in ("all", "none"):
        so = ort.SessionOptions()
        so.enable_profiling = True
        so.profile_file_prefix = str(tmp_path / kernels)
        s = onnx_plugins.session(model, kernels=kernels, options=so)
        s.run(None, {"x": x, "gamma": x[0], "beta": x[1]})
        import json
        events = json.load(open(s.end_profiling()))
        kinds[kernels] = {e["args"].get("op_name") for e in events if e.get("cat") == "Node" and "args" in e}
    assert "FusedLayerNorm" in kinds["all"]
    assert "FusedLayerNorm" not in kinds["none"] and kinds["none"]


def _dynamic_model(op, ranks, attrs, elem=1):
    """A model whose inputs have unknown dims, so only the kernel sees the shapes."""
    spec = specs.get(op)
    node = helper.make_node(op, [i.name for i in spec.inputs], [o.name for o in spec.outputs], domain=spec.domain,
                            **attrs)
    ins = [helper.make_tensor_value_info(i.name, elem, [f"{i.name}{k}" for k in range(r)])
           for i, r in zip(spec.inputs, ranks)]
    outs = [helper.make_tensor_value_info(o.name, elem, None) for o in spec.outputs]
    return helper.make_model(helper.make_graph([node], "bad", ins, outs),
                             opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.bridge", 1)])


def _ones(*shape):
    return np.full(shape, 0.5, np.float32)


CONV_OK = dict(x=_ones(1, 5, 5, 3), filter=_ones(3, 3, 3, 4), conv_bias=_ones(4), bn_gamma=_ones(4),
               bn_beta=_ones(4), bn_mean=_ones(4), bn_variance=_ones(4))
def _bad(kind):
    """The spec tables' bad inputs that an ONNX node can carry."""
    for spec in specs.all_specs():
        for bad in spec.bad_inputs():
            if bad.kind == kind and bad.in_onnx:
                yield pytest.param(spec.name, bad, id=f"{spec.name}-{bad.id}")


@pytest.mark.parametrize("op,bad", list(_bad("shape")))
def test_bad_shapes_fail_the_run_with_a_clear_message(library, op, bad):
    attrs, message = bad.onnx
    spec = specs.get(op)
    sess = onnx_plugins.session(_dynamic_model(op, [len(s) for s in bad.shapes], attrs), kernels=[op])
    with pytest.raises(InvalidArgument) as e:
        sess.run(None, dict(zip([i.name for i in spec.inputs], bad.inputs())))
    assert message in str(e.value)
    # the same session still works afterwards, on a row of the op's case table that
    # its ranks and attributes take (none where the bad row's mistake is a rank)
    good = _good_row_for(spec, bad.shapes, attrs)
    if good is None:
        return
    xs = good.cast(np.float32)
    got = sess.run(None, dict(zip([i.name for i in spec.inputs], xs)))
    ref = spec.reference_onnx(*xs, **attrs)
    for g, r in zip(got, ref if isinstance(ref, tuple) else (ref,)):
        assert_close(op, g, r, what=f"{good.id} after {bad.id}")


def _good_row_for(spec, shapes, attrs):
    for e in spec.examples():
        if e.large or "float32" not in e.dtypes or [len(s) for s in e.shapes] != [len(s) for s in shapes]:
            continue
        try:
            spec.infer_shapes(e.shapes, **spec.from_onnx_attrs(**attrs))
        except specs.OpError:
            continue
        return e
    return None


@pytest.mark.parametrize("op,bad", list(_bad("attr")))
def test_bad_attributes_fail_the_session_with_a_clear_message(library, op, bad):
    attrs, message = bad.onnx
    with pytest.raises(ORT_ERRORS) as e:
        onnx_plugins.session(_dynamic_model(op, [len(s) for s in bad.shapes], attrs), kernels=[op])
    assert message in str(e.value)


def test_missing_required_attribute_fails_the_session(library):
    with pytest.raises(ORT_ERRORS) as e:
        onnx_plugins.session(_dynamic_model("YoloDecode", [4], dict(anchors=[1.0, 2.0], num_classes=1)),
                             kernels=["YoloDecode"])
    assert "YoloDecode: argument 'stride': required attribute is missing" in str(e.value)


def test_unknown_op_in_the_config_entry_fails_registration(library):
    so = ort.SessionOptions()
    so.add_session_config_entry(onnx_plugins.CONFIG_KEY, "FusedLayerNorm,Bogus")
    with pytest.raises(ORT_ERRORS) as e:
        so.register_custom_ops_library(str(library))
    assert "bridge.kernels: unknown op 'Bogus'" in str(e.value)


# name: (op, input ranks, attributes, feeds), and what must come of it: the run's
# output shapes, or the words of the error.
NASTY_CASES = {
    "rank-0 x, empty gamma": (("FusedLayerNorm", [0, 1, 1], {}, "dict(x=np.array(1.0, np.float32), gamma=_ones(0), "
                                                             "beta=_ones(0))"),
                              "FAILED FusedLayerNorm: argument 'x': must have rank >= 1, got a scalar (shape [])"),
    # a filter far larger than the padded input: a clear error, not a read out of bounds
    "huge dilation": (("YoloConvBnLeaky", [4, 4, 1, 1, 1, 1, 1], dict(dilations=[1000000, 1000000]), "CONV_OK"),
                      "FAILED YoloConvBnLeaky: argument 'x': H axis of x [1,5,5,3] with filter [3,3,3,4]: computed "
                      "output size would be negative: input 5 + padding 0+0, effective filter 2000001, stride 1"),
    "Cin 0": (("YoloConvBnLeaky", [4, 4, 1, 1, 1, 1, 1], {}, "dict(CONV_OK, x=_ones(1, 5, 5, 0), "
                                                            "filter=_ones(3, 3, 0, 4))"),
              "RAN [(1, 3, 3, 4)]"),
    "Cout 0": (("YoloConvBnLeaky", [4, 4, 1, 1, 1, 1, 1], {},
                "{k: (v[..., :0] if v.ndim in (1, 4) and k != 'x' else v) for k, v in CONV_OK.items()}"),
               "RAN [(1, 3, 3, 0)]"),
    "huge padding": (("YoloConvBnLeaky", [4, 4, 1, 1, 1, 1, 1], dict(pads=[100, 0, 100, 0]), "CONV_OK"),
                     "RAN [(1, 203, 3, 4)]"),
    "raw with a zero-sized last dim": (("YoloDecode", [4], dict(anchors=[1.0, 2.0], num_classes=1, stride=8),
                                        "dict(raw=_ones(1, 3, 3, 0))"),
                                       "FAILED YoloDecode: argument 'raw': last dim must be A*(5+C) = 1*(5+1) = 6, "
                                       "got [1,3,3,0]"),
}

NASTY = r"""
import sys
import numpy as np
from onnxruntime.capi.onnxruntime_pybind11_state import Fail, InvalidArgument, RuntimeException
from bridge import onnx_plugins
from test_onnx_native import _dynamic_model, CONV_OK, NASTY_CASES, _ones
for name, ((op, ranks, attrs, feeds), _) in NASTY_CASES.items():
    try:
        outs = onnx_plugins.session(_dynamic_model(op, ranks, attrs), kernels=[op]).run(None, eval(feeds))
        print(name, "=> RAN", [o.shape for o in outs], flush=True)
    except (Fail, InvalidArgument) as e:
        print(name, "=> FAILED", str(e).splitlines()[-1].split("Status Message: ")[-1], flush=True)
print("SURVIVED")
"""


def test_nasty_inputs_never_crash_the_process(library):
    """Each nasty input either runs to the expected shapes or fails with the
    expected words, and the process survives them all."""
    import os
    tests = os.path.dirname(__file__)
    p = subprocess.run([sys.executable, "-c", NASTY], capture_output=True, text=True, timeout=300,
                       cwd=tests, env={**os.environ, "PYTHONPATH": tests})
    assert p.returncode == 0 and "SURVIVED" in p.stdout, (p.returncode, p.stdout, p.stderr[-3000:])
    got = dict(line.split(" => ", 1) for line in p.stdout.splitlines() if " => " in line)
    for name, (_, want) in NASTY_CASES.items():
        assert got.get(name, "").startswith(want), f"{name}: got {got.get(name)!r}, want {want!r}"


def test_missing_headers_folder_is_a_build_error(monkeypatch, tmp_path):
    from bridge import native
    monkeypatch.setenv("ORT_INCLUDE_DIR", str(tmp_path))
    monkeypatch.setenv("BRIDGE_CACHE", str(tmp_path / "cache"))
    with pytest.raises(native.BuildError, match="ORT_INCLUDE_DIR=.* has no onnxruntime_c_api.h. Fix"):
        native.ort_build()
    assert native.ort_build(fetch=False) is None


# -- YoloConvBnLeaky with constant parameters: the oneDNN roads ---------------------

def _constant_conv(rng, cin, cout, k, strides, pads, dilations=(1, 1)):
    spec = specs.get("YoloConvBnLeaky")
    w = (rng.standard_normal((k, k, cin, cout)) / np.sqrt(k * k * cin)).astype(np.float32)
    params = [(rng.standard_normal(cout) * 0.3).astype(np.float32) for _ in range(4)]
    params.append(rng.uniform(0.5, 2.0, cout).astype(np.float32))
    attrs = dict(strides=list(strides), pads=list(pads), dilations=list(dilations), epsilon=1e-3, alpha=0.2)
    x0 = np.ones((1, 9, 9, cin), np.float32)
    model = one_op_model("YoloConvBnLeaky", [x0, w, *params], attrs, opset=17, dynamic=(0, 1, 2),
                         constants=[i.name for i in spec.inputs[1:]])
    return model, [w, *params], attrs


def test_conv_road_names_are_the_kernel_cores(library):
    """onnx_plugins.CONV_ROADS is what the kernel core counts (kRoads in its
    kernel.h): a name the core does not know would read 0 forever."""
    import re
    header = (specs.op_folder(specs.get("YoloConvBnLeaky")) / "kernel.h").read_text()
    roads = re.search(r"kRoads\[3\] = \{([^}]*)\}", header).group(1)
    assert tuple(re.findall(r'"([^"]+)"', roads)) == onnx_plugins.CONV_ROADS
    assert set(onnx_plugins.conv_road_calls(library)) == set(onnx_plugins.CONV_ROADS)


# (cin, cout, k, strides, pads, dilations, input shapes run through one session, road where oneDNN is built)
CONSTANT_CONVS = [
    (128, 64, 3, (1, 1), (1, 1, 1, 1), (1, 1), [(1, 11, 13), (2, 10, 10)], "onednn-winograd"),  # odd: partial tiles
    (16, 24, 3, (2, 2), (0, 0, 1, 1), (1, 1), [(1, 9, 8), (1, 2, 3), (0, 9, 8)], "onednn-direct"),  # TF's SAME s2
    (8, 33, 1, (1, 1), (0, 0, 0, 0), (1, 1), [(2, 5, 3)], "onednn-direct"),
    (4, 6, 3, (1, 1), (2, 2, 2, 2), (2, 2), [(1, 7, 9)], "onednn-direct"),
    (128, 64, 3, (1, 1), (1, 1, 1, 1), (1, 1), [(1, 4, 4)], "onednn-direct"),  # too few pixels for Winograd
    # bands of output rows on the session's threads: pads wider than the filter (whole bands of zeros
    # up and down), a last band past the end, one row, and more images than pieces (whole images)
    (5, 7, 3, (1, 1), (3, 1, 4, 1), (1, 1), [(1, 13, 6), (3, 1, 5), (11, 3, 4)], "onednn-direct"),
    (6, 9, 3, (2, 2), (1, 0, 2, 1), (1, 1), [(1, 23, 7), (2, 2, 9)], "onednn-direct"),
]


@pytest.mark.parametrize("case", CONSTANT_CONVS, ids=lambda c: f"{c[0]}->{c[1]}-{c[2]}x{c[2]}-s{c[3][0]}-d{c[5][0]}")
def test_constant_weights_conv_matches_the_reference_on_its_road(library, rng, case):
    """Constant parameters are folded once; with oneDNN in the library float32
    takes its direct convolution or Winograd, else the library's GEMM. One
    session serves several input geometries (one plan each)."""
    cin, cout, k, strides, pads, dil, shapes, road = case
    model, params, attrs = _constant_conv(rng, cin, cout, k, strides, pads, dil)
    sess = onnx_plugins.session(model, kernels=["YoloConvBnLeaky"], threads=2)
    expected = road if onnx_plugins.library_has_onednn(library) else "gemm"
    if expected == "onednn-winograd" and not onednn_has_f32_brgemm():
        expected = "onednn-direct"
    for n, h, w in shapes:
        x = rng.standard_normal((n, h, w, cin)).astype(np.float32)
        before = onnx_plugins.conv_road_calls(library)
        got = sess.run(None, {"x": x})[0]
        after = onnx_plugins.conv_road_calls(library)
        ref = specs.get("YoloConvBnLeaky").reference_onnx(x, *params, **attrs)
        assert_close("YoloConvBnLeaky", got, ref, "float32", what=f"{case} x {x.shape}")
        ran = {r for r in after if after[r] > before[r]}
        assert ran == ({expected} if got.size else set()), f"x {x.shape}"  # an empty output runs nothing


_THREADS = r"""
import os, sys
import numpy as np
from bridge import onnx_plugins
import onnx
model = onnx.load(sys.argv[1])
sess = onnx_plugins.session(model, kernels=["YoloConvBnLeaky"], threads=2)
x = np.random.default_rng(0).standard_normal((1, 40, 40, 32)).astype(np.float32)
before = len(os.listdir("/proc/self/task"))
for _ in range(3):
    sess.run(None, {"x": x})
print(before, len(os.listdir("/proc/self/task")))
"""


@pytest.mark.parametrize("threads", ["host", "openmp"])
def test_onednn_conv_runs_on_the_sessions_threads(library, rng, tmp_path, threads):
    """By default the oneDNN road starts no threads of its own (its pieces run on
    the session's intra-op pool); BRIDGE_DNNL_THREADS=openmp, oneDNN's own team,
    is the check that counting threads would see one."""
    import subprocess
    import sys
    if not onnx_plugins.library_has_onednn(library):
        pytest.skip("the library was built without oneDNN")
    model, _, _ = _constant_conv(rng, 32, 16, 3, (1, 1), (1, 1, 1, 1))
    path = tmp_path / "conv.onnx"
    path.write_bytes(model.SerializeToString())
    env = dict(os.environ, BRIDGE_DNNL_THREADS=threads, OMP_NUM_THREADS="2")
    out = subprocess.run([sys.executable, "-c", _THREADS, str(path)], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    before, after = map(int, out.stdout.split()[-2:])
    assert (after == before) == (threads == "host"), (threads, before, after)


def test_onednn_conv_threads_setting_is_checked(library, monkeypatch, rng):
    if not onnx_plugins.library_has_onednn(library):
        pytest.skip("the library was built without oneDNN")
    monkeypatch.setenv("BRIDGE_DNNL_THREADS", "eigen")
    model, _, _ = _constant_conv(rng, 4, 4, 1, (1, 1), (0, 0, 0, 0))
    with pytest.raises(Exception, match="BRIDGE_DNNL_THREADS must be host or openmp, got 'eigen'"):
        onnx_plugins.session(model, kernels=["YoloConvBnLeaky"]).run(None, {"x": np.ones((1, 2, 2, 4), np.float32)})


def test_constant_weights_conv_gemm_road_on_request(library, rng, monkeypatch):
    """BRIDGE_ORT_CONV=gemm (read when the kernel is created) keeps the library's GEMM."""
    monkeypatch.setenv("BRIDGE_ORT_CONV", "gemm")
    model, params, attrs = _constant_conv(rng, 128, 64, 3, (1, 1), (1, 1, 1, 1))
    x = rng.standard_normal((1, 12, 11, 128)).astype(np.float32)
    before = onnx_plugins.conv_road_calls(library)
    got = onnx_plugins.session(model, kernels=["YoloConvBnLeaky"]).run(None, {"x": x})[0]
    after = onnx_plugins.conv_road_calls(library)
    assert_close("YoloConvBnLeaky", got, specs.get("YoloConvBnLeaky").reference_onnx(x, *params, **attrs))
    assert {r for r in after if after[r] > before[r]} == {"gemm"}
