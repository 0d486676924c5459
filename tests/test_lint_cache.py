"""lint's record cache: an unchanged file is not read again, a changed one is, and the cache never changes what
lint reports (through the real command, and in-process where a count of files read is the proof)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from conftest import run_opgen_command

from opgen.lint import engine
from opgen.lint.config import LintConfig
from opgen.lint.engine import lint_paths

CORRECT = '''import torch

@torch.library.custom_op("cache_ns::scale", mutates_args=())
def scale(x: torch.Tensor, s: float) -> torch.Tensor:
    return x * s

@scale.register_fake
def _(x, s):
    return torch.empty_like(x)
'''
PLANTED = CORRECT.replace("return x * s", "x.mul_(s)\n    return x.clone()")  # an undeclared write: OPG301
HELPER = "def helper(x):\n    return x\n"  # no registration: cached as 'nothing here'


def _aged(path: Path, text: str, age: float = 60.0) -> None:
    """Write `text` with an mtime `age` seconds ago (a file written just now is never cached: see cache.py)."""
    path.write_text(text)
    past = time.time() - age
    os.utime(path, (past, past))


@pytest.fixture
def tree(tmp_path, monkeypatch):
    monkeypatch.setenv("OPGEN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("OPGEN_LINT_NO_CACHE", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pkg").mkdir()
    _aged(tmp_path / "pkg" / "ops.py", CORRECT)
    _aged(tmp_path / "pkg" / "helper.py", HELPER)
    return tmp_path


def _lint(monkeypatch, *, cache: bool = True) -> tuple[list[str], list[str]]:
    """(codes found, files read) of one in-process run over pkg/."""
    read: list[str] = []
    real = engine._read_chunk

    def counting(paths):
        read.extend(paths)
        return real(paths)

    monkeypatch.setattr(engine, "_read_chunk", counting)
    result = lint_paths(["pkg"], LintConfig(root="."), cache=cache)
    return sorted(d.code for d in result.diagnostics), sorted(read)


def test_an_unchanged_file_is_not_read_again_and_a_changed_one_is(tree, monkeypatch):
    assert _lint(monkeypatch) == ([], ["pkg/helper.py", "pkg/ops.py"])
    assert _lint(monkeypatch) == ([], [])  # both from the cache, the registering one and the other
    _aged(tree / "pkg" / "ops.py", PLANTED)  # a new size and mtime
    assert _lint(monkeypatch) == (["OPG301"], ["pkg/ops.py"])
    assert _lint(monkeypatch) == (["OPG301"], [])


def test_a_file_written_just_now_is_read_on_every_run(tree, monkeypatch):
    """Within the file system's timestamp granularity a rewrite can keep size and mtime: such a file is not
    trusted to the cache until it is older than a couple of seconds."""
    (tree / "pkg" / "ops.py").write_text(PLANTED)
    assert _lint(monkeypatch) == (["OPG301"], ["pkg/helper.py", "pkg/ops.py"])
    assert _lint(monkeypatch) == (["OPG301"], ["pkg/ops.py"])


def test_without_the_cache_every_file_is_read(tree, monkeypatch):
    _lint(monkeypatch)
    assert _lint(monkeypatch, cache=False)[1] == ["pkg/helper.py", "pkg/ops.py"]
    monkeypatch.setenv("OPGEN_LINT_NO_CACHE", "1")
    assert _lint(monkeypatch)[1] == ["pkg/helper.py", "pkg/ops.py"]


def test_a_damaged_or_unwritable_cache_only_costs_time(tree, monkeypatch):
    _lint(monkeypatch)
    [cache_file] = (tree / "cache" / "lint").iterdir()
    cache_file.write_bytes(b"\x80\x05not a pickle")
    assert _lint(monkeypatch) == ([], ["pkg/helper.py", "pkg/ops.py"])
    monkeypatch.setenv("OPGEN_CACHE_DIR", "~nouser_opgen_lint/x")  # a cache directory that cannot be named
    assert _lint(monkeypatch) == ([], ["pkg/helper.py", "pkg/ops.py"])
    (tree / "blocked").write_text("a file where the cache directory would be")
    monkeypatch.setenv("OPGEN_CACHE_DIR", str(tree / "blocked"))
    assert _lint(monkeypatch) == ([], ["pkg/helper.py", "pkg/ops.py"])


def test_the_command_reports_the_same_from_the_cache_and_writes_nothing_into_the_tree(tmp_path):
    cache = tmp_path / "cache"
    (tmp_path / "pkg").mkdir()
    _aged(tmp_path / "pkg" / "ops.py", PLANTED)
    env = {"OPGEN_CACHE_DIR": str(cache)}
    runs = [run_opgen_command("lint", "--output-format", "json", "pkg", cwd=str(tmp_path), env=env) for _ in range(2)]
    runs.append(run_opgen_command("lint", "--no-cache", "--output-format", "json", "pkg", cwd=str(tmp_path), env=env))
    assert [r.returncode for r in runs] == [1, 1, 1], [r.stderr for r in runs]
    assert [[f["code"] for f in json.loads(r.stdout)] for r in runs] == [["OPG301"]] * 3
    assert runs[0].stdout == runs[1].stdout == runs[2].stdout
    assert len(list((cache / "lint").iterdir())) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "pkg"]
