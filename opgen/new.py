"""`opgen new`: a spec (or one schema) in, a tested custom-op package out.

spec -> `ProjectSpec` (checked) -> template context (pure data) -> cookiecutter renders the project
template and, once per op, the per-op template into a temporary directory -> the files become
`PlannedFile`s (project template: generated; per-op template: the user's kernels and TODO fakes)
-> the writer plans and applies them. cookiecutter never writes into the user's directory.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import click

from .schema.errors import OpgenError
from .spec.model import DEVICES, STYLES

SPEC_NAME = "opgen.yaml"
STYLE_TEMPLATES = {"custom_op": "custom_op", "library": "library_op"}
# The registration module differs by style; every other project file comes from PROJECT_TEMPLATE,
# and the files that exist once per op (owned by the user) from OP_TEMPLATE.
PROJECT_TEMPLATE = "project_files"
OP_TEMPLATE = "op_files"


def templates_dir() -> Path:
    """The cookiecutter templates: packaged in the wheel as opgen/_templates, at the top of a checkout."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "_templates", here.parent / "templates"):
        if (candidate / OP_TEMPLATE / "cookiecutter.json").is_file():
            return candidate
    raise OpgenError("opgen's templates are missing from this installation",
                     hint="reinstall opgen (pip install opgen); a checkout needs its templates/ directory")


def render_files(spec, templates: Path | None = None) -> list:
    """Every file of the project for `spec`, as PlannedFiles, rendered in a temporary directory."""
    from cookiecutter.main import cookiecutter

    from .render.context import project_context
    from .render.write import PlannedFile

    templates = templates or templates_dir()
    context = project_context(spec)
    files: dict[str, PlannedFile] = {}
    with tempfile.TemporaryDirectory(prefix="opgen-") as tmp:
        config = {"replay_dir": os.path.join(tmp, "replay"), "cookiecutters_dir": os.path.join(tmp, "cookiecutters")}
        out = os.path.join(tmp, "out")
        for template in (STYLE_TEMPLATES[spec.style], PROJECT_TEMPLATE):
            rendered = cookiecutter(str(templates / template), no_input=True, extra_context=context,
                                    output_dir=os.path.join(out, template), default_config=config, accept_hooks=False)
            _collect(Path(rendered), "generated", files)
        for op in context["_opgen"]["ops"]:
            op_out = os.path.join(tmp, f"op{op['index']}")
            rendered = cookiecutter(str(templates / OP_TEMPLATE), no_input=True,
                                    extra_context={**context, "_op": op}, output_dir=op_out,
                                    default_config=config, accept_hooks=False)
            _collect(Path(rendered), "user", files)
    return [files[path] for path in sorted(files)]


def _collect(root: Path, owner: str, files: dict) -> None:
    from .render.write import PlannedFile

    for path in sorted(root.rglob("*")):
        # pip byte-compiles the installed templates' .py files; their __pycache__ is no template
        if path.is_file() and "__pycache__" not in path.parts:
            relative = path.relative_to(root).as_posix()
            if relative in files:
                raise OpgenError(f"two ops would write {relative}", hint="give the ops distinct names")
            content = path.read_text(encoding="utf-8")
            files[relative] = PlannedFile(relative, content, owner)


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
    tail = schema.signature(with_namespace=False)
    return (
        "# opgen spec, started from `opgen new --schema`: add shape/dtype semantics under `outputs:`\n"
        "# and example inputs under `examples:` (see docs/spec.md), then run `opgen new` again.\n"
        f"namespace: {schema.namespace}\n"
        f"style: {style or 'library'}\n"
        f"device: {device or 'npu'}\n"
        "ops:\n"
        f"  - schema: {json.dumps(tail)}\n"
    )


@click.command("new")
@click.argument("spec_path", metavar="SPEC", required=False, type=click.Path(dir_okay=False))
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False),
              help="Project directory to create or update (default: the current directory when regenerating).")
@click.option("--schema", "schema_text", metavar="'ns::op(...) -> ...'",
              help="Start from one schema instead of a spec (fake function left as a TODO).")
@click.option("--style", type=click.Choice(STYLES), help="Registration style (overrides the spec's `style`).")
@click.option("--device", type=click.Choice(tuple(DEVICES)), help="Kernel device (overrides the spec's `device`).")
@click.option("--force", is_flag=True, help="Overwrite hand-edited generated files and write into a directory "
              "opgen did not create (replaced text is saved under .opgen/backup/).")
@click.option("--dry-run", is_flag=True, help="Show what would be written; write nothing.")
def new(**options) -> None:
    """Generate (or regenerate) a custom-op package from SPEC.

    \b
    opgen new examples/rms_norm.yaml -o build/rms_norm
    opgen new --schema "myops::scale(Tensor x, float s) -> Tensor" -o scale_ops
    opgen new                      # in a generated project: regenerate from its opgen.yaml
    """
    from .cli import handle_errors  # imported here: cli imports this module to register the command

    handle_errors(run_new)(**options)


def run_new(spec_path: str | None, out_dir: str | None, schema_text: str | None, style: str | None,
            device: str | None, force: bool, dry_run: bool) -> None:
    from .render.write import apply_plan, plan_changes
    from .spec.load import load_spec_text

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
    if schema_text is not None:
        text, name = schema_spec_text(schema_text, style, device), "<--schema>"
    else:
        name = spec_path
        try:
            text = Path(spec_path).read_text(encoding="utf-8")
        except FileNotFoundError:
            raise OpgenError(f"spec file {spec_path} does not exist",
                             hint="give the path of an opgen spec (see docs/spec.md), or start with --schema") from None
        except (OSError, UnicodeDecodeError) as error:
            raise OpgenError(f"cannot read spec file {spec_path}: {error}") from None
    spec = load_spec_text(text, name, style=style, device=device)
    for op in spec.ops:
        for note in op.notes:
            click.echo(f"warning: {name}: ops[{op.index}]: {note}", err=True)
    for note in spec.notes:
        click.echo(f"warning: {name}: {note}", err=True)
    from .drift import drift_warnings

    for warning in drift_warnings(out_dir, spec, name):
        click.echo(f"warning: {warning}", err=True)
    plan = plan_changes(out_dir, render_files(spec), force=force)
    if dry_run:
        click.echo(plan.render())
        click.echo("dry run: nothing was written")
        return
    apply_plan(plan)
    click.echo(plan.render(include_unchanged=False))
    if sys.stdout.isatty():
        click.echo(f"next: pip install -e {out_dir} && python -m pytest {out_dir} -q")
