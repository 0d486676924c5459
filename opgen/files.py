"""Reading the files a user points opgen at: regular files only (a FIFO would block forever, /dev/zero never
end), at most a documented size, decoded as UTF-8 with the place of a bad byte; every refusal says why.

`read_limited` is the one reader (lint turns its refusals into findings, the other commands into errors
through `read_input`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from .errors import OpgenError, os_error

try:
    import fcntl
except ImportError:  # Windows: no advisory locks; the compare before each replace still guards a rewrite
    fcntl = None

MAX_INPUT_BYTES = 32 << 20  # a spec, an --inputs file, an op-plugin YAML or Python file: real ones are < 1 MiB


class CannotRead(Exception):
    """Why a file was not read: `reason` (a phrase: "is a named pipe (FIFO)", "is 40.0 MiB, above ..."); `special`
    for a FIFO, device, socket or directory, `missing` for a name that leads nowhere (a dangling symlink),
    `too_large` for a file above the limit, `error` the OSError otherwise."""

    def __init__(self, reason: str, *, special: bool = False, missing: bool = False, too_large: bool = False,
                 error: OSError | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.special = special
        self.missing = missing
        self.too_large = too_large
        self.error = error


def special_kind(mode: int) -> str | None:
    """What a non-regular file is, in words; None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    for test, words in ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
                        (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory")):
        if test(mode):
            return words
    return None if stat.S_ISREG(mode) else "not a regular file"


def cache_root() -> Path:
    """Where opgen keeps what it fetched or computed once: $OPGEN_CACHE_DIR, else $XDG_CACHE_HOME/opgen, else
    ~/.cache/opgen."""
    if os.environ.get("OPGEN_CACHE_DIR"):
        return Path(os.environ["OPGEN_CACHE_DIR"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "opgen"


def megabytes(size: int) -> str:
    return f"{size / (1 << 20):.1f} MiB"


def read_limited(path: str | os.PathLike, limit: int = MAX_INPUT_BYTES) -> bytes:
    """The bytes of the regular file `path`, at most `limit` of them; CannotRead otherwise. The file is opened
    without blocking and checked on the open descriptor, so a FIFO swapped in after a check cannot hang it."""
    try:
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except FileNotFoundError as error:
        reason = "is a symbolic link to nothing" if os.path.islink(path) else "does not exist"
        raise CannotRead(reason, missing=True, error=error) from None
    except OSError as error:
        raise CannotRead(error.strerror or str(error), error=error) from None
    try:
        info = os.fstat(descriptor)
        kind = special_kind(info.st_mode)
        if kind is not None:
            raise CannotRead(f"is {kind}, not a regular file", special=True)
        if info.st_size > limit:
            raise CannotRead(f"is {megabytes(info.st_size)}, above opgen's limit of {megabytes(limit)}",
                             too_large=True)
        # The first read asks for the size fstat gave, and one byte more (a file that grew): a fixed 1 MiB request
        # allocates and returns 1 MiB of memory for every file read, most of them a few KiB.
        chunks, size, wanted = [], 0, info.st_size + 1
        while size <= limit:
            chunk = os.read(descriptor, min(max(wanted - size, 1 << 16), limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:  # it grew while being read
            raise CannotRead(f"is above opgen's limit of {megabytes(limit)}", too_large=True)
        return b"".join(chunks)
    except OSError as error:
        raise CannotRead(error.strerror or str(error), error=error) from None
    finally:
        os.close(descriptor)


def read_digest(data: bytes) -> str:
    """The sha256 of bytes read, to tell later whether a file still holds them (before rewriting it in place)."""
    return hashlib.sha256(data).hexdigest()


def decode_utf8(data: bytes, path: str) -> str:
    """`data` as text; a byte that is not UTF-8 is an error at its line and column (counted in bytes) and
    offset."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        start = error.start
        line = data.count(b"\n", 0, start) + 1
        column = start - (data.rfind(b"\n", 0, start) + 1) + 1
        encoding = "UTF-16" if data[:2] in (b"\xff\xfe", b"\xfe\xff") else "another encoding"
        raise OpgenError(f"not UTF-8: byte 0x{data[start]:02x} at offset {start} ({error.reason})", path=path,
                         line=line, column=column,
                         hint=f"the file is in {encoding}; save it as UTF-8 (e.g. iconv -t utf-8)") from None


def read_input(path: str, what: str, limit: int = MAX_INPUT_BYTES) -> str:
    """The text of an input file (`what`: "spec file", ...), or an OpgenError saying why it cannot be read."""
    try:
        data = read_limited(path, limit)
    except CannotRead as refusal:
        if refusal.error is not None and not refusal.missing:
            raise os_error(refusal.error, "read", f"{what} {path}") from None
        hint = {True: "give the path of a regular file"}.get(refusal.special)
        if refusal.missing:
            hint = "check the path"
        elif refusal.too_large:
            hint = f"opgen reads {what}s of up to {megabytes(limit)}; is this the right file?"
        raise OpgenError(f"{what} {path} {refusal.reason}", hint=hint) from None
    return decode_utf8(data, path)


@contextlib.contextmanager
def exclusive_lock(path: str | os.PathLike) -> Iterator[bool]:
    """Hold an exclusive advisory lock (flock) on `path`, a file or a directory, for the block: another opgen that
    rewrites it waits. A file replaced by a rename while this one waited is a new file, so it is locked again; the
    block gets True when it holds the lock, False where `path` cannot be opened or locked (then the caller's
    compare before replace is the only guard)."""
    descriptor = _locked_descriptor(path)
    try:
        yield descriptor is not None
    finally:
        if descriptor is not None:
            os.close(descriptor)


def _locked_descriptor(path: str | os.PathLike) -> int | None:
    if fcntl is None:
        return None
    while True:
        try:
            descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            return None
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
            locked, now = os.fstat(descriptor), os.stat(path)
        except OSError:
            os.close(descriptor)
            return None
        if (locked.st_dev, locked.st_ino) == (now.st_dev, now.st_ino):
            return descriptor
        os.close(descriptor)  # replaced while we waited: lock the file that is there now
