"""op_plugin's Meta functions write sizes as the module's neighbours do (issue 38: a reviewer asked for loops where
the Meta had a nested comprehension): `size = list(x.shape)` and an assignment or a `del` for `replace_size` /
`remove_size`, a loop for `reduce`, a size shared by two outputs computed once; and they still give torch's sizes,
on negative dims, a full reduction, `keepdim` either way and a 0-dim input."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest
import torch
from new_helpers import REPO, opgen

FIXTURE = REPO / "tests" / "fixtures" / "op_plugin_root"
META = "op_plugin/python/meta/_meta_registrations.py"
SPEC = """namespace: npu
target: op_plugin
ops:
  - schema: "npu_row_stats(Tensor x, int k, int[] dims, bool keepdim=False) -> (Tensor values, Tensor indices, Tensor total, Tensor rest)"
    doc: "Top-k of each row, the sum over dims, and x without its first dimension."
    outputs:
      values: {shape: "replace_size(x.shape, -1, k)", dtype: x}
      indices: {shape: "replace_size(x.shape, -1, k)", dtype: int64}
      total: {shape: "reduce(x.shape, dims, keepdim)", dtype: x}
      rest: {shape: "remove_size(x.shape, 0)", dtype: x}
    examples:
      - {x: {shape: [4, 16], dtype: float32}, k: 3, dims: [0]}
"""


@pytest.fixture(scope="module")
def meta(tmp_path_factory):
    """The added Meta function (its source, and the function itself)."""
    tmp = tmp_path_factory.mktemp("meta")
    root = Path(shutil.copytree(FIXTURE, tmp / "op-plugin"))
    spec = tmp / "stats.yaml"
    spec.write_text(SPEC, encoding="utf-8")
    done = opgen("add", "--op-plugin-root", str(root), str(spec))
    assert done.returncode == 0, done.stdout + done.stderr
    (node,) = [n for n in ast.parse((root / META).read_text(encoding="utf-8")).body
               if isinstance(n, ast.FunctionDef) and n.name == "npu_row_stats_meta"]
    node.decorator_list = []
    scope: dict = {"torch": torch}
    exec(compile(ast.Module(body=[node], type_ignores=[]), META, "exec"), scope)  # noqa: S102
    return ast.unparse(node), scope["npu_row_stats_meta"]


def test_the_meta_writes_sizes_as_its_neighbours_do(meta):
    source, _ = meta
    assert not any(isinstance(n, ast.ListComp) and any(isinstance(c, ast.ListComp) or len(n.generators) > 1
                                                        for c in ast.walk(n) if c is not n)
                   for n in ast.walk(ast.parse(source))), source  # no nested comprehension
    assert "values_size = list(x.shape)\n    values_size[-1] = k\n" in source
    assert "indices = torch.empty(values_size, dtype=torch.int64" in source  # the shared size, computed once
    assert "rest_size = list(x.shape)\n    del rest_size[0]\n" in source
    assert "for i, s in enumerate(x.shape):" in source


@pytest.mark.parametrize(("shape", "dims", "keepdim"), [
    ((4, 16), [0], False), ((2, 5, 8), [1, -1], True), ((2, 5, 8), [], False), ((2, 5, 8), [], True),
    ((3,), [-1], False),
])
def test_the_meta_gives_torchs_sizes(meta, shape, dims, keepdim):
    _, function = meta
    x = torch.randn(shape)
    values, indices, total, rest = function(x.to("meta"), 2, dims, keepdim)
    assert list(values.shape) == list(x.topk(2, dim=-1).values.shape)
    assert indices.shape == values.shape and indices.dtype == torch.int64
    assert list(total.shape) == list(x.sum(dims, keepdim=keepdim).shape)
    assert list(rest.shape) == list(x[0].shape)


def test_a_zero_dim_reduction_keeps_no_size(meta):
    """The reduction alone on a 0-dim input (torch sums a 0-dim tensor over dim 0 or -1): no `d % 0`."""
    scope: dict = {}
    source = meta[0].split("    total_size = []\n", 1)[1].split("    total = ", 1)[0]
    exec("def sizes(x, dims, keepdim):\n    total_size = []\n" + source + "    return total_size\n", scope)  # noqa: S102
    for dims in ([0], [-1], []):
        for keepdim in (False, True):
            assert scope["sizes"](torch.tensor(1.0), dims, keepdim) == list(torch.tensor(1.0).sum(dims, keepdim).shape)
