"""The cookiecutter templates and how they become files: every template is rendered into a temporary
directory (cookiecutter never writes into the user's directory) and read back as `PlannedFile`s."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ..errors import OpgenError, os_error
from ..layout import USER_PROJECT_FILES
from ..registration_styles import STYLES

# A package: every project file comes from PROJECT_TEMPLATE (the registration module branches on the style),
# and the files that exist once per op (owned by the user) from OP_TEMPLATE.
PROJECT_TEMPLATE = "project_files"
OP_TEMPLATE = "op_files"
# Directories tools leave inside templates (pip byte-compiles installed templates; ruff or pytest run on a
# template in a checkout): never part of a template.
TOOL_DIRS = frozenset({"__pycache__", ".ruff_cache", ".pytest_cache", ".mypy_cache", ".hypothesis"})
# Plain-cookiecutter entry points, one demo per style: their project directory and hook are links into
# PROJECT_TEMPLATE, so each holds nothing but its demo context.
# The project values OP_TEMPLATE reads (`cookiecutter._opgen.KEY`); an undefined one fails the render.
OP_PROJECT_KEYS = ("device_name", "dispatch_key", "package")
STYLE_TEMPLATES = {name: style.demo_template for name, style in STYLES.items()}


def templates_dir() -> Path:
    """The cookiecutter templates: packaged in the wheel as opgen/_templates, at the top of a checkout."""
    package = Path(__file__).resolve().parents[1]
    for candidate in (package / "_templates", package.parent / "templates"):
        if (candidate / OP_TEMPLATE / "cookiecutter.json").is_file():
            return candidate
    raise OpgenError("opgen's templates are missing from this installation",
                     hint="reinstall opgen (pip install opgen); a checkout needs its templates/ directory")


def render_templates(jobs: list[tuple[str, dict, str]], templates: Path | None = None, *,
                     skip_blank: bool = False) -> list:
    """Render each (template name, context, owner) job and return every file as a PlannedFile, sorted by
    path. `skip_blank`: a file that renders to whitespace only is one the project does not need."""
    from .staging import scratch_dir

    templates = templates or templates_dir()
    scratch = None
    try:
        with scratch_dir("render") as scratch:
            return _render_in(scratch, jobs, templates, skip_blank)
    except OSError as error:
        raise os_error(error, "write", error.filename or scratch or "opgen's scratch folder",
                       outcome="opgen's scratch folder; nothing was written to the project") from None


def _render_in(scratch: Path, jobs: list[tuple[str, dict, str]], templates: Path, skip_blank: bool) -> list:
    """Every job rendered into `scratch`, one output folder per template: the files of a job are read and
    removed before the next job (of the same template) renders into the same folders."""
    from .write import PlannedFile

    files: dict[str, PlannedFile] = {}
    used: set[str] = set()
    for template, context, owner in jobs:
        rendered = _cookiecutter(templates / template, context, scratch / template, template in used)
        used.add(template)
        for path in sorted(rendered.rglob("*")):
            if not path.is_file() or TOOL_DIRS.intersection(path.parts):
                continue
            text = path.read_text(encoding="utf-8")
            path.unlink()
            if skip_blank and not text.strip():
                continue
            relative = path.relative_to(rendered).as_posix()
            if relative in files:
                raise OpgenError(f"two ops would write {relative}", hint="give the ops distinct names")
            files[relative] = PlannedFile(relative, text, owner)
    return [files[path] for path in sorted(files)]


def _cookiecutter(template: Path, extra_context: dict, output_dir: Path, overwrite: bool) -> Path:
    """What `cookiecutter.main.cookiecutter(template, no_input=True, extra_context=..., accept_hooks=False)` does
    for a local template, through cookiecutter's own steps: cookiecutter.main imports its repository fetching
    (requests, git, zip), which costs every `opgen new` a tenth of a CPU-second, and writes a replay file opgen never
    reads. The context is the one cookiecutter.main builds (`cookiecutter._repo_dir` included, for the hooks)."""
    from cookiecutter.generate import generate_context, generate_files
    from cookiecutter.prompt import prompt_for_config

    context = generate_context(context_file=str(template / "cookiecutter.json"), default_context={},
                               extra_context=extra_context)
    context["_cookiecutter"] = {key: value for key, value in context["cookiecutter"].items()
                                if not key.startswith("_")}
    context["cookiecutter"].update(prompt_for_config(context, no_input=True))
    context["cookiecutter"].update({"_template": str(template), "_output_dir": str(output_dir.absolute()),
                                    "_repo_dir": str(template), "_checkout": None})
    return Path(generate_files(repo_dir=str(template), context=context, overwrite_if_exists=overwrite,
                               output_dir=str(output_dir), accept_hooks=False))


def render_package(spec, templates: Path | None = None) -> list:
    """Every file of the custom-op package for `spec` (project files, registration module included, and per
    op the user's kernels and TODO fakes)."""
    from .context import project_context

    context = project_context(spec)
    jobs = [(PROJECT_TEMPLATE, context, "generated")]
    jobs += [(OP_TEMPLATE, op_files_context(context, op), "user") for op in context["_opgen"]["ops"]]
    return [replace(file, owner="user") if file.path in USER_PROJECT_FILES else file
            for file in render_templates(jobs, templates)]


def op_files_context(context: dict, op: dict) -> dict:
    """What OP_TEMPLATE renders one op's files from: the op and the few project values they name, never the
    whole project (cookiecutter copies and saves its context on every run: N ops would cost N^2)."""
    project = context["_opgen"]
    return {"project_slug": context["project_slug"], "_op": op,
            "_opgen": {key: project[key] for key in OP_PROJECT_KEYS}}
