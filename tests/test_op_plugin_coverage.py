"""`opgen meta-coverage`: custom ops without a Meta/fake registration, and `--emit` from gen_opapi C++."""

from __future__ import annotations

import ast
import json

import pytest
import torch
from new_helpers import opgen
from op_plugin_helpers import extract_torchnpugen, run_kernels, run_torchnpugen, skip_without_wheel, struct_source

from opgen.schema.parser import parse_schema
from opgen.spec.model import Example, TensorValue

FUNCTIONS = """\
all_version: [v2.1, v2.13, v2.15]
official: []
custom:
  # comment lines and odd styles are fine
  - func: npu_covered(Tensor self) -> Tensor
    op_api: all_version
  - func: npu_same(Tensor self, Tensor other) -> Tensor
    op_api: all_version
    gen_opapi:
      out: {size: self, dtype: self}
      exec: aclnnSame
  - func: npu_matmulish(Tensor x, Tensor w, int k=2) -> (Tensor, Tensor)
    op_api: all_version
    gen_opapi:
      out0: {size: '{x.size(0), w.size(1)}', dtype: at::kFloat}
      out1: {size: '{x.size(0) * k, x.dim()}', dtype: w.scalar_type()}
      exec: aclnnMatmulish
  - func: npu_helper(Tensor x, Tensor gamma) -> Tensor
    op_api: all_version
    gen_opapi:
      out: {size: 'rms_norm_npu_output_size(x, gamma)[0]', dtype: x}
      exec: aclnnHelper
  - func: npu_overload.two(Tensor x) -> Tensor
    op_api: all_version
  - func: npu_kernel(Tensor x) -> Tensor
    op_api: all_version
symint: []
quant: []
autograd: []
"""
META = '''\
import torch
from torch.library import Library, impl

m = Library("npu", "IMPL", "Meta")


@impl(m, "npu_covered")
def npu_covered_meta(self):
    return torch.empty_like(self)


@torch.library.register_fake("npu::npu_overload.two")
def npu_overload_two_fake(x):
    return torch.empty_like(x)
'''


@pytest.fixture
def tree(tmp_path):
    (tmp_path / "op_plugin/config").mkdir(parents=True)
    (tmp_path / "op_plugin/python/meta").mkdir(parents=True)
    (tmp_path / "op_plugin/config/op_plugin_functions.yaml").write_text(FUNCTIONS)
    (tmp_path / "op_plugin/python/meta/_meta_registrations.py").write_text(META)
    return tmp_path


def test_json_lists_covered_missing_and_emittable(tree):
    done = opgen("meta-coverage", str(tree), "--json")
    assert done.returncode == 1, done.stderr
    assert json.loads(done.stdout) == {
        "total": 6, "covered": ["npu_covered", "npu_overload.two"],
        "missing": ["npu_helper", "npu_kernel", "npu_matmulish", "npu_same"],
        "emittable": ["npu_matmulish", "npu_same"]}


def test_table_names_the_reason_an_op_cannot_be_emitted(tree):
    done = opgen("meta-coverage", str(tree / "op_plugin/config/op_plugin_functions.yaml"), "--meta",
                 str(tree / "op_plugin/python/meta/_meta_registrations.py"))
    assert done.returncode == 1
    assert "npu_helper" in done.stdout and "'rms_norm_npu_output_size' is not an input tensor" in done.stdout
    assert "npu_kernel" in done.stdout and "no gen_opapi block" in done.stdout
    assert "4 of 6 custom ops have no Meta/fake registration (2 emittable with --emit)" in done.stdout


def test_exit_zero_when_everything_is_covered(tree):
    meta = tree / "all.py"
    meta.write_text("from torch.library import impl\n" + "".join(
        f'impl(m, "{name}")(f)\n' for name in ("npu_same", "npu_matmulish", "npu_helper", "npu_kernel")))
    done = opgen("meta-coverage", str(tree), "--meta", str(tree / "op_plugin/python/meta/_meta_registrations.py"),
                 "--meta", str(meta), "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["missing"] == []


def test_bad_input_is_a_clear_error(tree):
    (tree / "bad.py").write_text("def broken(:\n")
    done = opgen("meta-coverage", str(tree), "--meta", str(tree / "bad.py"))
    assert done.returncode == 2 and "bad.py:1: not valid Python" in done.stderr and "Traceback" not in done.stderr
    (tree / "x.yaml").write_text("official: []\n")
    done = opgen("meta-coverage", str(tree / "x.yaml"), "--meta", str(tree / "bad.py"))
    assert done.returncode == 2 and "has no `custom:` list" in done.stderr


def _emitted_functions(code: str) -> dict:
    tree = ast.parse(code)
    scope: dict = {"torch": torch}
    functions = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            name = node.decorator_list[0].args[1].value
            node.decorator_list = []
            exec(compile(ast.Module(body=[node], type_ignores=[]), "<emitted>", "exec"), scope)  # noqa: S102
            functions[name] = scope[node.name]
    return functions


EXAMPLES = {"npu_same": {"self": (3, 5), "other": (3, 5)}, "npu_matmulish": {"x": (3, 5), "w": (5, 7)}}
DTYPES = {"npu_same": "float16", "npu_matmulish": "bfloat16"}


@pytest.mark.torch_npu_wheel
def test_emitted_meta_runs_on_cpu_and_matches_torchnpugens_cpp(tree, tmp_path):
    """Every emitted Meta function, run on meta tensors, gives the sizes/dtypes torchnpugen's kernel
    (generated from the same gen_opapi C++ and run with g++) allocates."""
    done = opgen("meta-coverage", str(tree), "--emit")
    assert done.returncode == 1
    functions = _emitted_functions(done.stdout)
    assert sorted(functions) == ["npu_matmulish", "npu_same"]
    assert "# TODO npu_helper:" in done.stdout and "# TODO npu_kernel:" in done.stdout
    skip_without_wheel()  # the C++ side of the comparison needs torchnpugen
    report = run_torchnpugen(extract_torchnpugen(tmp_path / "wheel"), tree / "op_plugin/config/op_plugin_functions.yaml",
                             tmp_path / "tng")
    entries = {line.split("func: ")[1].split("(")[0]: line.split("func: ")[1]
               for line in FUNCTIONS.splitlines() if "func: " in line}
    results = {}
    for name, function in functions.items():
        schema = parse_schema(entries[name])
        dtype = DTYPES[name]
        example = Example({arg: TensorValue(dtype, shape=shape) for arg, shape in EXAMPLES[name].items()})
        args = [torch.empty(EXAMPLES[name][a.name], dtype=getattr(torch, dtype), device="meta")
                for a in schema.arguments if a.name in EXAMPLES[name]]
        result = function(*args)
        outputs = list(result) if isinstance(result, tuple) else [result]
        assert all(out.device.type == "meta" for out in outputs)
        python = [f"[{', '.join(map(str, out.shape))}] {str(out.dtype).removeprefix('torch.')}" for out in outputs]
        cpp = run_kernels(struct_source(report["gen_opapi"][name]), [(name, schema, example)], tmp_path / name)
        assert python == cpp[1:], name
        results[name] = python
    assert results == {"npu_matmulish": ["[3, 7] float32", "[6, 2] bfloat16"],  # k=2 by default
                       "npu_same": ["[3, 5] float16"]}
