"""`[tool.opgen.lint]` in the nearest pyproject.toml: select, ignore, exclude, per-file-ignores."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ..errors import OpgenError
from ..files import read_input

# ruff's default excludes, plus opgen's own state directory (`.opgen/backup/` holds stale copies that
# `opgen new --force` saved). Like ruff, `exclude` replaces this list and `extend-exclude` adds to it.
DEFAULT_EXCLUDE = (".bzr", ".direnv", ".eggs", ".git", ".git-rewrite", ".hg", ".ipynb_checkpoints", ".mypy_cache",
                   ".nox", ".opgen", ".pants.d", ".pyenv", ".pytest_cache", ".pytype", ".ruff_cache", ".svn",
                   ".tox", ".venv", ".vscode", "__pycache__", "__pypackages__", "_build", "buck-out", "build",
                   "dist", "node_modules", "site-packages", "venv", "*.egg-info")


@dataclass
class LintConfig:
    select: tuple[str, ...] = ("OPG",)
    ignore: tuple[str, ...] = ()
    exclude: tuple[str, ...] = DEFAULT_EXCLUDE
    per_file_ignores: dict[str, tuple[str, ...]] = field(default_factory=dict)
    root: str = "."
    source: str | None = None


def find_pyproject(start: str) -> str | None:
    """The nearest pyproject.toml above `start` that has a [tool.opgen...] table."""
    current = os.path.abspath(start)
    if not os.path.isdir(current):
        current = os.path.dirname(current)
    while True:
        candidate = os.path.join(current, "pyproject.toml")
        if os.path.isfile(candidate):
            with open(candidate, "rb") as handle:
                if b"tool.opgen" in handle.read():
                    return candidate
        parent = os.path.dirname(current)
        if parent == current:
            return None
        current = parent


def load_config(start: str, explicit: str | None = None) -> LintConfig:
    path = explicit or find_pyproject(start)
    if path is None:
        return LintConfig(root=os.path.abspath("."))
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        try:
            import tomli as tomllib
        except ModuleNotFoundError:
            return LintConfig(root=os.path.dirname(os.path.abspath(path)), source=path)
    text = read_input(path, "configuration file")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise OpgenError(f"cannot read {path}: {error}", hint="fix the TOML syntax of the file") from None
    except RecursionError:
        raise OpgenError(f"cannot read {path}: it nests too deeply", hint="is this the right file?") from None
    table = data.get("tool", {}).get("opgen", {}).get("lint", {})
    if not isinstance(table, dict):
        raise OpgenError(f"{path}: [tool.opgen.lint] must be a table")
    known = {"select", "ignore", "exclude", "per-file-ignores", "extend-exclude"}
    unknown = sorted(set(table) - known)
    if unknown:
        raise OpgenError(f"{path}: unknown key(s) in [tool.opgen.lint]: {', '.join(unknown)}",
                         hint=f"known keys: {', '.join(sorted(known))}")
    config = LintConfig(root=os.path.dirname(os.path.abspath(path)), source=path)
    if "select" in table:
        config.select = _codes(table["select"], "select", path)
    config.ignore = _codes(table.get("ignore", []), "ignore", path)
    if "exclude" in table:
        config.exclude = _codes(table["exclude"], "exclude", path, upper=False)
    config.exclude += _codes(table.get("extend-exclude", []), "extend-exclude", path, upper=False)
    ignores = table.get("per-file-ignores", {})
    if not isinstance(ignores, dict):
        raise OpgenError(f"{path}: per-file-ignores must be a table of glob = [codes]")
    config.per_file_ignores = {glob: _codes(codes, f"per-file-ignores.{glob}", path) for glob, codes in ignores.items()}
    return config


def _codes(value, key: str, path: str, upper: bool = True) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise OpgenError(f"{path}: [tool.opgen.lint] {key} must be a list of strings")
    return tuple(v.upper() if upper else v for v in value)
