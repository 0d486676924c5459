"""Every lint rule's own VALID and INVALID examples (Fixit style): the docs are the tests."""

from __future__ import annotations

import pytest

from opgen.catalogue import all_rules
from opgen.contract import RULES
from opgen.lint.config import LintConfig
from opgen.lint.engine import lint_paths
from opgen.lint.fix import apply_edits
from opgen.lint.rules import LINT_RULES

VALID = [(code, i, source) for code, lr in LINT_RULES.items() for i, source in enumerate(lr.valid)]
INVALID = [(code, i, case) for code, lr in LINT_RULES.items() for i, case in enumerate(lr.invalid)]
FIXED = [(code, i, case) for code, i, case in INVALID if case.fixed is not None]


def _lint(tmp_path, code: str, source: str):
    name = "op_plugin_functions.yaml" if code.startswith("OPG4") else "example.py"
    path = tmp_path / name
    path.write_text(source)
    lint_rule = LINT_RULES.get(code)
    select = ("OPG", code) if lint_rule is not None and lint_rule.opt_in else ()
    return path, lint_paths([str(path)], LintConfig(root=str(tmp_path)), select=select).diagnostics


def test_every_lint_rule_has_examples_and_is_in_the_one_catalogue():
    assert len(LINT_RULES) >= 17
    for code, lint_rule in LINT_RULES.items():
        assert lint_rule.valid and lint_rule.invalid, code
        assert RULES[code] is lint_rule.rule
        assert code in all_rules()
        assert code[:4] in ("OPG2", "OPG3", "OPG4")
        assert lint_rule.rule.fixable == any(case.fixed for case in lint_rule.invalid), code


@pytest.mark.parametrize(("code", "index", "source"), VALID, ids=[f"{c}-valid-{i}" for c, i, _ in VALID])
def test_valid_example_has_no_finding_at_all(tmp_path, code, index, source):
    _, diagnostics = _lint(tmp_path, code, source)
    assert diagnostics == [], [f"{d.line}:{d.column} {d.code} {d.message}" for d in diagnostics]


@pytest.mark.parametrize(("code", "index", "case"), INVALID, ids=[f"{c}-invalid-{i}" for c, i, _ in INVALID])
def test_invalid_example_fires_at_its_line(tmp_path, code, index, case):
    _, diagnostics = _lint(tmp_path, code, case.source)
    hits = [d for d in diagnostics if d.code == code]
    assert [d.line for d in hits] == [case.line], [f"{d.line}:{d.column} {d.code} {d.message}" for d in diagnostics]
    message = hits[0].message
    assert ";" in message or "write" in message or "use" in message, "the message must say how to fix it"


@pytest.mark.parametrize(("code", "index", "case"), FIXED, ids=[f"{c}-fix-{i}" for c, i, _ in FIXED])
def test_fix_produces_the_documented_code_and_is_clean(tmp_path, code, index, case):
    path, diagnostics = _lint(tmp_path, code, case.source)
    edits = [d.fix for d in diagnostics if d.code == code and d.fix is not None]
    assert edits, "the rule is fixable, so the diagnostic carries a fix"
    assert apply_edits(edits) == len(edits)
    assert path.read_text() == case.fixed
    after = lint_paths([str(path)], LintConfig(root=str(tmp_path))).diagnostics
    assert code not in {d.code for d in after}


def test_rule_tables_in_docs_and_readme_are_generated_from_the_registry():
    """docs/lint.md and README.md carry the table `python -m opgen.lint.docs` writes, row for row."""
    import subprocess
    import sys
    from pathlib import Path

    from opgen.lint.docs import NOT_LINTED, render, rule_table, targets

    root = Path(__file__).resolve().parents[1]
    for path, table in targets(root).items():
        text = path.read_text()
        assert render(text, table) == text, f"{path} is stale: run python -m opgen.lint.docs"
    lint_table = rule_table(lint_only=True)
    assert NOT_LINTED >= {"OPG101", "OPG107", "OPG111"}  # a note, a generation hint, a generated-code rule
    for code, rule in all_rules().items():
        assert (f"| {code} | {rule.name} | {rule.severity} | " in lint_table) == (code not in NOT_LINTED), code
    assert "(opt-in)" in lint_table.split("| OPG207 |")[1].splitlines()[0]
    check = [sys.executable, "-m", "opgen.lint.docs", "--check"]
    assert subprocess.run(check, cwd=root, capture_output=True, check=False).returncode == 0
    docs = (root / "docs" / "lint.md").read_text()
    stale = render(docs, lint_table.replace("| OPG305 |", "| OPG395 |"))  # a planted stale table
    assert render(stale, lint_table) != stale and render(stale, lint_table) == docs


def test_an_opt_in_rule_needs_its_own_code(tmp_path):
    """OPG207 (legal, only a cost) is off under the default selection and a prefix, on by its code."""
    source = LINT_RULES["OPG207"].invalid[0].source
    path = tmp_path / "example.py"
    path.write_text(source)
    config = LintConfig(root=str(tmp_path))
    assert "OPG207" not in {d.code for d in lint_paths([str(path)], config).diagnostics}
    assert "OPG207" not in {d.code for d in lint_paths([str(path)], config, select=("OPG2",)).diagnostics}
    assert "OPG207" in {d.code for d in lint_paths([str(path)], config, select=("OPG207",)).diagnostics}
    assert "OPG207" not in {d.code for d in lint_paths([str(path)], config, select=("OPG207",),
                                                       ignore=("OPG2",)).diagnostics}


FAMILIES = {"OPG2": "opgen.lint.rules.registration", "OPG3": "opgen.lint.rules.bodies",
            "OPG4": "opgen.lint.rules.yaml"}


def test_each_rule_is_decided_in_the_module_that_documents_it():
    # one place per rule: the check (and the fix it attaches) sits in the module of the rule's family
    for code, lint_rule in LINT_RULES.items():
        assert lint_rule.check is not None, f"{code} has no check"
        assert lint_rule.check.__module__ == FAMILIES[code[:4]], (code, lint_rule.check.__module__)
