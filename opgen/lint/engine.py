"""Find the files, read them (in parallel for big trees), check them together, filter the result."""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import gc
import mmap
import os
import re
import signal
import threading
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field

from ..contract import RULES, Diagnostic
from ..errors import OpgenError
from ..files import CannotRead, read_digest, read_limited, special_kind
from .cache import enabled as cache_enabled
from .cache import open_cache
from .config import LintConfig
from .records import FileRecord, Unreadable, package_root

PARALLEL_THRESHOLD = 256  # below this many files, starting worker processes costs more than it saves
# The largest file lint parses (10x torch's _meta_registrations.py): Python's parser takes about 120 bytes of
# memory per byte of source, so a bigger file is reported as not checked instead of taking gigabytes.
MAX_FILE_BYTES = 2 << 20


@dataclass
class LintResult:
    diagnostics: list[Diagnostic]
    files_checked: int
    records: list[FileRecord] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # files skipped, and why (a FIFO, a dangling symlink)

    @property
    def internal_errors(self) -> list[tuple[str, str]]:
        return [(r.path, r.internal_error) for r in self.records if r.internal_error]


def expand_selectors(selectors: tuple[str, ...], what: str, *, selecting: bool = True) -> set[str]:
    codes = set()
    for selector in selectors:
        selector = selector.strip().upper()
        if not selector:
            continue
        if selector == "ALL":
            selector = "OPG"
        matched = {code for code in RULES if code.startswith(selector)}
        if not matched:
            raise OpgenError(f"unknown rule selector {selector!r} in {what}",
                             hint="codes look like OPG204; a prefix such as OPG2 selects a group; "
                             "`opgen lint --explain CODE` describes one")
        codes |= {code for code in matched if not selecting or code == selector or not _opt_in(code)}
    return codes


def _opt_in(code: str) -> bool:
    from .rules import LINT_RULES

    rule = LINT_RULES.get(code)
    return rule is not None and rule.opt_in


def discover(paths: list[str], config: LintConfig, notes: list[str] | None = None,
             stats: dict | None = None, found=None) -> tuple[list[str], list[str]]:
    """The Python and YAML files to lint under `paths`. Only regular files are read: a FIFO, a device, a socket
    or a symlink to one of them (or to nothing) is skipped, with a line in `notes` saying so. `stats` gets
    each file's `os.stat` (one per file: the cache compares it, uniqueness keys on it). `found` (a list of
    paths) is given the Python files as they are found, a directory at a time, so reading can start."""
    notes = [] if notes is None else notes
    stats = {} if stats is None else stats
    python, yaml = _Found(stats, found), []
    for given in paths:
        if not os.path.exists(given):
            if os.path.islink(given):
                notes.append(f"{given}: skipped: a symbolic link to nothing")
                continue
            raise OpgenError(f"no such file or directory: {given}", hint="give existing files or directories")
        if not os.path.isdir(given):
            given = os.path.normpath(given)
            if not _excluded(given, config) and _regular(given, notes, stats):
                _classify(given, python.batch, yaml, explicit=True)
            python.flush()
            continue
        for directory, subdirs, files in os.walk(given):
            # each entry's path relative to the config's root, from its directory's (one relpath a directory)
            under = _relative(directory, config)
            under = "" if under == "." else under + "/"
            subdirs[:] = sorted(d for d in subdirs
                                if not _excluded(os.path.join(directory, d), config, under + d))
            for name in sorted(files):
                if name.endswith((".py", ".pyi", ".yaml", ".yml")):
                    path = os.path.normpath(os.path.join(directory, name))
                    if not _excluded(path, config, under + name) and _regular(path, notes, stats):
                        _classify(path, python.batch, yaml, explicit=False)
            python.flush()
    return python.unique, _unique_paths(yaml, stats)


class _Found:
    """The Python files discovery found, each once (`_unique_paths` over what came before), handed on to
    `found` a directory at a time."""

    def __init__(self, stats: dict, found) -> None:
        self.stats = stats
        self.found = found
        self.batch: list[str] = []
        self.unique: list[str] = []
        self.seen: set = set()

    def flush(self) -> None:
        if not self.batch:
            return
        new = _unique_paths(self.batch, self.stats, self.seen)
        self.batch = []
        self.unique += new
        if self.found is not None and new:
            self.found(new)


