"""The one error type for input opgen cannot accept, the machine faults it reports the same way, and the exit
codes every command shares."""

from __future__ import annotations

import copy
import errno
import os

from .colour import paint

# clean; findings (lint, explain, check); bad input, usage or internal error; the environment refused (disk full,
# read-only file system, file size limit, no permission, out of memory): the input was fine, re-run once it is fixed
EXIT_OK, EXIT_FINDINGS, EXIT_USAGE, EXIT_ENVIRONMENT = 0, 1, 2, 3


class OpgenError(Exception):
    """Bad input: says what, where, and what to do instead.

    `source` and `column` (1-based) locate the problem inside one line of text; `path` and
    `line` locate that text inside a file when it came from one.
    """

    exit_code = EXIT_USAGE

    def __init__(
        self,
        message: str,
        *,
        source: str | None = None,
        column: int | None = None,
        hint: str | None = None,
        path: str | None = None,
        line: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.source = source
        self.column = column
        self.hint = hint
        self.path = path
        self.line = line

    def located(self, *, path: str | None = None, line: int | None = None, column_offset: int = 0,
                source: str | None = None) -> OpgenError:
        """The same error (same class, same extra fields) placed inside a file, e.g. a schema string
        found at `path:line`; `source` replaces the quoted line so the caret stays under the column."""
        placed = copy.copy(self)
        placed.column = None if self.column is None else self.column + column_offset
        placed.path = path if path is not None else self.path
        placed.line = line if line is not None else self.line
        placed.source = source if source is not None else self.source
        return placed

    def render(self, color: bool = False) -> str:
        """The message, where it is, the quoted source with a caret, and the hint; `color` styles the
        labels (click.echo drops the styling when the stream is not a terminal)."""
        where = ""
        if self.path:
            where = self.path
            if self.line is not None:
                where += f":{self.line}"
                if self.column is not None:
                    where += f":{self.column}"
            where += ": "
        elif self.column is not None:
            where = f"column {self.column}: "
        lines = [f"{paint('error', color, fg='red', bold=True)}: {where}{self.message}"]
        if self.source is not None and "\n" not in self.source:
            shown, column = _window(self.source, self._source_column())
            lines.append(f"  | {shown}")
            if self.column is not None:
                lines.append("  | " + " " * (column - 1) + paint("^", color, fg="red", bold=True))
        if self.hint:
            lines.append(f"  = {paint('hint', color, fg='cyan', bold=True)}: {self.hint}")
        return "\n".join(lines)

    def _source_column(self) -> int:
        return self.column if self.column is not None else 1

    def __str__(self) -> str:
        return self.render()


_QUOTED = 100  # characters of a long source line quoted around the caret


def _window(source: str, column: int) -> tuple[str, int]:
    """The part of a long `source` line around `column` (1-based), elided with "...", and the caret's column in it."""
    if len(source) <= _QUOTED + 20:
        return source, column
    start = max(0, min(column - 1 - _QUOTED // 2, len(source) - _QUOTED))
    end = start + _QUOTED
    shown = ("..." if start else "") + source[start:end] + ("..." if end < len(source) else "")
    return shown, column - start + (3 if start else 0)


class EnvironmentFault(OpgenError):
    """The machine refused what opgen had to do (a full disk, a read-only file system, a size limit): the input was
    fine; the command exits with EXIT_ENVIRONMENT."""

    exit_code = EXIT_ENVIRONMENT


# errno -> (is it the environment's fault, what to do)
_OS_ERRORS = {
    errno.ENOSPC: (True, "free some space on that file system and re-run"),
    errno.EDQUOT: (True, "your disk quota is used up: free some space and re-run"),
    errno.EROFS: (True, "the file system is read-only: choose a writable location, or remount it read-write"),
    errno.EFBIG: (True, "a file size limit stopped the write (`ulimit -f`): raise it and re-run"),
    errno.EACCES: (True, "you have no permission there: choose another location or fix the permissions"),
    errno.EPERM: (True, "the operation is not permitted there: choose another location or fix the permissions"),
    errno.EIO: (True, "the device reported an I/O error: check the disk"),
    errno.EMFILE: (True, "too many open files: raise the limit (`ulimit -n`) and re-run"),
    errno.ENFILE: (True, "the system has too many open files: re-run when fewer are open"),
    errno.ENOMEM: (True, "the system is out of memory"),
    errno.EBUSY: (True, "the file or device is busy: re-run when it is free"),
    errno.ETXTBSY: (True, "the file is in use by a running program"),
    errno.ENAMETOOLONG: (False, "a name is too long for the file system (most allow 255 bytes): choose shorter names"),
    errno.ENOENT: (False, "a directory on the way does not exist"),
    errno.ENOTDIR: (False, "a part of the path is not a directory"),
    errno.EISDIR: (False, "it is a directory, not a file"),
    errno.ELOOP: (False, "a symbolic link on the way points back to itself"),
    errno.EEXIST: (False, "something is already there"),
}


def os_error(error: OSError, action: str, path: object = None, *, outcome: str = "") -> OpgenError:
    """A located error for an OSError met while trying to `action` ("read", "write", ...) `path` (default: the
    error's file name): an EnvironmentFault for a machine fault (exit 3), else bad input (exit 2). `outcome` says
    what state the run left ("nothing was written")."""
    where = path if path is not None else error.filename
    environment, hint = _OS_ERRORS.get(error.errno, (False, None))
    reason = error.strerror or (os.strerror(error.errno) if error.errno else str(error)) or type(error).__name__
    message = f"cannot {action} {where}: {reason}" if where is not None else f"cannot {action}: {reason}"
    if outcome:
        message += f" ({outcome})"
    kind = EnvironmentFault if environment else OpgenError
    return kind(message, hint=hint)
