"""Render the files that exist once per op (kernels, TODO fakes) for a plain `cookiecutter` run.

The style templates (`custom_op`, `library_op`) hold only a demo context: their project directory and
this hook are links into `project_files`. cookiecutter renders one file per template file, so the
per-op files come from the sibling template `op_files`, rendered here once per op into the new project.
(`opgen new` renders the same templates itself and does not run this hook.)
"""

import json
import os
import shutil
import tempfile

from cookiecutter.main import cookiecutter

REPO_DIR = {{ cookiecutter._repo_dir | tojson }}
CONTEXT = json.loads({{ cookiecutter | tojson | tojson }})


def templates_dir() -> str:
    """The directory holding the style templates and `op_files`. cookiecutter may pass a relative template
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
        for index, op in enumerate(CONTEXT["_opgen"]["ops"]):
            rendered = cookiecutter(os.path.join(templates_dir(), "op_files"), no_input=True,
                                    extra_context={**extra, "_op": op}, output_dir=os.path.join(tmp, str(index)),
                                    default_config=config)
            copy_files(rendered, project)
    remove_empty_directories(project)


def copy_files(rendered: str, project: str) -> None:
    """The files of one op, into the project (a file name that renders empty leaves no file, and
    its directory is not created either: the project is exactly what `opgen new` writes)."""
    for directory, _, files in os.walk(rendered):
        for name in files:
            source = os.path.join(directory, name)
            target = os.path.join(project, os.path.relpath(source, rendered))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copy2(source, target)


def remove_empty_directories(project: str) -> None:
    """A file name that renders empty (`fakes/__init__.py` without TODO fakes) leaves its directory behind
    in the fresh project; opgen writes no such directory."""
    for directory, _, _ in sorted(os.walk(project), reverse=True):
        if directory != project and not os.listdir(directory):
            os.rmdir(directory)


if __name__ == "__main__":
    main()