def _regular(path: str, notes: list[str], stats: dict) -> bool:
    """Whether `path` (followed through symlinks) is a regular file; if not, why not goes to `notes`."""
    try:
        found = stats[path] = os.stat(path)
        kind = special_kind(found.st_mode)
    except FileNotFoundError:
        notes.append(f"{path}: skipped: a symbolic link to nothing")
        return False
    except OSError as error:
        notes.append(f"{path}: skipped: {error.strerror or error}")
        return False
    if kind is not None:
        notes.append(f"{path}: skipped: {kind}, not a regular file")
    return kind is None


def _unique_paths(paths: list[str], stats: dict, seen: set | None = None) -> list[str]:
    """A file named twice (or through two overlapping directories, or a symlink) is read once: keyed by its
    device and inode (one stat, where `realpath` pays one per path component). `seen`: the keys of the files
    taken before (updated)."""
    seen = set() if seen is None else seen
    unique = []
    for path in paths:
        try:
            found = stats.get(path) or os.stat(path)
            key = (found.st_dev, found.st_ino)
        except OSError:
            key = os.path.realpath(path)
        if key not in seen:
            seen.add(key)
            unique.append(path)
    return unique


def _classify(path: str, python: list[str], yaml: list[str], explicit: bool) -> None:
    if path.endswith((".yaml", ".yml")):
        yaml.append(path)
    elif path.endswith((".py", ".pyi")) or explicit and _python_script(path):
        python.append(path)


def _python_script(path: str) -> bool:
    """A file given by name without a .py suffix is checked when it is a Python script (shebang)."""
    try:
        with open(path, "rb") as handle:
            first = handle.readline(200)
    except OSError:
        return False
    return first.startswith(b"#!") and b"python" in first


def _relative(path: str, config: LintConfig) -> str:
    absolute = os.path.abspath(path)
    try:
        return os.path.relpath(absolute, config.root).replace(os.sep, "/")
    except ValueError:
        return absolute.replace(os.sep, "/")


def _matches(path: str, pattern: str, config: LintConfig) -> bool:
    return _glob_matcher((pattern,))(path, _relative(path, config))


@functools.lru_cache(maxsize=64)
def _glob_matcher(patterns: tuple[str, ...]):
    """One test for `patterns` (globs): a pattern matches the path relative to the config's root, the file or
    directory name, or a directory above the path. Compiled into two regular expressions (one match each per
    path, where fnmatch pays four calls per pattern)."""
    relative, name, prefixes = [], [], []
    for pattern in patterns:
        pattern = pattern.rstrip("/")
        relative += [fnmatch.translate(pattern), fnmatch.translate(pattern + "/*")]
        name.append(fnmatch.translate(pattern))
        prefixes.append(pattern + "/")
    if not patterns:
        return lambda path, rel: False
    on_relative = re.compile("|".join(f"(?:{r})" for r in relative)).match
    on_name = re.compile("|".join(f"(?:{r})" for r in name)).match
    starts = tuple(prefixes)

    def matches(path: str, rel: str) -> bool:
        return (on_relative(rel) is not None or on_name(os.path.basename(path)) is not None
                or rel.startswith(starts))
    return matches


def _excluded(path: str, config: LintConfig, relative: str | None = None) -> bool:
    """Whether a pattern of `config.exclude` matches `path` (`relative`: its path relative to the config's
    root, when the caller knows it). Plain names (`.git`, `build`: most of the defaults) are a set lookup on
    the file or directory name; only the others pay for the glob match against the relative path."""
    names, globs = _split_patterns(config.exclude)
    if os.path.basename(path) in names:
        return True
    if relative is None:
        relative = _relative(path, config)
    return relative.split("/", 1)[0] in names or _glob_matcher(globs)(path, relative)


@functools.lru_cache(maxsize=16)
def _split_patterns(patterns: tuple[str, ...]) -> tuple[frozenset[str], tuple[str, ...]]:
    plain = frozenset(p.rstrip("/") for p in patterns if not any(c in p.rstrip("/") for c in "*?[/"))
    return plain, tuple(p for p in patterns if p.rstrip("/") not in plain)


