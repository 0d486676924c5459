"""The one error type for input opgen cannot accept (exit code 2)."""

from __future__ import annotations

import copy


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

    def render(self) -> str:
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
        lines = [f"error: {where}{self.message}"]
        if self.source is not None and "\n" not in self.source:
            lines.append(f"  | {self.source}")
            if self.column is not None:
                lines.append("  | " + " " * (self._source_column() - 1) + "^")
        if self.hint:
            lines.append(f"  = hint: {self.hint}")
        return "\n".join(lines)

    def _source_column(self) -> int:
        return self.column if self.column is not None else 1

    def __str__(self) -> str:
        return self.render()


class SchemaError(OpgenError):
    """A schema string that does not parse, or parses but is wrong."""
