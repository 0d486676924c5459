"""What `opgen add` wrote into a checkout, piece by piece, so that a later run can tell its own entries (which it
updates in place when the spec changes, and removes when the spec no longer asks for them) from everyone
else's (which it never touches), and a piece edited by hand since (which it keeps, printing the change the
spec would have made).

The record lives in the checkout's git directory (`.git/opgen/op_plugin_add.json`: never committed, kept
across commits and branches), or at ROOT/.opgen/op_plugin_add.json outside git. Its directory is also the
checkout's lock (`locked`): an `opgen add` writes the checkout and its record only while holding it.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

from ..errors import os_error
from ..files import exclusive_lock

FILE_NAME = "op_plugin_add.json"
VERSION = 1


def record_path(root: Path) -> Path:
    for directory in (root, *root.resolve().parents):
        dot_git = directory / ".git"
        if dot_git.is_dir():
            return dot_git / "opgen" / FILE_NAME
        if dot_git.is_file():  # a worktree or submodule: "gitdir: <path>"
            text = dot_git.read_text(encoding="utf-8").strip()
            if text.startswith("gitdir:"):
                git_dir = Path(text.split(":", 1)[1].strip())
                return (git_dir if git_dir.is_absolute() else directory / git_dir) / "opgen" / FILE_NAME
    return root / ".opgen" / FILE_NAME


def load(root: Path) -> dict[str, dict]:
    """piece ident -> {"op": spec op, "text": what opgen wrote}; empty when nothing was recorded."""
    path = record_path(root)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    pieces = data.get("pieces") if isinstance(data, dict) and data.get("version") == VERSION else None
    return {k: v for k, v in pieces.items() if isinstance(v, dict) and isinstance(v.get("text"), str)} if isinstance(
        pieces, dict) else {}


def save(root: Path, pieces: dict[str, dict]) -> None:
    """Replace the record at once (a reader sees the old record or the new one)."""
    from ..render.staging import atomic_write

    text = json.dumps({"version": VERSION, "pieces": dict(sorted(pieces.items()))}, indent=1, ensure_ascii=False)
    atomic_write(record_path(root), (text + "\n").encode("utf-8"))


@contextlib.contextmanager
def locked(root: Path) -> Iterator[None]:
    """Hold the checkout's lock, an exclusive flock on the record's directory (made if missing), for the block:
    another `opgen add` on this checkout waits until the block ends, then sees what this one wrote."""
    directory = record_path(root).parent
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise os_error(error, "write", outcome="nothing was written") from None
    with exclusive_lock(directory):
        yield
