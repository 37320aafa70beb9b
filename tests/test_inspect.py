"""`bridge inspect`: the census of .tflite and .onnx files whose contents the test
itself wrote (TFLite: packed with the flatbuffer schema's object API and a
FlexBuffer; ONNX: onnx.helper), so every count and attribute is known."""
from __future__ import annotations

import json
from collections import Counter

import numpy as np
import onnx
import pytest
from flatbuffers import flexbuffers
from onnx import TensorProto, helper, numpy_helper

from bridge.cli import main
from bridge.onnx_inspect import inspect_onnx
from bridge.tflite_inspect import InspectError, inspect_tflite, schema

CONV_ATTRS = {"T": 0, "alpha": 0.1, "epsilon": 1e-3, "padding": "SAME", "strides": [1, 2, 2, 1],
              "dilations": [1, 1, 1, 1]}


# -- a TFLite file built by hand ---------------------------------------------------------
def _tflite_bytes() -> bytes:
    """ADD x2, GELU x1 (a builtin code > 127: only in builtin_code), and one custom
    YoloConvBnLeaky with FlexBuffer attributes; input [?,8,8,3], two outputs."""
    import flatbuffers
    s = schema()

    def code(builtin=None, custom=None):
        c = s.OperatorCodeT()
        if custom is not None:
            c.builtinCode = c.deprecatedBuiltinCode = s.BuiltinOperator.CUSTOM
            c.customCode = custom
        else:
            c.builtinCode = builtin
            c.deprecatedBuiltinCode = min(builtin, s.BuiltinOperator.PLACEHOLDER_FOR_GREATER_OP_CODES)
        c.version = 1
        return c

    def tensor(name, shape, sig=None, ttype=s.TensorType.FLOAT32, buffer=0):
        t = s.TensorT()
        t.name, t.shape, t.shapeSignature, t.type, t.buffer = name, shape, sig, ttype, buffer
        return t

    def op(index, inputs, outputs, options=None):
        o = s.OperatorT()
        o.opcodeIndex, o.inputs, o.outputs = index, inputs, outputs
        if options is not None:
            o.customOptions = list(options)
            o.customOptionsFormat = s.CustomOptionsFormat.FLEXBUFFERS
        return o

    weights = s.BufferT()
    weights.data = list(np.arange(3 * 3 * 3 * 4, dtype=np.float32).tobytes())  # 432 bytes
    half = s.BufferT()
    half.data = list(np.ones(4, np.float16).tobytes())  # 8 bytes
    sg = s.SubGraphT()
    sg.tensors = [tensor("image", [1, 8, 8, 3], [-1, 8, 8, 3]), tensor("filter", [3, 3, 3, 4], buffer=1),
                  tensor("bias16", [4], ttype=s.TensorType.FLOAT16, buffer=2), tensor("a", [1, 8, 8, 3]),
                  tensor("b", [1, 8, 8, 3]), tensor("conv", [1, 4, 4, 4], [-1, 4, 4, 4]),
                  tensor("gelu", [1, 8, 8, 3], [-1, 8, 8, 3])]
    sg.inputs, sg.outputs = [0], [5, 6]
    sg.operators = [op(0, [0, 0], [3]), op(0, [3, 0], [4]), op(1, [4], [6]),
                    op(2, [4, 1, 2, 2, 2, 2, 2], [5], flexbuffers.Dumps(CONV_ATTRS))]
    model = s.ModelT()
    model.version, model.description = 3, "hand-made"
    model.operatorCodes = [code(s.BuiltinOperator.ADD), code(s.BuiltinOperator.GELU), code(custom="YoloConvBnLeaky")]
    model.subgraphs, model.buffers = [sg], [s.BufferT(), weights, half]
    sig = s.SignatureDefT()
    sig.signatureKey, sig.subgraphIndex = "serving_default", 0
    sig.inputs = [_tmap("image", 0)]
    sig.outputs = [_tmap("conv", 5), _tmap("gelu", 6)]
    model.signatureDefs = [sig]
    b = flatbuffers.Builder(1024)
    b.Finish(model.Pack(b), file_identifier=b"TFL3")
    return bytes(b.Output())


