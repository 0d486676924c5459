"""The `opgen` command line: new, add, lint, check, explain, meta-coverage and npugraph-ex (each subcommand's
module is imported only when it runs)."""

from __future__ import annotations

import importlib
import json
import sys
from typing import ClassVar

import click

from .console import handle_errors
from .errors import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE


class LazyGroup(click.Group):
    """Imports a subcommand's module only when that subcommand runs (keeps `opgen lint` start-up small)."""

    lazy_commands: ClassVar[dict[str, str]] = {
        "add": "opgen.op_plugin.add:add",
        "check": "opgen.check.command:check",
        "import": "opgen.importer.command:import_",
        "lint": "opgen.lint.command:lint",
        "meta-coverage": "opgen.op_plugin.coverage:meta_coverage",
        "new": "opgen.new:new",
        "npugraph-ex": "opgen.npugraph_ex.command:npugraph_ex",
    }

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *self.lazy_commands])

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        target = self.lazy_commands.get(name)
        if target is None:
            return super().get_command(ctx, name)
        module_name, attribute = target.split(":")
        return getattr(importlib.import_module(module_name), attribute)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="opgen")
def main() -> None:
    """Generate and lint PyTorch custom-operator registrations."""


@main.command()
@click.argument("schema", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (one object per line when SCHEMA is '-').")
@click.option("--code", "code", metavar="OPGxxx", help="Explain a diagnostic code instead of a schema.")
@click.option("--tag", "tags", multiple=True, metavar="TAG",
              help="A torch.Tag the op is defined with (inplace, out, nondeterministic_seeded; repeatable), as "
              "`tags:` in a spec: `-> Tensor(a!)` is valid with inplace or out.")
@handle_errors
def explain(schema: str | None, as_json: bool, code: str | None, tags: tuple[str, ...]) -> None:
    """Show how opgen reads SCHEMA: canonical form, types, mutation, diagnostics.

    SCHEMA '-' reads one schema per line from standard input (each with the --tag options).
    Exit codes: 0 valid, 1 valid with error diagnostics, 2 unparseable or bad usage.
    """
    from .explain import describe, describe_line, explain_code, render_text
    from .schema import parse_schema

    if code is not None:
        if schema is not None:
            raise click.UsageError("give either a SCHEMA or --code, not both")
        explain_code(code, as_json)
        return
    if schema is None:
        raise click.UsageError("missing SCHEMA (or --code OPGxxx)")
    tags = _explain_tags(tags)
    if schema == "-":
        if sys.stdin is None:
            from .errors import OpgenError

            raise OpgenError("SCHEMA '-' reads standard input, but it is closed", path="<stdin>",
                             hint="pipe schemas in, one per line (`opgen explain - < schemas.txt`), or give one")
        worst = EXIT_OK
        for raw in sys.stdin:
            line = raw.rstrip("\r\n")
            if not line.strip():
                continue
            info = describe_line(line, tags)
            if "error" in info:
                worst = EXIT_USAGE
            elif info["has_errors"] and worst == EXIT_OK:
                worst = EXIT_FINDINGS
            if as_json:
                click.echo(json.dumps(info))
            else:
                _print_human(info)
        sys.exit(worst)
    info = describe(parse_schema(schema), tags)
    if as_json:
        click.echo(json.dumps(info, indent=2))
    else:
        click.echo(render_text(info, color=True))
    sys.exit(EXIT_FINDINGS if info["has_errors"] else EXIT_OK)


def _explain_tags(tags: tuple[str, ...]) -> tuple[str, ...]:
    """The --tag values, checked as a spec's `tags:` are (a name torch has, one aliasing tag at most)."""
    import difflib

    from .contract import ALIASING_TAGS
    from .spec.model import RANDOM_TAG, TAGS

    for tag in tags:
        if tag not in TAGS:
            close = difflib.get_close_matches(tag.removeprefix("torch.Tag."), TAGS, n=1, cutoff=0.5)
            close = [RANDOM_TAG] if tag in ("random", "rng") else close
            raise click.UsageError(f"unknown --tag {tag!r}" + (f"; did you mean {close[0]!r}?" if close else "")
                                   + f" (opgen knows: {', '.join(TAGS)})")
    if len({tag for tag in tags if tag in ALIASING_TAGS}) > 1:
        raise click.UsageError("--tag inplace and --tag out exclude each other: an op is one or the other")
    return tuple(dict.fromkeys(tags))


def _print_human(info: dict) -> None:
    from .explain import render_text
    from .schema.errors import SchemaError

    if "error" in info:
        err = info["error"]
        click.echo(SchemaError(err["message"], source=info["input"], column=err["column"], hint=err["hint"]).render(),
                   err=True)
    else:
        click.echo(render_text(info, color=True) + "\n")


if __name__ == "__main__":
    main()
