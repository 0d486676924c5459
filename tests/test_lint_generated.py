"""What `opgen new` generates must lint clean with `opgen lint` (one rule set for both); a spec without
shape semantics leaves a TODO fake skeleton, which OPG306 must report until it is written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


def _opgen(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "opgen", *args], cwd=cwd, capture_output=True, text=True, env=env,
                          timeout=300, check=False)


@pytest.mark.skipif(not EXAMPLES, reason="no example specs in examples/")
@pytest.mark.slow
def test_generated_projects_lint_clean_except_todo_fakes(tmp_path, generated_examples):
    roots = [generated_examples(style)[0].parent for style in ("library", "custom_op")]
    for style in ("library", "custom_op"):
        generated = _opgen("new", "--schema", "myops::scale(Tensor x, float s) -> Tensor", "--style", style,
                           "-o", f"schema_{style}", cwd=tmp_path)
        assert generated.returncode == 0, generated.stderr
    result = _opgen("lint", ".", *map(str, roots), "--output-format", "json", cwd=tmp_path)
    assert result.returncode in (0, 1), result.stderr
    todo = []
    for diagnostic in json.loads(result.stdout):
        assert diagnostic["code"] == "OPG306", diagnostic  # nothing but the TODO skeletons
        path = Path(diagnostic["filename"])
        assert path.parent.name == "fakes", diagnostic
        todo.append(path.parents[2].name)
    assert set(todo) == {"schema_library", "schema_custom_op", "todo_semantics"}, "ops without semantics: TODO fake"
    statistics = _opgen("lint", ".", "--statistics", "--select", "OPG3", cwd=tmp_path)
    assert statistics.stdout.split("\t")[1] == "OPG306"
