"""Shared helpers for the op_plugin target's tests: torchnpugen from the torch-npu wheel, and a g++
harness that runs the output allocation of OpApi kernels on the host (tests/op_plugin/stub)."""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from new_helpers import REPO

WHEEL_ENV = "OPGEN_TORCH_NPU_WHEEL"  # a downloaded torch_npu 2.13.0 wheel (.ci/run downloads one)
WHEEL = Path(os.environ.get(WHEEL_ENV) or "torch_npu-wheel-not-given.whl")
MISSING = None if WHEEL.is_file() else f"no torch-npu wheel at {WHEEL}: set {WHEEL_ENV} to a downloaded one"
# CI sets this: what needs the torch-npu wheel (or npugraph_ex from it) must run, not skip
REQUIRED = bool(os.environ.get("OPGEN_REQUIRE_NPUGRAPH_EX"))


def needs_wheel(test):
    """A test that proves nothing without the wheel: marked `torch_npu_wheel` (.ci/run's npugraph_ex step runs them
    with the wheel), skipped without it."""
    return pytest.mark.torch_npu_wheel(pytest.mark.skipif(bool(MISSING) and not REQUIRED, reason=MISSING or "")(test))


def skip_without_wheel() -> None:
    """Skip (or, when REQUIRED, fail) a test that needs the torch-npu wheel and has none."""
    if MISSING:
        (pytest.fail if REQUIRED else pytest.skip)(MISSING)
PROBE = REPO / "tests" / "op_plugin" / "torchnpugen_probe.py"
STUB = REPO / "tests" / "op_plugin" / "stub"
EXAMPLES = sorted((REPO / "examples" / "op_plugin").glob("*.yaml"))
TORCH_VERSION = importlib.metadata.version("torch").split("+")[0]  # the version filter runs for this torch
CPP_DTYPES = {"float16": "at::kHalf", "bfloat16": "at::kBFloat16", "float32": "at::kFloat", "float64": "at::kDouble",
              "int64": "at::kLong", "int32": "at::kInt", "int16": "at::kShort", "int8": "at::kChar",
              "uint8": "at::kByte", "bool": "at::kBool", "float8_e5m2": "at::kFloat8_e5m2",
              "float8_e4m3fn": "at::kFloat8_e4m3fn"}


def _cpp_tensor(value) -> str:
    shape = list(value.shape) if value.shape is not None else _nested_shape(value.values)
    return f"at::Tensor{{{{{', '.join(map(str, shape))}}}, {CPP_DTYPES[value.dtype]}}}"


def extract_torchnpugen(target: Path) -> Path:
    """The wheel's pure-Python torchnpugen (and nothing else of torch_npu) under `target`."""
    skip_without_wheel()
    with zipfile.ZipFile(WHEEL) as wheel:
        for name in wheel.namelist():
            if name.startswith("torchnpugen/"):
                wheel.extract(name, target)
    return target


