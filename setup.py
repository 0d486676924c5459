"""Packages the top-level `templates/` into the wheel as `opgen/_templates` (pyproject.toml holds the rest).

The cookiecutter templates live at the top of the repository so that `cookiecutter templates/custom_op`
works from a checkout; `opgen new` looks for `opgen/_templates` first and falls back to `templates/`
(an editable install), see `opgen.new.templates_dir`.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


class BuildPyWithTemplates(build_py):
    def run(self):
        super().run()
        if self.editable_mode:
            return  # an editable install reads templates/ in place
        source = HERE / "templates"
        target = Path(self.build_lib) / "opgen" / "_templates"
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".ruff_cache",
                                                                      ".pytest_cache", ".mypy_cache", ".hypothesis"))


setup(cmdclass={"build_py": BuildPyWithTemplates})