def _tmap(name, index):
    m = schema().TensorMapT()
    m.name, m.tensorIndex = name, index
    return m


@pytest.fixture(scope="module")
def tflite_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("tfl") / "hand.tflite"
    path.write_bytes(_tflite_bytes())
    return path


def test_tflite_census(tflite_file):
    info = inspect_tflite(tflite_file)
    assert info.ops == Counter({"ADD": 2, "GELU": 1, "YoloConvBnLeaky": 1})
    assert info.custom_codes == Counter({"YoloConvBnLeaky": 1}) and info.builtin_ops == Counter({"ADD": 2, "GELU": 1})
    (custom,) = info.custom
    assert custom.index == 3 and custom.subgraph == 0
    assert custom.attrs == CONV_ATTRS  # floats shown as their float32 value: 0.1, not 0.100000001
    assert [(t.name, t.shape, t.dtype) for t in info.inputs] == [("image", (None, 8, 8, 3), "float32")]
    assert [(t.name, t.shape) for t in info.outputs] == [("conv", (None, 4, 4, 4)), ("gelu", (None, 8, 8, 3))]
    assert info.signatures == {"serving_default": {"inputs": ["image"], "outputs": ["conv", "gelu"]}}
    assert info.weights == {"float32": 432, "float16": 8}
    assert info.size == tflite_file.stat().st_size and info.version == 3 and info.tensors == 7


def test_tflite_cli_table_and_json(tflite_file, capsys):
    assert main(["inspect", str(tflite_file)]) == 0
    out = capsys.readouterr().out
    lines = [line.split() for line in out.splitlines()]
    assert ["ADD", "builtin", "2"] in lines and ["YoloConvBnLeaky", "custom", "1"] in lines, out
    assert ["input", "image", "[?,8,8,3]", "float32"] in lines, out
    assert "padding=SAME" in out and "strides=[1, 2, 2, 1]" in out
    assert main(["inspect", str(tflite_file), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["format"] == "tflite" and data["ops"] == {"ADD": 2, "GELU": 1, "YoloConvBnLeaky": 1}
    assert data["custom_ops"][0]["attrs"]["padding"] == "SAME"
    assert data["inputs"][0]["shape"] == [None, 8, 8, 3]


def test_tflite_from_the_converter(tmp_path, capsys):
    """A converter-made file: the census agrees with what the interpreter reports."""
    tf = pytest.importorskip("tensorflow")

    @tf.function(input_signature=[tf.TensorSpec([None, 5], tf.float32, name="x")])
    def f(x):
        a = tf.sigmoid(x)
        return {"out": tf.tanh(tf.exp(tf.sigmoid(a)))}

    data = tf.lite.TFLiteConverter.from_concrete_functions([f.get_concrete_function()], f).convert()
    info = inspect_tflite(data)
    assert info.ops == Counter({"LOGISTIC": 2, "EXP": 1, "TANH": 1}) and not info.custom
    from ai_edge_litert.interpreter import Interpreter
    interp = Interpreter(model_content=data)
    assert [tuple(d["shape_signature"]) for d in interp.get_input_details()] == [(-1, 5)]
    assert [t.shape for t in info.inputs] == [(None, 5)]


@pytest.mark.parametrize("content,message", [
    (b"", "not a TFLite file"),
    (b"\0" * 64, "not a TFLite file"),
    (b"\x10\0\0\0TFL3" + b"\xff" * 8, "not a valid TFLite flatbuffer"),
])
def test_tflite_bad_files(tmp_path, capsys, content, message):
    path = tmp_path / "bad.tflite"
    path.write_bytes(content)
    with pytest.raises(InspectError, match=message):
        inspect_tflite(path)
    assert main(["inspect", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_truncated_tflite(tflite_file, tmp_path, capsys):
    path = tmp_path / "cut.tflite"
    path.write_bytes(tflite_file.read_bytes()[:200])
    assert main(["inspect", str(path)]) == 2
    assert "not a valid TFLite flatbuffer" in capsys.readouterr().err


# -- an ONNX file built by hand ------------------------------------------------------------
def _onnx_model():
    """Relu x2 (one inside an If branch), com.bridge FusedLayerNorm x1 with a
    model-local function, one initializer in external data."""
    then = helper.make_graph([helper.make_node("Relu", ["y"], ["t"], name="relu_then")], "then", [],
                             [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)])
    other = helper.make_graph([helper.make_node("Identity", ["y"], ["e"], name="id_else")], "else", [],
                              [helper.make_tensor_value_info("e", TensorProto.FLOAT, None)])
    nodes = [helper.make_node("FusedLayerNorm", ["x", "gamma", "beta"], ["y"], domain="com.bridge", name="ln",
                              epsilon=1e-6),
             helper.make_node("Relu", ["y"], ["r"], name="relu"),
             helper.make_node("If", ["cond"], ["z"], name="if", then_branch=then, else_branch=other)]
    gamma = numpy_helper.from_array(np.linspace(0.5, 1.5, 2048, dtype=np.float32), "gamma")
    beta = numpy_helper.from_array(np.ones(2048, np.float32), "beta")
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2048]),
                                           helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
                              [helper.make_tensor_value_info("r", TensorProto.FLOAT, ["N", 2048]),
                               helper.make_tensor_value_info("z", TensorProto.FLOAT, None)], [gamma, beta])
    fn = helper.make_function("com.bridge", "FusedLayerNorm", ["x", "gamma", "beta"], ["y"],
                              [helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["y"], axis=-1)],
                              [helper.make_opsetid("", 17)], attributes=["epsilon"])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.bridge", 1)],
                             functions=[fn], producer_name="test")


