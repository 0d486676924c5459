"""Torch-free operator schema model, parser and type tables."""

from .errors import OpgenError, SchemaError
from .model import Alias, Argument, BaseType, ListType, OptionalType, Return, Schema
from .parser import parse_schema

__all__ = [
    "Alias", "Argument", "BaseType", "ListType", "OpgenError", "OptionalType", "Return", "Schema",
    "SchemaError", "parse_schema",
]
