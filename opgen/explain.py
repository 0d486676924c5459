"""`opgen explain`: what opgen makes of one schema, as a table or as JSON."""

from __future__ import annotations

import json
import re

from .colour import paint
from .contract import check_schema, has_errors, mutates_args
from .schema import Schema, parse_schema
from .schema.model import format_default
from .schema.types import cpp_type, python_annotation


def describe(schema: Schema, tags: tuple[str, ...] = ()) -> dict:
    """What opgen makes of `schema`, defined with the torch.Tag names `tags` (as a spec's `tags:`)."""
    diagnostics = check_schema(schema, tags=tags)
    return {
        "canonical": str(schema),
        "tags": list(tags),
        "namespace": schema.namespace,
        "name": schema.name,
        "overload": schema.overload,
        "arguments": [
            {
                "name": a.name,
                "type": str(a.type),
                "default": format_default(a.default) if a.has_default else None,
                "kwarg_only": a.kwarg_only,
                "mutated": a.is_write,
                "alias": str(a.alias) if a.alias else None,
                "python": python_annotation(a.type),
                "cpp": cpp_type(a),
            }
            for a in schema.arguments
        ],
        "returns": [
            {"name": r.name, "type": str(r.type), "alias": str(r.alias) if r.alias else None}
            for r in schema.returns
        ],
        "mutates_args": mutates_args(schema),
        "diagnostics": [d.as_dict() for d in diagnostics],
        "has_errors": has_errors(diagnostics),
    }


def describe_line(text: str, tags: tuple[str, ...] = ()) -> dict:
    """One line of `opgen explain --json -`: the description, or the parse error."""
    from .schema import SchemaError

    try:
        return describe(parse_schema(text), tags)
    except SchemaError as error:
        return {"input": text, "error": {"message": error.message, "column": error.column, "hint": error.hint}}


def render_text(info: dict, color: bool = False) -> str:
    """A compact, pipe-friendly report: one block per argument, nothing truncated or wrapped."""

    def styled(text: str, **style) -> str:
        return paint(text, color, **style)

    lines = [styled(info["canonical"], bold=True),
             (f"  namespace: {info['namespace'] or '(none)'}   name: {info['name']}   "
             f"overload: {info['overload'] or '(default)'}"), ""]
    lines.append(styled("arguments:", bold=True) if info["arguments"] else "arguments: (none)")
    for a in info["arguments"]:
        head = f"  {a['name']}: {a['type']}"
        if a["default"] is not None:
            head += f" = {a['default']}"
        flags = [flag for flag, on in (("mutated", a["mutated"]), ("keyword-only", a["kwarg_only"])) if on]
        if flags:
            head += "  " + styled(f"[{', '.join(flags)}]", fg="yellow" if a["mutated"] else None)
        lines.append(head)
        if re.search(r"!(?!\))", a["type"]):
            lines.append("      `!` without a name: torch's shorthand for a written alias set of its own "
                         "(torch prints it as ($0! -> ))")
        lines.append(f"      python: {a['python'] or '(none: custom_op cannot take it)'}")
        lines.append(f"      c++:    {a['cpp'] or '(none)'}")
    returns = [f"{r['type']} {r['name']}" if r["name"] else r["type"] for r in info["returns"]]
    lines.append("returns: " + (", ".join(returns) if returns else "()"))
    mutated = info["mutates_args"]
    if info.get("tags"):
        lines.append("tags: " + ", ".join(f"torch.Tag.{tag}" for tag in info["tags"]))
    lines.append("custom_op mutates_args: " + ("(" + ", ".join(f'"{m}"' for m in mutated)
                                               + ("," if len(mutated) == 1 else "") + ")" if mutated else "()"))
    lines.append("")
    if not info["diagnostics"]:
        lines.append("diagnostics: none")
    else:
        lines.append(styled("diagnostics:", bold=True))
    for d in info["diagnostics"]:
        colour = {"error": "red", "warning": "yellow"}.get(d["severity"], "cyan")
        lines.append(f"  {styled(d['severity'], fg=colour, bold=True)} {d['code']}: {d['message']}")
        if d.get("hint"):
            lines.append(f"      hint: {d['hint']}")
    return "\n".join(lines)


def explain_code(code: str, as_json: bool) -> None:
    """Print a diagnostic code's explanation, bad and good examples (`opgen explain --code`, `lint --explain`)."""
    import click

    from .catalogue import all_rules
    from .errors import OpgenError

    rules = all_rules()
    rule = rules.get(code.upper())
    if rule is None:
        known = ", ".join(sorted(rules))
        raise OpgenError(f"unknown diagnostic code {code!r}", hint=f"known codes: {known}")
    if as_json:
        click.echo(json.dumps({"code": rule.code, "name": rule.name, "severity": rule.severity,
                               "summary": rule.summary, "explanation": rule.explanation,
                               "bad": rule.bad, "good": rule.good, "fixable": rule.fixable}, indent=2))
        return
    click.echo(f"{rule.code} ({rule.name}, {rule.severity}): {rule.summary}\n")
    click.echo(rule.explanation)
    if rule.bad:
        click.echo(f"\nBad:\n    {rule.bad.replace(chr(10), chr(10) + '    ')}")
    if rule.good:
        click.echo(f"\nGood:\n    {rule.good.replace(chr(10), chr(10) + '    ')}")
    if rule.fixable:
        click.echo("\nopgen lint --fix repairs this automatically.")
