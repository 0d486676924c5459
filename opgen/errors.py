"""The one error type for input opgen cannot accept, and the exit codes every command shares."""

from __future__ import annotations

import copy

from .colour import paint

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE = 0, 1, 2  # clean; findings (lint, explain); bad input, usage or internal error


class OpgenError(Exception):
    """Bad input: says what, where, and what to do instead.

    `source` and `column` (1-based) locate the problem inside one line of text; `path` and
    `line` locate that text inside a file when it came from one.
    """

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
            lines.append(f"  | {self.source}")
            if self.column is not None:
                lines.append("  | " + " " * (self._source_column() - 1) + paint("^", color, fg="red", bold=True))
        if self.hint:
            lines.append(f"  = {paint('hint', color, fg='cyan', bold=True)}: {self.hint}")
        return "\n".join(lines)

    def _source_column(self) -> int:
        return self.column if self.column is not None else 1

    def __str__(self) -> str:
        return self.render()