def _read_chunk(paths: list[str]) -> list[FileRecord]:
    """The records of `paths`, without the cyclic garbage collector meanwhile: syntax trees hold no cycles
    (reference counting frees each file's), and the collector's passes over the growing heap of records cost
    a tenth of the reading time."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _read_each(paths)
    finally:
        if enabled:
            gc.enable()


def _read_each(paths: list[str]) -> list[FileRecord]:
    from .collect import read_file

    records = []
    with warnings.catch_warnings():  # Python's own warnings about the code read ("invalid escape sequence")
        warnings.simplefilter("ignore")  # once, not once a file: 27,000 entries were 2% of a cold run
        for path in paths:
            record = _read_one(path, read_file)
            if record is not None:
                records.append(record)
    return records


def _read_one(path: str, read_file) -> FileRecord | None:
    try:
        data = read_limited(path, MAX_FILE_BYTES)
        record = read_file(path, data)
        if record is not None:
            record.read_digest = read_digest(data)
    except CannotRead as refusal:
        record = _too_large(path, refusal) if refusal.too_large else _unreadable(path, refusal.reason)
    except (RecursionError, MemoryError):
        record = _unreadable(path, "it nests too deeply for opgen's checks")
    except Exception as error:  # an opgen bug: the other files are still checked; exit code 2
        if os.environ.get("OPGEN_DEBUG"):
            raise
        record = FileRecord(path, internal_error=f"{type(error).__name__}: {error}")
    return record


def _unreadable(path: str, reason: str) -> FileRecord:
    record = FileRecord(path)
    record.unreadable = Unreadable(reason, parsed=False)
    return record


def _too_large(path: str, refusal: CannotRead) -> FileRecord | None:
    """A file above MAX_FILE_BYTES is not parsed: a finding when it may hold a registration (its bytes scanned
    through a memory map, not read into memory), nothing when it cannot."""
    from .collect.source import has_call_site, may_register

    try:  # the prefilter a parsed file passes, on the mapped bytes: prose such as "a fallback (which ...)" is none
        with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            if not (may_register(data) and has_call_site(data)):
                return None
    except (OSError, ValueError):
        pass  # cannot map it: say it was not checked
    return _unreadable(path, f"it {refusal.reason}: not checked (split it, or exclude it)")


def read_all(paths: list[str], jobs: int | None = None, cache=None, stats: dict | None = None) -> list[FileRecord]:
    """The records of `paths` (None for a file that cannot register is left out); with a `RecordCache`,
    unchanged files come from it (compared with `stats`, discover's, where it has the path) and the others are
    stored in it."""
    with _reading(jobs, cache, stats or {}) as reading:
        reading.add(paths)
        return reading.finish()


# Work is handed to the workers in chunks of about this many bytes (or files): small enough that the run does not
# end with one worker reading a big chunk alone (with 4 chunks a worker, the corpus' took 0.7 to 1.4 s of CPU
# each), big enough that handing one out costs nothing next to reading it.
CHUNK_BYTES = 4 << 20
CHUNK_FILES = 512


class _Reading:
    """Reads the Python files discovery finds while it goes on (`add`, a directory at a time): once enough are
    waiting to be worth worker processes (PARALLEL_THRESHOLD), a pool starts and takes them in chunks; with a
    `RecordCache`, unchanged files come from it instead. `finish` returns the records. Made by `_reading`, which
    stops the workers at the end, also after an error while discovering (a path that does not exist)."""

    def __init__(self, jobs: int | None, cache, stats: dict) -> None:
        self.workers = jobs if jobs is not None else (os.cpu_count() or 1)
        self.cache = cache
        self.stats = stats
        self.cached: list[FileRecord] = []
        self.missing: list[str] = []  # read in this run
        self.waiting: list[str] = []  # not yet handed to a worker
        self.weight = 0  # their bytes
        self.pool = None
        self.pending: list = []

    def stop(self, failed: bool) -> None:
        if self.pool is None:
            return
        if failed:
            self.pool.terminate()
        else:  # idle workers are told to end, not killed: terminate's SIGTERM can kill one while it holds the
            self.pool.close()  # task queue's lock and leave the other blocked on it for ever (seen under load)
        self.pool.join()

    def add(self, paths: list[str]) -> None:
        for path in paths:
            if self.cache is not None:
                hit, record = self.cache.lookup(path, self.stats.get(path))
                if hit:
                    if record is not None:
                        self.cached.append(record)
                    continue
            self.missing.append(path)
            self.waiting.append(path)
            found = self.stats.get(path)
            self.weight += found.st_size if found is not None else 0
        if self.pool is None and self.workers > 1 and len(self.missing) >= PARALLEL_THRESHOLD:
            self.pool = _start_pool(self.workers)
        if self.pool is not None and (self.weight >= CHUNK_BYTES or len(self.waiting) >= CHUNK_FILES):
            self._hand_out()

    def _hand_out(self) -> None:
        if self.waiting:
            self.pending.append(self.pool.apply_async(_read_chunk, (self.waiting,)))
        self.waiting, self.weight = [], 0

    def finish(self, meanwhile=None) -> list[FileRecord]:
        """The records (`meanwhile`, no arguments, runs in this process while the workers read, if any)."""
        if self.pool is not None:
            self._hand_out()
        if meanwhile is not None:
            meanwhile()
        if self.pool is None:
            read = _read_chunk(self.missing)
        else:
            read = [record for pending in self.pending for record in pending.get()]
            read.sort(key=lambda r: r.path)
        if self.cache is None:
            return read
        by_path = {record.path: record for record in read}
        for path in self.missing:
            self.cache.store(path, by_path.get(path))
        records = self.cached
        if self.missing:
            records += by_path.values()
            records.sort(key=lambda r: r.path)
        return records


@contextlib.contextmanager
def _reading(jobs: int | None, cache, stats: dict) -> Iterator[_Reading]:
    reading = _Reading(jobs, cache, stats)
    try:
        yield reading
    except BaseException:
        reading.stop(failed=True)
        raise
    reading.stop(failed=False)


def _start_pool(workers: int):
    import multiprocessing

    from . import collect  # noqa: F401  (imported once here, not once in each forked worker)

    try:
        context = multiprocessing.get_context("fork")
    except ValueError:
        context = multiprocessing.get_context()
    # A worker must die of the SIGTERM Pool.terminate sends, also before it runs any Python: a forked worker inherits
    # the CLI's handler (opgen/console.py), which runs only when the process next executes Python, and one that the
    # signal reached while it was starting never did and never ended: terminate waited for it for ever (a path that
    # does not exist, given after a big folder, hung `opgen lint` about once in 20 runs). The workers start with the
    # default action and SIGTERM blocked, and unblock it first thing (`_unblock_sigterm`).
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "pthread_sigmask"):
        return context.Pool(workers)
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        return context.Pool(workers, initializer=_unblock_sigterm)
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def _unblock_sigterm() -> None:
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


CONTEXT_LIMIT = 5000  # files; a bigger package is not scanned for context


def _context_records(paths: list[str], linted: list[str], config: LintConfig, jobs, cache) -> list[FileRecord]:
    """Registrations in the rest of the package of files given one by one (the pre-commit case).

    pre-commit passes only the staged files; the fake of an op may sit in an unchanged file next to
    it. Those files are read for their registrations only; nothing is reported in them.
    """
    files = [p for p in paths if os.path.isfile(p) and p.endswith((".py", ".pyi"))]
    if not files:
        return []
    seen = {os.path.abspath(p) for p in linted}
    relative = not any(os.path.isabs(p) for p in files)
    extra: list[str] = []
    for root in sorted({package_root(p) for p in files}):
        shown = os.path.relpath(root) if relative else root
        if os.path.isfile(os.path.join(root, "__init__.py")):
            found, _ = discover([shown], config)  # the whole package
        else:  # a loose script: its neighbours only, not the whole tree below it
            found = [os.path.normpath(os.path.join(shown, name)) for name in sorted(os.listdir(root))
                     if name.endswith(".py") and not _excluded(os.path.join(shown, name), config)]
        extra.extend(p for p in found if os.path.abspath(p) not in seen)
        if len(extra) > CONTEXT_LIMIT:
            return []
    return read_all(sorted(set(extra)), jobs, cache)


def lint_paths(paths: list[str], config: LintConfig, *, select=(), ignore=(), jobs: int | None = None,
               cache: bool = False) -> LintResult:
    """Lint `paths`; `cache`: take unchanged files' records from the last run's (see cache.py) and keep this
    run's for the next."""
    from .checks import check_records

    selected = expand_selectors(tuple(select) or config.select, "select")
    selected -= expand_selectors(tuple(ignore) + config.ignore, "ignore", selecting=False)
    per_file = {glob: expand_selectors(codes, f"per-file-ignores.{glob}", selecting=False)
                for glob, codes in config.per_file_ignores.items()}
    notes: list[str] = []
    stats: dict = {}
    record_cache = open_cache() if cache_enabled(cache) else None
    yaml_records, yaml_diagnostics = [], []

    def lint_yaml() -> None:  # while the workers read the Python files: the parent is idle then
        for path in yaml:
            record, found = _lint_yaml_file(path)
            if record is not None:
                yaml_records.append(record)
                yaml_diagnostics.extend(found)

    with _reading(jobs, record_cache, stats) as reading:  # the workers read while discovery goes on
        python, yaml = discover(paths, config, notes, stats, found=reading.add)
        records = reading.finish(lint_yaml)
    unreadable_yaml = [record for record in yaml_records if record.unreadable is not None]
    context = _context_records(paths, python, config, jobs, record_cache)
    if record_cache is not None:
        record_cache.save()
    # Report in the linted files and in the kernel/fake files they import, not in the context.
    reported = _Reported([*python, *(record.path for record in unreadable_yaml)]
                         + [r.function.imported_from for record in records for r in record.registrations
                            if r.function is not None and r.function.imported_from])
    diagnostics = [d for d in check_records(records + unreadable_yaml + context)
                   if d.path and reported.holds(d.path)] + yaml_diagnostics
    records += yaml_records
    by_path = {record.path: record for record in records}
    kept = [d for d in diagnostics if d.code in selected and not _suppressed(d, by_path, per_file, config)]
    kept = _dedupe(kept)
    kept.sort(key=lambda d: (d.path or "", d.line or 0, d.column or 0, d.code))
    return LintResult(kept, len(python) + len(yaml), records, notes)


class _Reported:
    """The files findings are reported in: a path spelled as given is one of them at once; another spelling is
    compared as an absolute path (computed for all only then: 27,000 `abspath` calls were a tenth of a warm
    run over a monorepo)."""

    def __init__(self, paths: list[str]) -> None:
        self.given = set(paths)
        self.absolute: set[str] | None = None

    def holds(self, path: str) -> bool:
        if path in self.given:
            return True
        if self.absolute is None:
            self.absolute = {os.path.abspath(p) for p in self.given}
        return os.path.abspath(path) in self.absolute


def _lint_yaml_file(path: str) -> tuple[FileRecord | None, list[Diagnostic]]:
    """An op YAML file's record and findings (None: not an op YAML); one that cannot be read is a record with the
    reason (OPG200), never an exception that stops the run."""
    from .collect import _read_noqa
    from .yaml_ops import is_op_yaml, lint_yaml

    try:
        data = read_limited(path, MAX_FILE_BYTES)
    except CannotRead as refusal:
        if refusal.too_large and not is_op_yaml(path, _head(path)):
            return None, []
        return _unreadable(path, refusal.reason if not refusal.too_large else
                           f"it {refusal.reason}: not checked (split it, or exclude it)"), []
    if not is_op_yaml(path, data[:65536]):
        return None, []
    text = data.decode("utf-8", errors="replace")
    record = FileRecord(path, read_digest=read_digest(data))
    _read_noqa(record, text)
    try:
        return record, lint_yaml(path, text)
    except (RecursionError, MemoryError):
        return _unreadable(path, "it nests too deeply for opgen's checks"), []


def _head(path: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read(65536)
    except OSError:
        return b""


def _suppressed(diagnostic: Diagnostic, by_path, per_file, config) -> bool:
    if diagnostic.path not in by_path and diagnostic.path:  # a kernel/fake file read through an import
        from .collect import _read_noqa

        record = by_path[diagnostic.path] = FileRecord(diagnostic.path)
        try:
            with open(diagnostic.path, encoding="utf-8", errors="replace") as handle:
                _read_noqa(record, handle.read())
        except OSError:
            pass
    record = by_path.get(diagnostic.path)
    if record is not None:
        if record.file_noqa is not None and (not record.file_noqa or diagnostic.code in record.file_noqa):
            return True
        codes = record.noqa.get(diagnostic.line)
        if codes is not None and (not codes or diagnostic.code in codes):
            return True
    for glob, codes in per_file.items():
        if diagnostic.code in codes and diagnostic.path and _matches(diagnostic.path, glob, config):
            return True
    return False


def _dedupe(diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    seen = set()
    out = []
    for d in diagnostics:
        key = (d.path, d.line, d.column, d.code, d.message)
        if key not in seen:
            seen.add(key)
            out.append(d)
    return out
