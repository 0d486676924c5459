"""An op-plugin checkout as `opgen add` reads it: where each file an op-add pull request touches lives, and the
checkout's own conventions (its `.clang-format`, the compatibility JSON's signature forms).

Each file is looked for at its path in op-plugin (master), else by its name anywhere in the checkout (one
match); a file the checkout does not have is left out of the contribution with a note, except the two
every contribution needs (op_plugin_functions.yaml and the Meta registrations)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from . import compat, docs, faketest

FUNCTIONS_YAML = "op_plugin/config/op_plugin_functions.yaml"
DERIVATIVES_YAML = "op_plugin/config/derivatives.yaml"
META_PY = "op_plugin/python/meta/_meta_registrations.py"
DOCS_PY = "codegen/templates/_op_plugin_docs.py"
# role -> op-plugin's path for it
FILES = {"functions": FUNCTIONS_YAML, "derivatives": DERIVATIVES_YAML, "meta": META_PY, "docs": DOCS_PY,
         "schema_json": compat.SCHEMA_JSON, "allowlist": compat.ALLOWLIST, "fake_test": faketest.FAKE_TEST,
         "menu": docs.MENU, "api_list": docs.API_LIST}
REQUIRED = ("functions", "meta")
_SKIP_DIRS = {".git", "build", "dist", "__pycache__", "node_modules", ".venv"}


class TargetError(Exception):
    """ROOT is not an op-plugin checkout (a file every contribution edits is missing)."""


@dataclass
class Target:
    root: Path
    paths: dict[str, str] = field(default_factory=dict)  # role -> path relative to root (found files only)
    missing: list[str] = field(default_factory=list)  # roles whose file this checkout lacks

    @classmethod
    def read(cls, root: Path) -> Target:
        target = cls(root)
        names = None
        for role, default in FILES.items():
            if (root / default).is_file():
                target.paths[role] = default
                continue
            names = _index(root) if names is None else names
            matches = names.get(os.path.basename(default), [])
            if len(matches) == 1:
                target.paths[role] = matches[0]
            elif role in REQUIRED:
                raise TargetError(f"{root / default} does not exist")
            else:
                target.missing.append(role)
        return target

    def path(self, role: str) -> str | None:
        return self.paths.get(role)

    def read_text(self, relative: str) -> str | None:
        path = self.root / relative
        if not path.is_file():
            return None
        with path.open(encoding="utf-8", newline="") as handle:  # line endings as they are
            return handle.read()

    @property
    def clang_format(self) -> Path | None:
        style = self.root / ".clang-format"
        return style if style.is_file() else None

    def op_api_forms(self):
        relative = self.path("schema_json")
        text = self.read_text(relative) if relative else None
        return compat.read_forms(text) if text else compat.DEFAULT_FORMS


def _index(root: Path) -> dict[str, list[str]]:
    """File name -> the paths (relative, posix) of the files of that name under root."""
    found: dict[str, list[str]] = {}
    for directory, subdirectories, files in os.walk(root):
        subdirectories[:] = sorted(d for d in subdirectories if d not in _SKIP_DIRS)
        for name in files:
            found.setdefault(name, []).append(Path(directory, name).relative_to(root).as_posix())
    return found
