"""The end of a run of generated tests, in one screen: which tiers ran (passed, failed), which skipped and why (one
line per reason, with the tiers it hit), and which opt-in tests were left out and how to run them. A new user's
first run ends in what it proved and what it could not, rather than in a count of skips."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass

OUTCOMES = ("passed", "failed", "error", "xfailed", "xpassed")
WIDTH = 120  # one screen: lines are cut, reasons listed once


@dataclass(frozen=True)
class Result:
    tier: str
    outcome: str  # passed, failed, error, skipped, xfailed, xpassed
    reason: str = ""  # a skip's first line


def skip_reason(longrepr) -> str:
    """The reason of a skip report (pytest keeps it as (path, line, "Skipped: why"))."""
    text = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return text.removeprefix("Skipped: ").strip().splitlines()[0] if text.strip() else "skipped"


def summary_lines(results: list[Result], left_out: dict[str, tuple[int, str]]) -> list[str]:
    """`left_out`: opt-in tier -> (tests not collected, why and how to run them)."""
    ran: dict[str, Counter] = defaultdict(Counter)
    skipped: dict[str, Counter] = defaultdict(Counter)
    for result in results:
        if result.outcome == "skipped":
            skipped[result.reason][result.tier] += 1
        else:
            ran[result.tier][result.outcome] += 1
    lines = ["opgen: what ran, what did not and why"]
    for tier, counts in ran.items():
        said = ", ".join(f"{counts[outcome]} {outcome}" for outcome in OUTCOMES if counts[outcome])
        lines.append(_cut(f"  ran      {tier:<13} {said}"))
    for reason, tiers in sorted(skipped.items(), key=lambda item: -sum(item[1].values())):
        where = ", ".join(f"{tier} {count}" for tier, count in tiers.items())
        lines.append(_cut(f"  skipped  {sum(tiers.values()):>3} ({where}): {reason}"))
    for tier, (count, why) in left_out.items():
        lines.append(_cut(f"  not run  {count:>3} ({tier}, opt-in): {why}"))
    return lines


def _cut(line: str) -> str:
    return line if len(line) <= WIDTH else line[:WIDTH - 3] + "..."
