"""Recall: seeded bugs, one real bug class per file, each with the exact finding it must get, and the
correct variant of each (`*_ok.py`), which must get none.

A bug file marks every line that must be reported with a trailing `# <- OPGxxx` comment; its first line
says what torch does with it. Each file is linted alone, in a directory of its own.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from opgen.lint.config import LintConfig
from opgen.lint.engine import lint_paths

SEEDED = Path(__file__).resolve().parent / "fixtures" / "lint_seeded"
BUGS = sorted(p for p in SEEDED.glob("*.py") if not p.name.endswith("_ok.py"))
EXPECT = re.compile(r"#\s*<-\s*(OPG\d{3})")


def _found(tmp_path: Path, path: Path) -> list[tuple[int, str]]:
    directory = tmp_path / path.stem
    directory.mkdir()
    shutil.copy(path, directory / path.name)
    result = lint_paths([str(directory / path.name)], LintConfig(root=str(directory)))
    assert not result.internal_errors
    return sorted((d.line, d.code) for d in result.diagnostics)


def _expected(path: Path) -> list[tuple[int, str]]:
    lines = path.read_text().splitlines()
    return sorted((number, match.group(1)) for number, line in enumerate(lines, 1) if (match := EXPECT.search(line)))


def test_the_suite_is_big_enough_and_every_bug_has_its_correct_variant():
    assert len(BUGS) >= 25
    for bug in BUGS:
        assert bug.with_name(bug.stem + "_ok.py").is_file(), bug.name
        assert _expected(bug), f"{bug.name} marks no expected finding"
        assert bug.read_text().startswith("# seeded bug: "), bug.name
    assert len({code for bug in BUGS for _, code in _expected(bug)}) >= 20, "distinct rules exercised"


@pytest.mark.parametrize("bug", BUGS, ids=[b.stem for b in BUGS])
def test_seeded_bug_is_caught_exactly(tmp_path, bug):
    assert _found(tmp_path, bug) == _expected(bug)


@pytest.mark.parametrize("bug", BUGS, ids=[b.stem for b in BUGS])
def test_correct_variant_is_not_flagged(tmp_path, bug):
    assert _found(tmp_path, bug.with_name(bug.stem + "_ok.py")) == []
