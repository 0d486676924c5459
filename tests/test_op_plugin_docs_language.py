"""`op_plugin.docs:` gives op-plugin's docs their language and a description per argument and output (a reviewer
found English text under Chinese headings and parameters described by their type only); a key that names nothing
of the op is a located error, and nothing is written."""

from __future__ import annotations

import shutil
from pathlib import Path

from new_helpers import REPO, opgen, snapshot

FIXTURE = REPO / "tests" / "fixtures" / "op_plugin_root"
SPEC = """namespace: npu
target: op_plugin
ops:
  - schema: "npu_scale_rows(Tensor x, float alpha=1.0) -> Tensor"
    doc: "x times alpha."
    outputs:
      out0: {like: x}
    op_plugin:
      exposed: true
      docs:
        description: 将x的每个元素乘以alpha。
        KEY: 输入张量，任意形状。
        alpha: 缩放系数。
        out0: 缩放后的张量。
    examples:
      - {x: {shape: [4, 8], dtype: float16}, alpha: 2.0}
"""


def add(tmp_path: Path, key: str):
    root = Path(shutil.copytree(FIXTURE, tmp_path / "op-plugin"))
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.replace("KEY", key), encoding="utf-8")
    return root, opgen("add", "--op-plugin-root", str(root), str(spec))


def test_the_docs_are_in_the_specs_words_per_argument(tmp_path):
    root, done = add(tmp_path, "x")
    assert done.returncode == 0, done.stdout + done.stderr
    docs = (root / "codegen/templates/_op_plugin_docs.py").read_text(encoding="utf-8")
    assert "功能描述:\n将x的每个元素乘以alpha。\n" in docs and "x times alpha" not in docs
    assert "x (Tensor): 必选参数。输入张量，任意形状。" in docs and "alpha (float): 可选参数，默认值为1.0。缩放系数。" in docs
    assert "out0 (Tensor): shape为" in docs and "缩放后的张量。" in docs
    page = (root / "docs/zh/custom_APIs/torch_npu/torch_npu-npu_scale_rows.md").read_text(encoding="utf-8")
    assert "- API功能：将x的每个元素乘以alpha。" in page and "- **x** (`Tensor`)：必选参数。输入张量，任意形状。" in page


def test_a_key_naming_nothing_of_the_op_is_refused_where_it_stands(tmp_path):
    root, done = add(tmp_path, "y")
    assert done.returncode == 2 and "spec.yaml:12:9" in done.stderr and "'y' is neither" in done.stderr
    assert snapshot(root) == snapshot(FIXTURE)
