"""What `opgen add` wrote follows the checkout, not only its record in .git/opgen/: after a revert
(`git checkout -- .`) or a branch switch the same spec ends in the complete update (no second `func:` in the schema
JSON, nothing left at the old signature), and a piece edited by hand that a spec change touches is reported at
every run until the change is merged into it, then no more."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from new_helpers import opgen, snapshot
from test_op_plugin_add import FIXTURE
from test_op_plugin_repo import NEW_OPS, _edit

NEW_ARGUMENT = ('int? group=None) -> Tensor"', 'int? group=None, float beta=0.0) -> Tensor"')
KERNEL = "op_plugin/ops/opapi/RowTopkKernelNpuOpApi.cpp"


def git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True,
                          env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                               "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin", "HOME": str(root)})
    return done.stdout


@pytest.fixture
def checkout(tmp_path) -> tuple[Path, Path]:
    """A git checkout of the fixture with the spec's ops added and committed, and the spec."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    root = Path(shutil.copytree(FIXTURE, tmp_path / "op-plugin"))
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "base")
    spec = tmp_path / "ops.yaml"
    shutil.copy(NEW_OPS, spec)
    assert add(root, spec).returncode == 0
    git(root, "add", "-A")
    git(root, "commit", "-qm", "ops")
    return root, spec


def tree(root: Path) -> dict[str, bytes]:
    """The working tree (git's own files left out)."""
    return {path: data for path, data in snapshot(root).items() if not path.startswith(".git/")}


def add(root: Path, spec: Path):
    done = opgen("add", "--op-plugin-root", str(root), str(spec))
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def test_a_reverted_update_is_made_again_completely(checkout):
    root, spec = checkout
    _edit(spec, *NEW_ARGUMENT)
    add(root, spec)
    updated = tree(root)
    git(root, "checkout", "--", ".")  # the files go back to the old signature; the record in .git/opgen does not
    assert tree(root) != updated
    done = add(root, spec)
    assert tree(root) == updated, done.stdout + done.stderr
    assert add(root, spec).stdout.startswith("nothing to do")


def test_a_branch_with_the_old_signature_gets_the_complete_update(checkout):
    root, spec = checkout
    git(root, "checkout", "-q", "-b", "other")
    _edit(spec, *NEW_ARGUMENT)
    add(root, spec)
    git(root, "add", "-A")
    git(root, "commit", "-qm", "beta")
    updated = tree(root)
    git(root, "checkout", "-q", "main")  # the old signature everywhere
    add(root, spec)
    assert tree(root) == updated
    schema = (root / "test/core_tests/torch_npu_OpApi_schema_all.json").read_text(encoding="utf-8")
    assert schema.count('"func: npu_gated_act(') == 1


def test_a_hand_edit_that_a_spec_change_touches_is_reported_until_merged(checkout):
    root, spec = checkout
    kernel = root / KERNEL
    edited = kernel.read_text(encoding="utf-8").replace("  EXEC_NPU_CMD(", "  // my tuning\n  EXEC_NPU_CMD(")
    kernel.write_text(edited, encoding="utf-8")
    _edit(spec, "none_values: {index_dtype: at::kLong}", "none_values: {index_dtype: at::kLong}\n      aclnn: aclnnTopkV2")
    for _ in range(2):  # every run says it, not only the first
        done = add(root, spec)
        assert f"{KERNEL} was edited since opgen add wrote it and is kept" in done.stderr
        assert "+  EXEC_NPU_CMD(aclnnTopkV2," in done.stderr and "merge it by hand" in done.stdout + done.stderr
        assert kernel.read_text(encoding="utf-8") == edited
    kernel.write_text(edited.replace("EXEC_NPU_CMD(aclnnRowTopk,", "EXEC_NPU_CMD(aclnnTopkV2,"), encoding="utf-8")
    done = add(root, spec)  # merged: quiet, and the hand edit stays
    assert "note:" not in done.stderr and done.stdout.startswith("nothing to do"), done.stdout + done.stderr
    assert "// my tuning" in kernel.read_text(encoding="utf-8")
