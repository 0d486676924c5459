"""The cookiecutter templates and how they become files: every template is rendered into a temporary
directory (cookiecutter never writes into the user's directory) and read back as `PlannedFile`s."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from ..errors import OpgenError
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
    from cookiecutter.main import cookiecutter

    from .write import PlannedFile

    templates = templates or templates_dir()
    files: dict[str, PlannedFile] = {}
    with tempfile.TemporaryDirectory(prefix="opgen-") as tmp:
        config = {"replay_dir": os.path.join(tmp, "replay"), "cookiecutters_dir": os.path.join(tmp, "cookiecutters")}
        for number, (template, context, owner) in enumerate(jobs):
            rendered = Path(cookiecutter(str(templates / template), no_input=True, extra_context=context,
                                         output_dir=os.path.join(tmp, f"out{number}"), default_config=config,
                                         accept_hooks=False))
            for path in sorted(rendered.rglob("*")):
                if not path.is_file() or TOOL_DIRS.intersection(path.parts):
                    continue
                text = path.read_text(encoding="utf-8")
                if skip_blank and not text.strip():
                    continue
                relative = path.relative_to(rendered).as_posix()
                if relative in files:
                    raise OpgenError(f"two ops would write {relative}", hint="give the ops distinct names")
                files[relative] = PlannedFile(relative, text, owner)
    return [files[path] for path in sorted(files)]


def render_package(spec, templates: Path | None = None) -> list:
    """Every file of the custom-op package for `spec` (project files, registration module included, and per
    op the user's kernels and TODO fakes)."""
    from .context import project_context

    context = project_context(spec)
    jobs = [(PROJECT_TEMPLATE, context, "generated")]
    jobs += [(OP_TEMPLATE, {**context, "_op": op}, "user") for op in context["_opgen"]["ops"]]
    return render_templates(jobs, templates)
