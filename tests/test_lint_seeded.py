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
from forked_python import run_python

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


# What torch does with them: every correct variant imports cleanly, and the bugs torch catches at
# import raise there (the others fail later: under FakeTensorMode, compile, capture or opcheck).
IMPORT_TIME_BUGS = {"invalid_schema", "register_fake_overload_lost", "tag_contract", "second_def_library",
                    "mutates_args_wrong_name", "register_fake_typo_custom_op", "duplicate_define",
                    "autograd_on_mutable_op", "dispatch_key_case"}
_PROBE = """
import sys
import torch
for path in sys.argv[1:]:
    name = path.rsplit("/", 1)[1][:-3]
    source = open(path).read().replace('"seeded"', repr("s_" + name)).replace("seeded::", "s_" + name + "::")
    source = source.replace("torch.ops.seeded.", "torch.ops.s_" + name + ".")
    try:
        exec(compile(source, path, "exec"), {"__name__": "probe_" + name})
        print(name, "ok")
    except Exception as error:
        print(name, "raised", type(error).__name__)
"""


def test_torch_imports_every_correct_variant_and_refuses_the_import_time_bugs():

    oks = [str(b.with_name(b.stem + "_ok.py")) for b in BUGS]
    bugs = [str(b) for b in BUGS if b.stem in IMPORT_TIME_BUGS]
    done = run_python(["-c", _PROBE, *oks, *bugs], timeout=300)
    outcome = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    assert {Path(p).stem: outcome.get(Path(p).stem) for p in oks} == {Path(p).stem: "ok" for p in oks}, done.stderr
    for path in bugs:
        assert outcome[Path(path).stem].startswith("raised"), (path, outcome[Path(path).stem])