def run_torchnpugen(torchnpugen_root: Path, fragment: Path, out_dir: Path) -> dict:
    """torchnpugen on a generated op_plugin_functions.yaml: see tests/op_plugin/torchnpugen_probe.py."""
    out_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(torchnpugen_root)}
    done = subprocess.run([sys.executable, str(PROBE), str(fragment), str(out_dir), TORCH_VERSION], env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        raise AssertionError(f"torchnpugen failed on {fragment}:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout)


def _nested_shape(values) -> list[int]:
    shape = []
    while isinstance(values, tuple):
        shape.append(len(values))
        values = values[0] if values else None
    return shape


def cpp_inputs(schema, example) -> list[str]:
    """C++ declarations `a0`, `a1`, ... of one example's arguments (defaults where the example has none)."""
    return [line for number, arg in enumerate(schema.arguments)
            for line in _cpp_input(f"a{number}", arg, example.values.get(arg.name, arg.default))]


def _cpp_input(name: str, arg, value) -> list[str]:
    from opgen.schema.model import BaseType, ListType, OptionalType, strip_alias
    from opgen.spec.model import TensorValue

    base = strip_alias(arg.type)
    optional = isinstance(base, OptionalType)
    elem = strip_alias(base.elem) if optional else base
    if isinstance(value, TensorValue):
        return ([f"at::Tensor {name}_t = {_cpp_tensor(value)};", f"c10::optional<at::Tensor> {name}({name}_t);"]
                if optional else [f"at::Tensor {name} = {_cpp_tensor(value)};"])
    if isinstance(value, tuple) and value and all(isinstance(v, TensorValue) for v in value):  # Tensor[]
        return [f"std::vector<at::Tensor> v{name}{{{', '.join(_cpp_tensor(v) for v in value)}}};",
                f"at::TensorList {name}(v{name});"]
    if value is None and optional:
        kind = {BaseType("Tensor"): "at::Tensor", BaseType("float"): "double", BaseType("bool"): "bool",
                BaseType("str"): "c10::string_view", BaseType("ScalarType"): "at::ScalarType",
                BaseType("Scalar"): "at::Scalar"}.get(elem, "int64_t")
        if _is_tensor_list(elem):
            kind = "at::TensorList"
        elif isinstance(elem, ListType):
            return [f"at::OptionalIntArrayRef {name};"]
        return [f"c10::optional<{kind}> {name};"]
    scalar = _cpp_scalar(elem, value)
    if scalar is not None:
        kind, text = scalar
        return [f"{'c10::optional<' + kind + '>' if optional else kind} {name} = {text};"]
    if isinstance(elem, ListType) and isinstance(value, tuple):  # int[] / int[]?
        if strip_alias(elem.elem) == BaseType("bool"):
            return [f"std::array<bool, {len(value)}> {name}{{{', '.join('true' if v else 'false' for v in value)}}};"]
        return [f"std::vector<int64_t> v{name}{{{', '.join(map(str, value))}}};", f"at::IntArrayRef {name}(v{name});"]
    raise AssertionError(f"the harness cannot build argument {arg.name!r} of type '{arg.type}'")


def _cpp_scalar(elem, value):
    """(C++ type, literal) of a number, bool, string or dtype argument; None for anything else."""
    from opgen.schema.model import BaseType

    if elem == BaseType("str") and isinstance(value, str):
        return "c10::string_view", json.dumps(value)
    if elem == BaseType("ScalarType") and isinstance(value, str):
        return "at::ScalarType", CPP_DTYPES[value.removeprefix("torch.")]
    if elem == BaseType("ScalarType") and value is not None and hasattr(value, "word"):
        return "at::ScalarType", CPP_DTYPES[{"float": "float32", "long": "int64", "int": "int32"}.get(
            value.word, value.word)]
    if elem == BaseType("bool") and isinstance(value, bool):
        return "bool", "true" if value else "false"
    if elem == BaseType("float") and isinstance(value, (int, float)):
        return "double", repr(float(value))
    if elem in (BaseType("int"), BaseType("SymInt")) and isinstance(value, int):
        return "int64_t", str(int(value))
    if elem == BaseType("Scalar") and isinstance(value, (int, float)):
        return "at::Scalar", f"at::Scalar{{{float(value)!r}}}"
    return None


def _is_tensor_list(t) -> bool:
    from opgen.schema.model import BaseType, ListType, strip_alias

    return strip_alias(t) == ListType(BaseType("Tensor"))


def run_kernels(code: str, calls: list[tuple[str, object, object]], work: Path, exec_lines: bool = False) -> list[str]:
    """Compile `code` (kernels in namespace op_api) with the stub headers and call each (name, schema,
    example); the printed `[sizes] dtype` lines of every output, per call (and, with `exec_lines`, the
    `-- aclnnX: aclTensor* char* ...` line of what each EXEC_NPU_CMD argument became)."""
    body = []
    for index, (name, schema, example) in enumerate(calls):
        body.append("    {")
        body += [f"        {line}" for line in cpp_inputs(schema, example)]
        args = ", ".join(f"a{i}" for i in range(len(schema.arguments)))
        body.append(f'        std::cout << "== {name} {index}\\n";')
        body.append(f"        opgen_print_all(op_api::{name}({args}));")
        body.append("    }")
    source = code + "\n\nint main() {\n" + "\n".join(body) + "\n    return 0;\n}\n"
    work.mkdir(parents=True, exist_ok=True)
    (work / "harness.cpp").write_text(source, encoding="utf-8")
    compiler = shutil.which("g++")
    if compiler is None:
        raise AssertionError("g++ is needed to evaluate the kernels' C++ size expressions")
    subprocess.run([compiler, "-std=c++17", "-I", str(STUB), "-o", str(work / "harness"), str(work / "harness.cpp")],
                   check=True, capture_output=True, text=True, timeout=300)
    done = subprocess.run([str(work / "harness")], check=True, capture_output=True, text=True, timeout=60)
    return [line for line in done.stdout.splitlines() if exec_lines or not line.startswith("-- ")]


def struct_source(generated: str) -> str:
    """torchnpugen's gen_opapi C++ for one op, in a file as StructKernelNpuOpApi.cpp wraps it."""
    return ('#include "op_plugin/OpApiInterface.h"\n#include "op_plugin/utils/op_api_common.h"\n\n'
            "namespace op_api {\nusing npu_preparation = at_npu::native::OpPreparation;\n\n"
            f"{generated}\n}}  // namespace op_api\n")


def meta_outputs(meta_file: Path, name: str, schema, example) -> list[str]:
    """The generated Meta function `name` run on meta tensors of `example`, printed like the harness."""
    import ast

    import torch

    from opgen.spec.model import TensorValue

    tree = ast.parse(meta_file.read_text(encoding="utf-8"))
    scope: dict = {"torch": torch}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and any(
                isinstance(d, ast.Call) and d.args[1].value == name for d in node.decorator_list):
            node.decorator_list = []
            exec(compile(ast.Module(body=[node], type_ignores=[]), str(meta_file), "exec"), scope)  # noqa: S102
            function = scope[node.name]
            break
    else:
        raise AssertionError(f"no Meta function for {name}")
    def meta(value):
        if isinstance(value, TensorValue):
            shape = list(value.shape) if value.shape is not None else _nested_shape(value.values)
            return torch.empty(shape, dtype=getattr(torch, value.dtype), device="meta")
        if isinstance(value, tuple) and value and all(isinstance(v, TensorValue) for v in value):
            return [meta(v) for v in value]
        return value

    args = [meta(example.values.get(a.name, a.default)) for a in schema.arguments if not a.kwarg_only]
    kwargs = {a.name: meta(example.values.get(a.name, a.default)) for a in schema.arguments if a.kwarg_only}
    result = function(*args, **kwargs)
    outputs = [t for t in torch.utils._pytree.tree_leaves(result) if isinstance(t, torch.Tensor)]
    return [f"[{', '.join(str(s) for s in out.shape)}] {str(out.dtype).removeprefix('torch.')}" for out in outputs]
