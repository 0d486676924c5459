"""`opgen add` writes the parameter checks an op's output rules imply (op-plugin's PR checklist asks for them):
`TORCH_CHECK(..., "..." + OPS_ERROR(ErrCode::PARAM))` in the OpApi kernel and `torch._check` in the Meta, for a
rank the rules index into (`x.shape[1]`), a dim argument (`x.size(dim)`) and a divisor argument (`n // parts`).
The Meta passes the spec's examples (the twin) and refuses a 1-d x and a zero divisor (the planted inputs)."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest
import torch
from new_helpers import REPO, opgen

FIXTURE = REPO / "tests" / "fixtures" / "op_plugin_root"
SPEC = REPO / "tests" / "op_plugin" / "return_kinds.yaml"
META = "op_plugin/python/meta/_meta_registrations.py"
OPS_ERROR = '" + OPS_ERROR(ErrCode::PARAM));'


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = Path(shutil.copytree(FIXTURE, tmp_path_factory.mktemp("checks") / "op-plugin"))
    done = opgen("add", "--op-plugin-root", str(root), str(SPEC))
    assert done.returncode == 0, done.stdout + done.stderr
    return root


def meta(root: Path, name: str):
    tree = ast.parse((root / META).read_text(encoding="utf-8"))
    (node,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == f"{name}_meta"]
    node.decorator_list = []
    scope: dict = {"torch": torch}
    exec(compile(ast.Module(body=[node], type_ignores=[]), META, "exec"), scope)  # noqa: S102
    return scope[node.name]


def test_the_kernel_checks_the_rank_and_the_divisor_its_sizes_need(root):
    kernel = (root / "op_plugin/ops/opapi/SplitRowsKernelNpuOpApi.cpp").read_text(encoding="utf-8")
    body = kernel[kernel.index("npu_split_rows("):]
    assert 'TORCH_CHECK(x.dim() >= 2, "npu_split_rows: x must have at least 2 dimensions' + OPS_ERROR in body
    assert "parts != 0" in body and body.index("parts != 0") < body.index("apply_tensor_without_format")
    assert all(len(line) <= 120 for line in kernel.splitlines())


def test_the_meta_checks_what_the_kernel_checks(root):
    split = meta(root, "npu_split_rows")
    x = torch.empty(4, 8, device="meta")
    assert [tuple(t.shape) for t in split(x, 2)] == [(2, 8), (2, 8)]  # the example passes
    with pytest.raises(RuntimeError, match="npu_split_rows: parts must not be 0"):
        split(x, 0)
    with pytest.raises(RuntimeError, match="npu_split_rows: x must have at least 2 dimensions"):
        split(torch.empty(8, device="meta"), 2)


def test_a_dim_argument_is_checked_to_be_in_range(tmp_path):
    from opgen.op_plugin.param_checks import param_checks
    from opgen.spec.load import load_spec_text

    spec = load_spec_text("""
namespace: npu
target: op_plugin
ops:
  - schema: "npu_pick(Tensor x, int dim) -> Tensor"
    outputs:
      out0: {shape: "[x.size(dim)]", dtype: x}
""", "spec.yaml")
    (check,) = param_checks(spec.ops[0].outputs)
    assert check.cpp == "dim >= -x.dim() && dim < x.dim()" and check.py == "-x.dim() <= dim < x.dim()"
    assert check.meta_check("npu_pick").startswith('torch._check(-x.dim() <= dim < x.dim(), lambda: "npu_pick: ')


def test_an_edited_size_uses_the_repos_helper_once_and_agrees_with_the_meta(tmp_path):
    """`replace_size(x.shape, -1, k)` for two outputs: one `op_infer::array_to_small_vector` (no lambda, no second
    copy), its sizes equal to the Meta's on the spec's examples (the stub kernel run with g++)."""
    from op_plugin_helpers import meta_outputs, run_kernels

    from opgen.op_plugin.model import plugin_ops
    from opgen.spec.load import load_spec

    root = Path(shutil.copytree(FIXTURE, tmp_path / "op-plugin"))
    new_ops = REPO / "tests" / "op_plugin" / "new_ops.yaml"
    assert opgen("add", "--op-plugin-root", str(root), str(new_ops)).returncode == 0
    code = (root / "op_plugin/ops/opapi/RowTopkKernelNpuOpApi.cpp").read_text(encoding="utf-8")
    assert code.count("op_infer::array_to_small_vector(x.sizes())") == 1 and "[&]" not in code
    assert "  values_size[x.dim() - 1] = k;\n" in code
    (entry,) = [e for e in plugin_ops(load_spec(str(new_ops))) if e.name == "npu_row_topk"]
    example = entry.source.examples[0]  # (the helper builds no dtype argument, which the second example has)
    got = [line for line in run_kernels(code, [(entry.name, entry.schema, example)], tmp_path / "cc")
           if not line.startswith("==")]
    want = meta_outputs(root / META, entry.name, entry.schema, example)
    assert got == want and want[0] == "[4, 3] float32"
