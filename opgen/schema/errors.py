"""Schema errors: an `OpgenError` located in a schema string."""

from __future__ import annotations

from ..errors import OpgenError

__all__ = ["OpgenError", "SchemaError"]


class SchemaError(OpgenError):
    """A schema string that does not parse, or parses but is wrong."""
