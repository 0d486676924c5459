"""The real pre-commit hook: `pre-commit try-repo` installs opgen from this repository into its own
virtualenv (no torch) and runs the `opgen-lint` hook of .pre-commit-hooks.yaml on staged files."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def test_hook_manifest_follows_the_pre_commit_schema():
    [hook] = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    assert hook["id"] == "opgen-lint"
    assert hook["language"] == "python"
    assert hook["require_serial"] is True
    assert "python" in hook["types_or"] and "yaml" in hook["types_or"]
    assert hook["entry"] == "opgen lint"
    for key in ("name", "entry", "language"):
        assert isinstance(hook[key], str) and hook[key]


@pytest.mark.skipif(shutil.which("git") is None, reason="pre-commit needs git")
@pytest.mark.slow
def test_pre_commit_try_repo_fails_on_bad_and_passes_on_good(tmp_path):
    if subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--git-dir"], capture_output=True,
                      check=False).returncode != 0:
        pytest.skip("the opgen checkout is not a git repository (try-repo needs one)")
    repo = tmp_path / "user-repo"
    repo.mkdir()
    env = dict(os.environ, PRE_COMMIT_HOME=str(tmp_path / "pre-commit-home"), GIT_AUTHOR_NAME="t",
               GIT_AUTHOR_EMAIL="t@example.com", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.com")
    env.pop("PYTHONPATH", None)

    def git(*args):
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, env=env)

    git("init", "-q")
    (repo / "bad.py").write_text('from torch.library import Library\n\nlib = Library("user", "IMPL", "npu")\n')
    (repo / "good.py").write_text('from torch.library import Library\n\nlib = Library("user", "IMPL", "PrivateUse1")\n')
    git("add", "bad.py", "good.py")
    pre_commit = [sys.executable, "-m", "pre_commit", "try-repo", str(ROOT), "opgen-lint"]

    failing = subprocess.run([*pre_commit, "--files", "bad.py", "good.py"], cwd=repo, capture_output=True,
                             text=True, env=env, timeout=900, check=False)
    output = failing.stdout + failing.stderr
    assert failing.returncode == 1, output
    assert "opgen lint" in output and "Failed" in output
    assert "bad.py:3:31: OPG204 [*] dispatch key 'npu' does not exist; write 'PrivateUse1'" in output
    assert "good.py" not in output.split("Failed", 1)[1]

    passing = subprocess.run([*pre_commit, "--files", "good.py"], cwd=repo, capture_output=True, text=True,
                             env=env, timeout=900, check=False)
    assert passing.returncode == 0, passing.stdout + passing.stderr
    assert "Passed" in passing.stdout
