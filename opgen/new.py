"""`opgen new`: a spec (or one schema) in, a tested custom-op package out.

spec -> `ProjectSpec` (checked) -> template context (pure data) -> cookiecutter renders the templates
into a temporary directory (opgen/render/templates.py) -> the files become `PlannedFile`s (generated, or
the user's kernels and TODO fakes) -> the writer plans and applies them. cookiecutter never writes into
the user's directory.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from .colour import paint
from .errors import OpgenError
from .spec.model import DEVICES, STYLES, TARGETS

SPEC_NAME = "opgen.yaml"
ADOPTED_FILES = ("opgen.yaml", "README.md")  # with the tests, what `adopt:` generates
PLAN_COLOURS = {"create": "green", "update": "cyan", "overwrite": "red", "remove": "yellow", "orphan": "yellow"}


def paint_plan(text: str) -> str:
    """A plan from `Plan.render` with each action word coloured (click.echo drops it off a terminal)."""
    lines = []
    for line in text.splitlines():
        kind = line.split(" ", 1)[0]
        lines.append(paint(kind, fg=PLAN_COLOURS[kind]) + line[len(kind):] if kind in PLAN_COLOURS else line)
    return "\n".join(lines)


def schema_spec_text(schema_text: str, style: str | None, device: str | None) -> str:
    """A starter spec for `--schema`: the op, no semantics (TODO fake), no examples."""
    import json

    from .schema import parse_schema

    try:
        schema = parse_schema(schema_text)
    except OpgenError as error:
        raise OpgenError(f"--schema: {error.message}", source=schema_text, column=error.column,
                         hint=error.hint) from None
    if not schema.namespace:
        raise OpgenError("--schema needs a namespace: 'ns::op(...) -> ...'", source=schema_text, column=1,
                         hint=f"e.g. myops::{schema_text.strip()}")
    return (
        "# opgen spec, started from `opgen new --schema`: add shape/dtype semantics under `outputs:`\n"
        "# and example inputs under `examples:` (see docs/spec.md), then run `opgen new` again.\n"
        f"namespace: {schema.namespace}\n"
        f"style: {style or 'library'}\n"
        f"device: {device or 'npu'}\n"
        "ops:\n"
        # the schema as typed after `ns::`, so an error the loader finds in it maps back to the user's column
        f"  - schema: {json.dumps(schema_text[_name_start(schema_text):])}\n"
    )


def _name_start(schema_text: str) -> int:
    """Where the op name starts in a `--schema` text that parsed with a namespace."""
    return schema_text.index("::") + 2


def schema_error(error: OpgenError, schema_text: str, spec_text: str) -> OpgenError:
    """An error found in the spec `schema_spec_text` wrote, placed in the `--schema` text the user typed."""
    if getattr(error, "value_field", None) is not None and error.value_field.startswith("ops[0].schema"):
        code = error.value_field[len("ops[0].schema"):]
        return OpgenError(f"--schema{code}: {error.value_message}", source=schema_text,
                          column=_name_start(schema_text) + error.value_offset, hint=error.hint)
    line = spec_text.splitlines()[error.line - 1] if error.line else ""
    column = 1 if line.startswith("namespace:") else None  # the namespace is the first thing the user typed
    return OpgenError(f"--schema: {error.message}", source=schema_text, column=column, hint=error.hint)


@click.command("new")
@click.argument("spec_path", metavar="[SPEC]", required=False, type=click.Path(dir_okay=False))
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False),
              help="Project directory to create or update (default: the current directory when regenerating).")
@click.option("--schema", "schema_text", metavar="'ns::op(...) -> ...'",
              help="Start from one schema instead of a spec (fake function left as a TODO).")
@click.option("--style", type=click.Choice(STYLES), help="Registration style (overrides the spec's `style`).")
@click.option("--device", type=click.Choice(tuple(DEVICES)), help="Kernel device (overrides the spec's `device`).")
@click.option("--target", type=click.Choice(TARGETS), help="package (default): a pip-installable custom-op package; "
              "op_plugin: an Ascend op-plugin contribution (op_plugin_functions.yaml entries, OpApi kernels, Meta "
              "functions, tests). Overrides the spec's `target`.")
@click.option("--force", is_flag=True, help="Overwrite hand-edited generated files and write into a directory "
              "opgen did not create (replaced text is saved under .opgen/backup/).")
@click.option("--dry-run", is_flag=True, help="Show what would be written; write nothing.")
def new(**options) -> None:
    """Generate (or regenerate) a custom-op package from SPEC.

    \b
    opgen new examples/rms_norm.yaml -o build/rms_norm
    opgen new --schema "myops::scale(Tensor x, float s) -> Tensor" -o scale_ops
    opgen new                      # in a generated project: regenerate from its opgen.yaml
    opgen new examples/op_plugin/add_rms_norm.yaml --target op_plugin -o build/npu_add_rms_norm
    """
    from .console import handle_errors

    handle_errors(run_new)(**options)


def run_new(spec_path: str | None, out_dir: str | None, schema_text: str | None, style: str | None,
            device: str | None, force: bool, dry_run: bool, target: str | None = None) -> None:
    from .render.write import WriteRefused, plan_changes

    spec_path, out_dir = _paths(spec_path, out_dir, schema_text)
    spec, name, text = _load(spec_path, schema_text, style, device, target)
    _warn(spec, name, out_dir, schema_text is not None)
    files = _render(spec)
    _refuse_shadowed_builtins(spec, files, text, name, schema_text)
    try:
        plan = plan_changes(out_dir, files, force=force)
    except WriteRefused as refused:
        if dry_run and all(problem.forceable for problem in refused.problems):
            click.echo(paint_plan(plan_changes(out_dir, files, force=True).render()))
            click.echo("dry run: nothing was written; this plan needs --force (the refusal follows)")
        raise
    if dry_run:
        click.echo(paint_plan(plan.render()))
        click.echo("dry run: nothing was written")
        return
    plan = _apply_fresh(plan, files, force)
    click.echo(paint_plan(plan.render(include_unchanged=False)))
    if sys.stdout.isatty() and spec.target == "package":
        click.echo(f"next: pip install -e {out_dir} && python -m pytest {out_dir} -q")


def _apply_fresh(plan, files: list, force: bool):
    """Apply `plan`; when the project changed since it was made (another opgen wrote it meanwhile), plan again
    from what is there now, saying so. The plan applied is returned."""
    from .render.write import PlanOutdated, apply_plan, plan_changes

    for attempt in range(3):
        try:
            apply_plan(plan)
            return plan
        except PlanOutdated as outdated:
            if attempt == 2:
                raise
            click.echo(f"note: {outdated.message}; planning again from what is there now", err=True)
            plan = plan_changes(plan.out_dir, files, force=force)
    return plan


def _paths(spec_path: str | None, out_dir: str | None, schema_text: str | None) -> tuple[str | None, str]:
    """The spec and the project directory: given, or (plain `opgen new`) the opgen.yaml of the project."""
    if spec_path and schema_text:
        raise click.UsageError("give either SPEC or --schema, not both")
    if spec_path is None and schema_text is None:
        out_dir = out_dir or "."
        spec_path = os.path.join(out_dir, SPEC_NAME)
        if not os.path.isfile(spec_path):
            raise OpgenError(f"no SPEC given and no {SPEC_NAME} in {os.path.abspath(out_dir)}",
                             hint="opgen new SPEC -o DIR, or opgen new --schema 'ns::op(...) -> ...' -o DIR; "
                             f"inside a generated project plain `opgen new` regenerates from {SPEC_NAME}")
    if out_dir is None:
        raise click.UsageError("missing -o/--out DIR (the project directory to create)")
    from .render.write import MAX_NAME_BYTES

    for part in Path(out_dir).parts:
        if len(os.fsencode(part)) > MAX_NAME_BYTES:
            shown = part if len(part) <= 40 else f"{part[:20]}...{part[-10:]}"
            raise OpgenError(f"-o {shown}: a name of {len(os.fsencode(part))} bytes; file systems allow "
                             f"{MAX_NAME_BYTES}", hint="choose a shorter directory name")
    return spec_path, out_dir


def _load(spec_path: str | None, schema_text: str | None, style: str | None, device: str | None,
          target: str | None):
    """(the checked spec, its name for messages, its text); an error in a `--schema` spec points into the schema
    typed."""
    from .spec.load import load_spec_text, read_spec

    if schema_text is not None:
        text, name = schema_spec_text(schema_text, style, device), "<--schema>"
    else:
        name = spec_path
        text = read_spec(spec_path)
    try:
        return load_spec_text(text, name, style=style, device=device, target=target), name, text
    except OpgenError as error:
        if schema_text is None:
            raise
        raise schema_error(error, schema_text, text) from None


def _refuse_shadowed_builtins(spec, files: list, text: str, name: str, schema_text: str | None) -> None:
    """A name from the spec that would replace a builtin the generated code uses, refused where the spec gave it
    (rendering is what shows which builtins the code uses: the templates, the spec's bodies and rules)."""
    from .spec.names import shadow_error, shadowed_builtins

    shadows = shadowed_builtins(files)
    error = shadow_error(text, name, spec, shadows) if shadows else None
    if error is not None:
        raise error if schema_text is None else schema_error(error, schema_text, text)


def _warn(spec, name: str, out_dir: str, from_schema: bool) -> None:
    """The spec's notes (rewrites, info rules) and the drift of the user's files, as warnings."""
    from .drift import drift_warnings

    warning = paint("warning", fg="yellow", bold=True)
    label = "--schema" if from_schema else name
    for op in spec.ops:
        for note in op.notes:
            click.echo(f"{warning}: {label if from_schema else f'{name}: ops[{op.index}]'}: {note}", err=True)
    for note in spec.notes:
        click.echo(f"{warning}: {label}: {note}", err=True)
    for note in drift_warnings(out_dir, spec, name):
        click.echo(f"{warning}: {note}", err=True)
    if spec.target == "op_plugin" and not from_schema:
        from .op_plugin.model import english_docs, foreign_dtype_codes

        for note in foreign_dtype_codes(spec) + english_docs(spec):
            click.echo(f"{warning}: {note}", err=True)


def _render(spec) -> list:
    if spec.target == "op_plugin":
        from .op_plugin.render import render_files

        return render_files(spec)
    from .render.templates import render_package

    files = render_package(spec)
    if spec.adopt:  # the user's package registers the ops: only the tests and the project's guide
        files = [f for f in files if f.path in ADOPTED_FILES or f.path.startswith("tests/")]
    return files
