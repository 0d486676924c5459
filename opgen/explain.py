"""`opgen explain`: what opgen makes of one schema, as a table or as JSON."""

from __future__ import annotations

from .contract import check_schema, has_errors, mutates_args
from .schema import Schema, parse_schema
from .schema.model import format_default
from .schema.types import cpp_type, python_annotation


def describe(schema: Schema) -> dict:
    diagnostics = check_schema(schema)
    return {
        "canonical": str(schema),
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


def describe_line(text: str) -> dict:
    """One line of `opgen explain --json -`: the description, or the parse error."""
    from .schema import SchemaError

    try:
        return describe(parse_schema(text))
    except SchemaError as error:
        return {"input": text, "error": {"message": error.message, "column": error.column, "hint": error.hint}}


def render_text(info: dict, console) -> None:
    from rich.table import Table

    console.print(f"[bold]{info['canonical']}[/bold]", highlight=False, soft_wrap=True)
    console.print(f"namespace: {info['namespace'] or '(none)'}   name: {info['name']}   "
                  f"overload: {info['overload'] or '(default)'}", highlight=False)
    table = Table("argument", "schema type", "Python annotation", "C++ type", "mutated", "default", "kw-only")
    for a in info["arguments"]:
        table.add_row(a["name"], a["type"], a["python"] or "-", a["cpp"] or "-", "yes" if a["mutated"] else "",
                      a["default"] if a["default"] is not None else "", "yes" if a["kwarg_only"] else "")
    console.print(table)
    returns = ", ".join(f"{r['type']}{' ' + r['name'] if r['name'] else ''}" for r in info["returns"]) or "()"
    console.print(f"returns: {returns}", highlight=False)
    mutated = info["mutates_args"]
    console.print(f"custom_op mutates_args: {tuple(mutated)!r}" if mutated else "custom_op mutates_args: ()",
                  highlight=False)
    if not info["diagnostics"]:
        console.print("no diagnostics")
    for d in info["diagnostics"]:
        colour = {"error": "red", "warning": "yellow"}.get(d["severity"], "cyan")
        console.print(f"[{colour}]{d['severity']}[/{colour}] {d['code']}: {d['message']}", highlight=False)
        if d.get("hint"):
            console.print(f"  hint: {d['hint']}", highlight=False)
