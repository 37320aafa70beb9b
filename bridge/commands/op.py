"""`bridge op new NAME`: the files of a team's own op, ready to fill in.

Writes into a new folder: `<name>.py` (the spec: tensors, dtypes, tolerances,
shape function, numpy reference and ONNX decomposition to fill in),
`<name>.cc` (a TensorFlow kernel whose REGISTER_OP is generated from that spec),
`CMakeLists.txt` (builds it against the installed TensorFlow, as
examples/custom_op's does), `ort/` (an onnxruntime kernel library whose
domain, tensors, element types and attributes come from the spec, and its CMake
build: _op_ort) and `litert/<name>.cc` (a float32 LiteRT kernel against bridge's
Node API, its op and attributes from the spec: _op_litert). Then: `bridge ops
--op-spec DIR/<name>.py --op-library DIR --ort-library DIR/ort --litert-library
DIR/litert`.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import List

NAME = "op"
HELP = ("scaffold a team's own op: its spec, TensorFlow, onnxruntime and LiteRT kernels generated from it, "
        "and their builds")
DESCRIPTION = __doc__.split("\n\n")[0]
USES_TENSORFLOW = False

_TF_TYPE = {"float32": "float", "float16": "half", "bfloat16": "bfloat16", "float64": "double"}
_TF_ATTR = {"float": "float", "int": "int", "string": "string", "list(int)": "list(int)", "list(float)": "list(float)"}


def add_arguments(p):
    sub = p.add_subparsers(dest="action", metavar="ACTION")
    sub.required = True
    new = sub.add_parser("new", help="write the spec, the TensorFlow, onnxruntime and LiteRT kernels and their "
                                     "CMake files of a new op into a folder")
    new.add_argument("name", help="the op type, CamelCase (e.g. FusedBiasRelu)")
    new.add_argument("--domain", default="com.example", help="its ONNX domain (default com.example)")
    new.add_argument("-o", "--output", help="the folder to create (default: the op's snake_case name)")


def snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


def register_op_cc(spec) -> str:
    """The REGISTER_OP of `spec`, as TensorFlow's C++ spells it."""
    lines = [f'REGISTER_OP("{spec.name}")']
    lines += [f'    .Input("{a.name}: T")' for a in spec.inputs]
    lines += [f'    .Output("{a.name}: T")' for a in spec.outputs]
    for a in spec.attrs:
        default = "" if a.required else f" = {_cc_default(a)}"
        lines.append(f'    .Attr("{a.name}: {_TF_ATTR[a.type]}{default}")')
    lines.append(f'    .Attr("T: {{{", ".join(_TF_TYPE[d] for d in spec.dtypes)}}}")')
    return "\n".join(lines)


def _cc_default(a) -> str:
    if a.is_list:
        return "[" + ", ".join(repr(v) for v in a.default) + "]"
    if a.type == "string":
        return a.default
    return repr(a.default)


SPEC_TEMPLATE = '''"""{name}: what it computes, in one line.

The whole op for bridge: give it with `--op-spec {module}.py` (and its kernel
library with `--op-library .`). Imports nothing heavier than numpy.
"""
from __future__ import annotations

import numpy as np

from bridge.ops import Arg, Attr, OpSpec, Tolerance, shape_rules

NAME = "{name}"


def _reference(x, bias, *, alpha):
    """The numpy float64 reference: the judge every backend is tested against."""
    return np.maximum(x + bias, 0.0) * alpha  # replace with your op's math


def _body(b, x, bias, *, outputs):
    """The one decomposition into standard ONNX ops (the Body protocol, bridge/ops/body.py)."""
    (y,) = outputs
    b.op("Mul", b.op("Relu", b.op("Add", x, bias)), b.like(b.attr_const("alpha"), x), out=y)


SPEC = OpSpec(
    name=NAME,
    module="{module}",
    doc="what it computes",
    inputs=(Arg("x", "[..., C]"), Arg("bias", "[C]")),
    outputs=(Arg("y", "same shape as x"),),
    attrs=(Attr("alpha", "float", 1.0, doc="scales the output"),),
    onnx_attrs=(Attr("alpha", "float", 1.0),),
    dtypes=("float32", "float16"),
    tolerance={{"float32": Tolerance(1e-5), "float16": Tolerance(2e-3)}},
    _reference=_reference,
    # The shapes as data (bridge.ops.shape_rules): x of rank >= 1, bias [C] with C the
    # last dim of x, y shaped as x; every backend's check is made from it.
    shape_rule=shape_rules.last_axis_bias(("x", "bias")),
    _to_onnx=lambda _shapes=None, **attrs: dict(attrs),
    _from_onnx=lambda **attrs: dict(attrs),
    domain="{domain}",
    body=_body,
)
'''

