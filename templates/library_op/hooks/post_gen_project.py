"""Render the rest of the project for a plain `cookiecutter` run.

This template holds only the registration module of its style. The files every style shares come
from the sibling template `project_files`, and the files that exist once per op (kernels, TODO
fakes) from `op_files`, rendered once per op into this project. (`opgen new` does the same itself
and does not run this hook.)
"""

import json
import os
import shutil
import tempfile

from cookiecutter.main import cookiecutter

REPO_DIR = {{ cookiecutter._repo_dir | tojson }}
CONTEXT = json.loads({{ cookiecutter | tojson | tojson }})


def templates_dir() -> str:
    """The directory holding this template and `op_files`. cookiecutter may pass a relative template
    path and runs hooks inside the new project, so a relative path is resolved against the directory
    cookiecutter was started from."""
    starts = [""] if os.path.isabs(REPO_DIR) else [os.environ.get("PWD", ""), f"/proc/{os.getppid()}/cwd"]
    for start in starts:
        candidate = os.path.dirname(os.path.normpath(os.path.join(start, REPO_DIR)))
        if os.path.isfile(os.path.join(candidate, "op_files", "cookiecutter.json")):
            return candidate
    raise SystemExit(f"cannot find the op_files template next to {REPO_DIR!r}; run cookiecutter with an absolute path")


def main() -> None:
    project = os.getcwd()
    extra = {"project_slug": CONTEXT["project_slug"], "_opgen": CONTEXT["_opgen"]}
    with tempfile.TemporaryDirectory() as tmp:
        config = {"replay_dir": os.path.join(tmp, "replay"), "cookiecutters_dir": os.path.join(tmp, "cc")}
        parts = [("project_files", extra)] + [("op_files", {**extra, "_op": op}) for op in CONTEXT["_opgen"]["ops"]]
        for index, (template, context) in enumerate(parts):
            rendered = cookiecutter(os.path.join(templates_dir(), template), no_input=True, extra_context=context,
                                    output_dir=os.path.join(tmp, str(index)), default_config=config)
            copy_files(rendered, project)


def copy_files(rendered: str, project: str) -> None:
    """The files of a rendered part, into the project (a file name that renders empty leaves no file, and
    its directory is not created either: the project is exactly what `opgen new` writes)."""
    for directory, _, files in os.walk(rendered):
        for name in files:
            source = os.path.join(directory, name)
            target = os.path.join(project, os.path.relpath(source, rendered))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copy2(source, target)


if __name__ == "__main__":
    main()
