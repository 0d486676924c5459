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


ENGLISH = """namespace: npu
target: op_plugin
ops:
  - schema: "npu_scale_rows(Tensor x, float alpha=1.0) -> Tensor"
    doc: DOC
    outputs:
      out0: {like: x}
    op_plugin: {exposed: true}
    examples:
      - {x: {shape: [4, 8], dtype: float16}, alpha: 2.0}
"""
WARNING = "docs would be English text under op-plugin's Chinese headings"


def test_english_docs_without_op_plugin_docs_are_a_located_warning(tmp_path):
    """What op-plugin's review asks for (docs in the repo's language): English `doc:` and no `op_plugin.docs` is
    written as asked, with a warning at the `doc:` that names the key to give."""
    root = Path(shutil.copytree(FIXTURE, tmp_path / "op-plugin"))
    spec = tmp_path / "spec.yaml"
    spec.write_text(ENGLISH.replace("DOC", '"x times alpha."'), encoding="utf-8")
    done = opgen("add", "--op-plugin-root", str(root), str(spec))
    assert done.returncode == 0, done.stderr
    assert f"warning: {spec}:5:10: npu_scale_rows's {WARNING}" in done.stderr, done.stderr
    assert "ops[0].op_plugin.docs a `description:` in Chinese" in done.stderr
    new = opgen("new", str(spec), "-o", str(tmp_path / "fragment"))  # the fragment opgen new writes: the same
    assert new.returncode == 0 and f"warning: {spec}:5:10: npu_scale_rows's {WARNING}" in new.stderr, new.stderr


def test_docs_in_the_repos_language_give_no_warning(tmp_path):
    """The twins: `op_plugin.docs` given (the first spec of this file), or a `doc:` already in Chinese."""
    _, done = add(tmp_path, "x")
    assert done.returncode == 0 and WARNING not in done.stderr, done.stderr
    root = Path(shutil.copytree(FIXTURE, tmp_path / "chinese"))
    spec = tmp_path / "chinese.yaml"
    spec.write_text(ENGLISH.replace("DOC", "将x的每个元素乘以alpha。"), encoding="utf-8")
    done = opgen("add", "--op-plugin-root", str(root), str(spec))
    assert done.returncode == 0 and WARNING not in done.stderr, done.stderr