KERNEL_TEMPLATE = '''// {name} for TensorFlow. The REGISTER_OP below was generated from {module}.py by
// `bridge op new`; `bridge ops --op-spec {module}.py --op-library .` checks they agree.
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

{register}
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {{
      c->set_output(0, c->input(0));  // y has x's shape: write your op's shape function
      return absl::OkStatus();
    }});

namespace {{

template <typename T>
class {name}Op : public tensorflow::OpKernel {{
 public:
  explicit {name}Op(tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {{
    OP_REQUIRES_OK(ctx, ctx->GetAttr("alpha", &alpha_));
  }}

  void Compute(tensorflow::OpKernelContext* ctx) override {{
    const tensorflow::Tensor& x = ctx->input(0);
    const tensorflow::Tensor& bias = ctx->input(1);
    OP_REQUIRES(ctx, x.dims() >= 1 && bias.dims() == 1 && bias.dim_size(0) == x.dim_size(x.dims() - 1),
                absl::InvalidArgumentError(absl::StrCat("{name}: argument 'bias': must have shape [C] (the last "
                                                        "dim of x ", x.shape().DebugString(), "), got ",
                                                        bias.shape().DebugString())));
    tensorflow::Tensor* y = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &y));
    const int64_t c = bias.NumElements();
    auto xs = x.flat<T>();
    auto bs = bias.flat<T>();
    auto ys = y->flat<T>();
    for (int64_t i = 0; i < xs.size(); ++i) {{  // replace with your op's math
      const float z = static_cast<float>(xs(i)) + static_cast<float>(bs(i % c));
      ys(i) = static_cast<T>((z > 0.f ? z : 0.f) * alpha_);
    }}
  }}

 private:
  float alpha_;
}};

}}  // namespace

REGISTER_KERNEL_BUILDER(Name("{name}").Device(tensorflow::DEVICE_CPU).TypeConstraint<float>("T"), {name}Op<float>);
REGISTER_KERNEL_BUILDER(Name("{name}").Device(tensorflow::DEVICE_CPU).TypeConstraint<Eigen::half>("T"),
                        {name}Op<Eigen::half>);
'''

CMAKE_TEMPLATE = '''# {name}'s TensorFlow op library, against the TensorFlow of the Python that runs
# CMake: cmake -S . -B build && cmake --build build (or: bridge build .)
cmake_minimum_required(VERSION 3.18)
project({module} LANGUAGES CXX)
find_package(Python3 REQUIRED COMPONENTS Interpreter)
foreach(what compile link)
  string(TOUPPER ${{what}} WHAT)
  if(NOT TF_${{WHAT}}_FLAGS)
    execute_process(
      COMMAND ${{Python3_EXECUTABLE}} -c "import tensorflow as tf; print(';'.join(tf.sysconfig.get_${{what}}_flags()))"
      OUTPUT_VARIABLE TF_${{WHAT}}_FLAGS OUTPUT_STRIP_TRAILING_WHITESPACE COMMAND_ERROR_IS_FATAL ANY)
  endif()
endforeach()
add_library({module} SHARED {module}.cc)
target_compile_options({module} PRIVATE ${{TF_COMPILE_FLAGS}} -O3 -Wno-deprecated-declarations)
target_link_libraries({module} PRIVATE ${{TF_LINK_FLAGS}})
'''


def new_op(name: str, domain: str = "com.example", output=None) -> List[str]:
    """What `bridge op new NAME --domain DOMAIN -o OUTPUT` writes: a team's op's
    spec, TensorFlow kernel, CMake file, onnxruntime kernel (ort/) and float32
    LiteRT kernel (litert/), generated from the one spec, into a new folder
    (default: the op's snake_case name). Returns the paths written. Raises
    OptionError for a bad name, domain or a folder that is not empty."""
    import importlib.util
    from bridge import atomic
    from bridge.commands import _op_litert, _op_ort
    from bridge.exporting import OptionError
    from bridge.ops import registry
    if not re.fullmatch(r"[A-Z][A-Za-z0-9]*", name):
        raise OptionError(f"op name {name!r}: use CamelCase letters and digits (TensorFlow's REGISTER_OP rule)")
    if not re.fullmatch(r"[A-Za-z0-9_.\-]+", domain):
        raise OptionError(f"--domain {domain!r} is not an ONNX domain name")
    module = snake(name)
    folder = Path(output or module)
    if folder.exists() and any(folder.iterdir()):
        raise OptionError(f"{folder} exists and is not empty: give a new folder with -o")
    spec_text = SPEC_TEMPLATE.format(name=name, module=module, domain=domain)
    # The kernel's registration comes from the spec just written, so the two agree.
    loader = importlib.util.spec_from_loader(f"bridge_scaffold_{module}", loader=None)
    scratch = importlib.util.module_from_spec(loader)
    exec(compile(spec_text, f"{module}.py", "exec"), scratch.__dict__)
    spec = registry.check(scratch.SPEC, f"{module}.py")
    folder.mkdir(parents=True, exist_ok=True)
    files = {f"{module}.py": spec_text,
             f"{module}.cc": KERNEL_TEMPLATE.format(name=name, module=module, register=register_op_cc(spec)),
             "CMakeLists.txt": CMAKE_TEMPLATE.format(name=name, module=module),
             f"ort/{module}_ort.cc": _op_ort.kernel_cc(spec),
             "ort/CMakeLists.txt": _op_ort.cmake(spec),
             f"litert/{module}.cc": _op_litert.kernel_cc(spec)}
    for fname, text in files.items():
        atomic.write_text(folder / fname, text)
    return [str(folder / fname) for fname in files]


def run(args) -> int:
    """argparse over new_op (bridge.new_op)."""
    from bridge.cli import UsageError
    from bridge.exporting import OptionError
    try:
        written = new_op(args.name, args.domain, args.output)
    except OptionError as e:
        raise UsageError(str(e)) from None
    folder = Path(args.output or snake(args.name))
    module = snake(args.name)
    print(f"wrote {folder}/: {', '.join(str(Path(w).relative_to(folder)) for w in written)}", file=sys.stdout)
    print(f"next: bridge ops --op-spec {folder / (module + '.py')} --op-library {folder} "
          f"--ort-library {folder / 'ort'} --litert-library {folder / 'litert'}")
    return 0
