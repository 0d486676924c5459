"""What a run writes on the way: staged files and scratch folders, and how the next run removes what a killed
one left.

Staged writes: every new text goes to a temp file beside its target, is made durable, and is renamed into
place, so a reader (or a crash) sees the old file or the new one, never a part. The temp files carry opgen's
own name, `.<name>.<pid>-<8 hex>.opgen-tmp`, so that what a run killed at any point leaves behind is
recognised by the next run (`leftovers`): it is opgen's, not the user's, and can go. Scratch folders
(`scratch_dir`, in the system's temp directory) carry the pid too, and each new one first removes those of
runs that are over.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import signal
import stat
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

SUFFIX = ".opgen-tmp"
# The pid is optional: opgen before 0.1 named its temp files `.<name>.<8 hex>.opgen-tmp`.
_STAGED = re.compile(r"\.(?P<name>.+)\.(?:(?P<pid>\d+)-)?[0-9a-f]{8}\.opgen-tmp\Z", re.DOTALL)
_NAME_KEPT = 180  # characters of the target's name in its temp file's: a name stays within 255 bytes


def staged_name(target: Path) -> Path:
    return target.parent / f".{target.name[:_NAME_KEPT]}.{os.getpid()}-{secrets.token_hex(4)}{SUFFIX}"


def is_staged(name: str) -> bool:
    """Whether a file name is one opgen gives its temp files."""
    return name.endswith(SUFFIX) and _STAGED.match(name) is not None


def left_by_dead_run(name: str) -> bool:
    """A temp file of a run that is over: killed, or crashed (a live run's, another opgen at work, stays)."""
    match = _STAGED.match(name)
    if match is None:
        return False
    return match.group("pid") is None or not _alive(int(match.group("pid")))


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # alive, someone else's
        return True
    return True


_SCRATCH = re.compile(r"opgen-(?P<purpose>[a-z]+)-(?P<pid>\d+)-")


@contextlib.contextmanager
def scratch_dir(purpose: str) -> Iterator[Path]:
    """A new folder `opgen-<purpose>-<pid>-...` in the temp directory, removed when the block ends (also on an
    error, Ctrl-C or SIGTERM); the folders of runs killed outright (SIGKILL) are removed first."""
    path = None
    try:
        with _signals_held():  # a SIGTERM between making the folder and owning it would leave it behind
            _remove_dead_scratch()
            path = Path(tempfile.mkdtemp(prefix=f"opgen-{purpose}-{os.getpid()}-"))
        yield path
    finally:
        if path is not None:
            with _signals_held():
                shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """SIGTERM and SIGINT wait (delivered when the block ends), where the platform lets a thread hold them."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _remove_dead_scratch() -> None:
    base = tempfile.gettempdir()
    try:
        names = os.listdir(base)
    except OSError:
        return
    for name in names:
        match = _SCRATCH.match(name)
        if match is not None and not _alive(int(match.group("pid"))):
            shutil.rmtree(os.path.join(base, name), ignore_errors=True)


def leftovers(root: Path, directories: set[str]) -> list[str]:
    """The temp files a dead run left in `directories` (relative to `root`, "" the root itself), as sorted paths
    relative to `root`."""
    found = []
    for directory in sorted(directories):
        try:
            with os.scandir(root / directory if directory else root) as entries:
                names = [entry.name for entry in entries if entry.is_file(follow_symlinks=False)]
        except OSError:
            continue
        found += [f"{directory}/{name}" if directory else name for name in names
                  if is_staged(name) and left_by_dead_run(name)]
    return sorted(found)


def with_executable(mode: int, executable: bool) -> int:
    if executable:
        return mode | ((mode & 0o444) >> 2)  # x wherever r is, like `chmod +x` under the user's umask
    return mode & ~0o111


class Batch:
    """New texts staged as temp files beside their targets, fsynced together, then renamed into place in the
    order they were added. `discard` removes whatever was not renamed, and the directories `add` created for it.
    An OSError names the file it was about (`filename`), also for a failed write."""

    _OPEN_FILES = 128  # fsync and close in groups: bounded open descriptors

    def __init__(self) -> None:
        self.staged: list[tuple[Path, Path]] = []  # (temp, target), not yet renamed
        self.directories: list[Path] = []
        self.created: list[Path] = []  # directories made for the staged files, outermost first
        self._open: list[tuple[int, Path]] = []  # (descriptor, target) written, not yet fsynced

    def add(self, target: Path, data: bytes, *, executable: bool | None = False, like: Path | None = None) -> None:
        """New files get the umask's permissions; a replaced file keeps its own (`like`), with the executable
        bits set or cleared (`executable` None: exactly its mode)."""
        try:
            self._make_parents(target.parent)
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
            while True:
                temp = staged_name(target)
                try:
                    descriptor = os.open(temp, flags, 0o777 if executable else 0o666)
                    break
                except FileExistsError:
                    continue
            self.staged.append((temp, target))
            self._open.append((descriptor, target))
            with os.fdopen(descriptor, "wb", closefd=False) as stream:
                stream.write(data)
            if like is not None:
                mode = stat.S_IMODE(like.stat().st_mode)
                os.chmod(temp, mode if executable is None else with_executable(mode, executable))
        except OSError as error:
            raise _about(error, target) from None
        if target.parent not in self.directories:
            self.directories.append(target.parent)
        if len(self._open) >= self._OPEN_FILES:
            self.sync()

    def _make_parents(self, directory: Path) -> None:
        missing = []
        while not directory.is_dir():
            missing.append(directory)
            if directory.parent == directory:
                break
            directory = directory.parent
        for path in reversed(missing):
            path.mkdir()
            self.created.append(path)

    def sync(self) -> None:
        """fsync every staged file; concurrent calls let the filesystem commit them together."""
        written, self._open = self._open, []
        try:
            in_parallel(_fsync, written)
        finally:
            for descriptor, _ in written:
                os.close(descriptor)

    def commit(self) -> None:
        while self.staged:
            temp, target = self.staged[0]
            try:
                os.replace(temp, target)
            except OSError as error:
                raise _about(error, target) from None
            self.staged.pop(0)
        self.created = []  # they hold renamed files now

    def discard(self) -> None:
        for descriptor, _ in self._open:
            with contextlib.suppress(OSError):
                os.close(descriptor)
        self._open = []
        for temp, _ in self.staged:
            with contextlib.suppress(OSError):
                os.unlink(temp)
        self.staged = []
        for directory in reversed(self.created):
            with contextlib.suppress(OSError):
                directory.rmdir()
        self.created = []


def _fsync(written: tuple[int, Path]) -> None:
    try:
        os.fsync(written[0])
    except OSError as error:
        raise _about(error, written[1]) from None


def _about(error: OSError, target: Path | None) -> OSError:
    """`error`, naming `target` when it names a temp file or nothing (a failed write names no file)."""
    if target is not None and (error.filename is None or str(error.filename).endswith(SUFFIX)):
        error.filename = str(target)
    return error


def atomic_write(target: Path, data: bytes, *, keep_mode: bool = False) -> None:
    """Replace `target` by `data` all at once: readers see the old file or the new one, never a part.
    `keep_mode`: the new file has the old one's permissions."""
    batch = Batch()
    try:
        batch.add(target, data, executable=None if keep_mode else False, like=target if keep_mode else None)
        batch.sync()
        batch.commit()
    finally:
        batch.discard()
    fsync_dirs([target.parent])


def fsync_dirs(directories: list[Path]) -> None:
    """Make the renames inside `directories` durable (POSIX; Windows cannot open a directory)."""
    descriptors = []
    for directory in directories:
        with contextlib.suppress(OSError):
            descriptors.append(os.open(directory, os.O_RDONLY))
    try:
        in_parallel(_fsync_quietly, descriptors)
    finally:
        for descriptor in descriptors:
            os.close(descriptor)


def _fsync_quietly(descriptor: int) -> None:
    with contextlib.suppress(OSError):  # some filesystems refuse fsync on a directory
        os.fsync(descriptor)


def in_parallel(function, items: list) -> None:
    """`function` on each item, on up to 16 threads (fsyncs: the file system commits them together); one by one
    where no thread can start (a memory limit, `ulimit -u`): slower, the same result."""
    if len(items) > 1:
        try:
            pool = ThreadPoolExecutor(max_workers=min(16, len(items)))
            with pool:
                futures = [pool.submit(function, item) for item in items]
        except RuntimeError as error:  # "can't start new thread"
            if "thread" not in str(error):
                raise
        else:
            for future in futures:
                future.result()
            return
    for item in items:
        function(item)
