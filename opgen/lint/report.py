"""Output formats, following ruff: text, json, github, sarif; plus --statistics."""

from __future__ import annotations

import json
import re
from collections import Counter

from ..contract import RULES, Diagnostic

FORMATS = ("text", "json", "github", "sarif")
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
DOCS_URI = "https://github.com/opgen/opgen/blob/main/docs/lint.md"
_LEVELS = {"error": "error", "warning": "warning", "info": "note"}


def render(diagnostics: list[Diagnostic], fmt: str, *, fixed: int = 0) -> str:
    return {"text": _text, "json": _json, "github": _github, "sarif": _sarif}[fmt](diagnostics, fixed)


def _text(diagnostics, fixed: int) -> str:
    lines = [f"{d.path}:{d.line}:{d.column}: {d.code}{' [*]' if d.fix else ''} {d.message}" for d in diagnostics]
    fixable = sum(1 for d in diagnostics if d.fix)
    count = len(diagnostics)
    if fixed:  # "Found 1 error (1 fixed, 0 remaining)" read as if one were still there
        lines.append(f"Fixed {_problems(fixed)}, {count} remaining.")
    elif diagnostics:
        lines.append(f"Found {_problems(count)}.")
    else:
        lines.append("All checks passed!")
    if fixable:
        lines.append(f"[*] {fixable} fixable with the `--fix` option.")
    return "\n".join(lines)


def _problems(count: int) -> str:
    return f"{count} problem{'s' if count != 1 else ''}"


def as_json_object(d: Diagnostic) -> dict:
    rule = RULES.get(d.code)
    return {
        "code": d.code,
        "name": rule.name if rule else None,
        "severity": d.severity,
        "message": d.message,
        "filename": d.path,
        "location": {"row": d.line, "column": d.column},
        "end_location": {"row": d.line, "column": d.column},
        "fix": {"applicability": "safe", "message": d.fix.message, "edits": [d.fix.as_dict()]} if d.fix else None,
        "noqa_row": d.line,
        "url": f"{DOCS_URI}#{d.code.lower()}",
    }


def _json(diagnostics, fixed: int) -> str:
    return json.dumps([as_json_object(d) for d in diagnostics], indent=2)


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def _github(diagnostics, fixed: int) -> str:
    out = []
    for d in diagnostics:
        level = "error" if d.severity == "error" else "warning" if d.severity == "warning" else "notice"
        out.append(f"::{level} file={_escape_property(d.path)},line={d.line},col={d.column},"
                   f"title={_escape_property(f'opgen ({d.code})')}::{_escape_data(f'{d.code} {d.message}')}")
    return "\n".join(out)


def _sarif(diagnostics, fixed: int) -> str:
    from .. import __version__

    codes = sorted(RULES)
    index = {code: i for i, code in enumerate(codes)}
    rules = []
    for code in codes:
        rule = RULES[code]
        rules.append({
            "id": code,
            "name": rule.name,
            "shortDescription": {"text": rule.summary},
            "fullDescription": {"text": rule.explanation},
            "help": {"text": rule.explanation},
            "helpUri": f"{DOCS_URI}#{code.lower()}",
            "defaultConfiguration": {"level": _LEVELS.get(rule.severity, "warning")},
            "properties": {"fixable": rule.fixable},
        })
    results = []
    for d in diagnostics:
        results.append({
            "ruleId": d.code,
            "ruleIndex": index.get(d.code, 0),
            "level": _LEVELS.get(d.severity, "warning"),
            "message": {"text": d.message},
            "locations": [{"physicalLocation": {
                "artifactLocation": {"uri": d.path.replace("\\", "/")},
                "region": {"startLine": d.line, "startColumn": d.column},
            }}],
        })
    return json.dumps({
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "opgen", "informationUri": DOCS_URI, "version": __version__,
                                "rules": rules}},
            "results": results,
        }],
    }, indent=2)


def statistics(diagnostics: list[Diagnostic]) -> str:
    counts = Counter(d.code for d in diagnostics)
    fixable = {d.code for d in diagnostics if d.fix}
    rows = []
    width = max((len(str(n)) for n in counts.values()), default=1)
    for code, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        rule = RULES.get(code)
        rows.append(f"{count:>{width}}\t{code}\t{'[*] ' if code in fixable else ''}{rule.name if rule else ''}")
    return "\n".join(rows)


_TEXT_LINE = re.compile(r"^(?P<path>.+?):(?P<line>\d+):(?P<column>\d+): (?P<code>OPG\d{3})(?P<fix> \[\*\])? ")


def paint_text(text: str) -> str:
    """The text report styled as ruff styles it (bold path, red code, cyan `[*]`); click.echo drops the
    styling when stdout is not a terminal."""
    from ..colour import paint

    lines = []
    for line in text.splitlines():
        match = _TEXT_LINE.match(line)
        if match:
            fix = paint(" [*]", fg="cyan") if match["fix"] else ""
            line = (f"{paint(match['path'], bold=True)}{paint(':', fg='cyan')}{match['line']}{paint(':', fg='cyan')}"
                    f"{match['column']}{paint(':', fg='cyan')} {paint(match['code'], fg='red', bold=True)}{fix} "
                    f"{line[match.end():]}")
        elif line == "All checks passed!":
            line = paint(line, fg="green", bold=True)
        lines.append(line)
    return "\n".join(lines)
