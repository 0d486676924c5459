"""The rule tables of docs/lint.md and README.md, generated from the one rule catalogue.

    python -m opgen.lint.docs           # rewrite the tables in place
    python -m opgen.lint.docs --check   # exit 1 when a checked-in table is stale (tests run this)

A table sits between `<!-- rules:begin -->` and `<!-- rules:end -->`; the rest of the file is kept.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from ..catalogue import all_rules
from .rules import LINT_RULES, NOT_INFERRABLE

BEGIN, END = "<!-- rules:begin -->", "<!-- rules:end -->"
# A generation hint, and the rules that only constrain generated code: lint never reports them.
NOT_LINTED = frozenset({NOT_INFERRABLE.code} | {code for code, rule in all_rules().items() if rule.generated_only})


def rule_table(*, lint_only: bool) -> str:
    rows = ["| code | name | severity | what |", "|---|---|---|---|"]
    for code, rule in all_rules().items():
        if lint_only and code in NOT_LINTED:
            continue
        notes = []
        if rule.fixable:
            notes.append("[*]")
        lint_rule = LINT_RULES.get(code)
        if lint_rule is not None and lint_rule.opt_in:
            notes.append("(opt-in)")
        what = rule.summary.replace("|", "\\|") + (" " + " ".join(notes) if notes else "")
        rows.append(f"| {code} | {rule.name} | {rule.severity} | {what} |")
    return "\n".join(rows)


def targets(root: Path) -> dict[Path, str]:
    return {root / "docs" / "lint.md": rule_table(lint_only=True), root / "README.md": rule_table(lint_only=False)}


def render(text: str, table: str) -> str:
    pattern = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), re.DOTALL)
    if not pattern.search(text):
        raise ValueError(f"no {BEGIN} ... {END} block")
    return pattern.sub(lambda _: f"{BEGIN}\n{table}\n{END}", text, count=1)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    root = Path(__file__).resolve().parents[2]
    stale = []
    for path, table in targets(root).items():
        text = path.read_text(encoding="utf-8")
        new = render(text, table)
        if new != text:
            stale.append(path)
            if "--check" not in args:
                path.write_text(new, encoding="utf-8")
    if stale and "--check" in args:
        print("stale rule tables (run `python -m opgen.lint.docs`): " + ", ".join(map(str, stale)), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