def test_onnx_census_with_external_data(tmp_path, capsys):
    path = tmp_path / "m.onnx"
    onnx.save_model(_onnx_model(), str(path), save_as_external_data=True, location="m.data", size_threshold=4096)
    info = inspect_onnx(path)
    assert info.ops == Counter({("com.bridge", "FusedLayerNorm"): 1, ("", "Relu"): 2, ("", "If"): 1,
                                ("", "Identity"): 1})
    assert info.custom_ops == Counter({("com.bridge", "FusedLayerNorm"): 1})
    assert [(c.op_type, c.attrs) for c in info.custom] == [("FusedLayerNorm", {"epsilon": 1e-6})]
    assert info.opsets == {"": 17, "com.bridge": 1}
    assert [(f.domain, f.name, f.nodes, f.attributes) for f in info.functions] == \
        [("com.bridge", "FusedLayerNorm", 1, ["epsilon"])]
    assert [(t.name, t.shape, t.dtype) for t in info.inputs] == [("x", (None, 2048), "float"), ("cond", (), "bool")]
    assert info.initializers == 2 and info.initializer_bytes == 2 * 2048 * 4
    assert [(e.location, e.tensors, e.bytes, e.present) for e in info.external] == [("m.data", 2, 16384, True)]

    assert main(["inspect", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["format"] == "onnx" and data["ops"][0] == {"domain": "com.bridge", "op_type": "FusedLayerNorm",
                                                          "count": 1}
    (tmp_path / "m.data").unlink()
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "MISSING" in out and "com.bridge  FusedLayerNorm" in out


@pytest.mark.parametrize("name,content,message", [
    ("bad.onnx", b"\xff\xfe not a protobuf", "not a valid ONNX model"),
    ("model.bin", b"hello", "not a TFLite flatbuffer and not named .onnx"),
])
def test_bad_files(tmp_path, capsys, name, content, message):
    path = tmp_path / name
    path.write_bytes(content)
    assert main(["inspect", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_missing_file(tmp_path, capsys):
    assert main(["inspect", str(tmp_path / "nothing.tflite")]) == 2
    assert "no such file" in capsys.readouterr().err
