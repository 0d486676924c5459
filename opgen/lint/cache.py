"""What lint read from each file last time, so that a file unchanged since is neither read nor parsed again.

An entry is keyed by the file's path as given and checked against its size, modification time, inode and
change time (what ruff and git compare); it holds the file's record, or None for a file the prefilter
skipped. A file modified within `RACY_SECONDS` of the run is never stored: a rewrite within the file
system's timestamp granularity could keep size and mtime (git's "racily clean" case). The cache belongs to
one version of the collector (the stat of every module of `opgen.lint` and `opgen.schema`, so an edited
reader starts afresh), and one cache file serves one working directory (records hold paths as given; a
pre-commit run over other staged files reuses it; two runs that overlap merge their entries, the newer
winning). It lives in `<opgen cache>/lint/` (`$OPGEN_CACHE_DIR`, else `$XDG_CACHE_HOME/opgen`, else
`~/.cache/opgen`), never in the linted tree; `--no-cache` or `OPGEN_LINT_NO_CACHE=1` turns it off. A cache
that cannot be read or written is ignored: it only saves time.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import time
from pathlib import Path

from ..files import cache_root
from .records import FileRecord

RACY_SECONDS = 2.0
FORMAT = 1
MAX_ENTRIES = 200_000  # past this, a save keeps only the run's own entries (files deleted or moved since)
_Key = tuple[int, int, int, int]


def enabled(requested: bool) -> bool:
    return requested and os.environ.get("OPGEN_LINT_NO_CACHE", "") in ("", "0")


def _stat_key(path: str, found: os.stat_result | None = None) -> _Key | None:
    if found is None:
        try:
            found = os.stat(path)
        except OSError:
            return None
    return (found.st_size, found.st_mtime_ns, found.st_ino, found.st_ctime_ns)


def _code_version() -> str:
    """Changes whenever a module that decides what a record holds changes (or opgen is reinstalled)."""
    package = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256(str(FORMAT).encode())
    for folder in (package / "lint", package / "schema", package):
        for path in sorted(folder.rglob("*.py") if folder != package else folder.glob("*.py")):
            key = _stat_key(str(path))
            digest.update(f"{path.relative_to(package)}:{key}".encode())
    return digest.hexdigest()[:16]


def open_cache() -> RecordCache | None:
    """The cache of the working directory; None when there can be none (a cache directory that cannot be named,
    such as `OPGEN_CACHE_DIR=~nouser/x`): lint then reads every file, as with --no-cache."""
    try:
        return RecordCache()
    except (OSError, RuntimeError, ValueError):
        return None


class RecordCache:
    """The entries of one cache file: `lookup` before reading, `store` after, `save` once at the end."""

    def __init__(self) -> None:
        self.version = _code_version()
        name = hashlib.sha256(os.getcwd().encode()).hexdigest()[:16]
        self.path = cache_root() / "lint" / f"{name}.pickle"
        self.entries = self._load()
        self.used: dict[str, tuple[_Key, FileRecord | None]] = {}  # what this run read or confirmed
        self.changed = False
        self._started = time.time_ns()

    def _load(self) -> dict[str, tuple[_Key, FileRecord | None]]:
        with contextlib.suppress(Exception):  # a missing, truncated or foreign cache: start empty
            with open(self.path, "rb") as handle:
                version, entries = pickle.load(handle)
            if version == self.version and isinstance(entries, dict):
                return entries
        return {}

    def lookup(self, path: str, found: os.stat_result | None = None) -> tuple[bool, FileRecord | None]:
        """(hit, record): on a hit the record (None: the file holds no registration) is what reading gives.
        `found`: the file's stat, when the caller has it."""
        entry = self.entries.get(path)
        if entry is None or _stat_key(path, found) != entry[0]:
            return False, None
        self.used[path] = entry
        return True, entry[1]

    def store(self, path: str, record: FileRecord | None) -> None:
        if record is not None and (record.unreadable is not None or record.internal_error):
            return  # said again on every run, and never the cache's fault
        key = _stat_key(path)
        if key is None or key[1] > self._started - int(RACY_SECONDS * 1e9):
            return
        self.used[path] = (key, record)
        self.changed = True

    def save(self) -> None:
        """Write this run's entries over the file's current ones (another run may have saved meanwhile)."""
        if not self.changed:
            return
        import tempfile

        entries = self._load()
        if len(entries) + len(self.used) > MAX_ENTRIES:
            entries = {}
        entries.update(self.used)
        with contextlib.suppress(OSError, pickle.PicklingError):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, scratch = tempfile.mkstemp(dir=self.path.parent, prefix=".lint-", suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as handle:
                    pickle.dump((self.version, entries), handle, protocol=pickle.HIGHEST_PROTOCOL)
                os.replace(scratch, self.path)
            finally:
                with contextlib.suppress(OSError):
                    os.unlink(scratch)
