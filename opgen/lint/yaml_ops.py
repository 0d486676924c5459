"""Lint op_plugin / native_functions style YAML: every `func:` entry's schema, with line and column.

The file is scanned line by line rather than loaded with a YAML parser: only `func:` values matter,
positions must be exact, and a scan is much faster. Schemas are checked by the schema parser and
`opgen.contract.check_schema` under ATen conventions (torchgen generates functionalization for these
ops, so `-> Tensor(a!)` returning the written argument is the convention, not a mistake).
"""

from __future__ import annotations

import re

from ..contract import RULES, Diagnostic, check_ops, check_schema
from ..schema import SchemaError, parse_schema
from . import rules as R
from .collect import source_lines
from .rules.base import LINT_RULES

FUNC = re.compile(r"^(?P<lead>\s*(?:-\s+)?func:\s*)(?P<value>\S.*?)\s*(?:#.*)?$")
YAML_NAME = re.compile(r"(^|/)[^/]*functions[^/]*\.ya?ml$")
YAML_RULES = [r for r in LINT_RULES.values() if r.scope == "yaml"]
# Contract rules marked `aten_yaml=False` are left out (see their definitions for why).


def is_op_yaml(path: str, head: bytes) -> bool:
    return bool(YAML_NAME.search(path.replace("\\", "/"))) or b"- func:" in head or b"\nfunc:" in head


def func_entries(text: str) -> list[tuple[int, int, str]]:
    """(line, 1-based column, value) of every `func:` entry, quotes removed."""
    entries = []
    for number, line in enumerate(source_lines(text), 1):
        if "func:" not in line:
            continue
        match = FUNC.match(line)
        if not match:
            continue
        value = match.group("value")
        column = match.start("value") + 1
        if value[0] in "'\"" and value.endswith(value[0]) and len(value) >= 2:
            value = value[1:-1]
            column += 1
        entries.append((number, column, value))
    return entries


# An op named, not declared: `aten::add.Tensor`, `clone`, `npu_foo.out`.
OP_REFERENCE = re.compile(r"^[A-Za-z_]\w*(?:::[A-Za-z_]\w*)?(?:\.\w+)?$")


def is_op_reference(value: str) -> bool:
    """Whether a `func:` value names an op instead of declaring its schema. Some files use the key for
    references: ExecuTorch's edge.yaml (`func: aten::add.Tensor`, with `inherits:` and type constraints),
    torch_npu's npu_native_functions.yaml (`func: clone` for an ATen op it implements). A schema has an
    argument list and `->`; a bare (qualified) name is a reference and is not checked."""
    return OP_REFERENCE.match(value) is not None


def lint_yaml(path: str, text: str) -> list[Diagnostic]:
    entries = [entry for entry in func_entries(text) if not is_op_reference(entry[2])]
    found: list[Diagnostic] = []
    schemas = []
    for number, column, value in entries:
        try:
            schema = parse_schema(value)
        except SchemaError as error:
            hint = f" ({error.hint})" if error.hint else ""
            found.append(Diagnostic(R.SCHEMA_INVALID.code, R.SCHEMA_INVALID.severity, f"invalid schema: "
                                    f"{error.message}{hint}", path=path, line=number,
                                    column=column + (error.column or 1) - 1))
            continue
        schemas.append((schema, number, column))
        found.extend(_schema_problems(path, schema, number, column))
    # check_ops compares `foo` with `foo_`: their default overloads.
    positions = {}
    for schema, number, column in schemas:
        positions.setdefault(schema.qualified_name, (number, column))
    for diagnostic in check_ops([s for s, _, _ in schemas if not s.overload]):
        if diagnostic.op in positions:
            number, column = positions[diagnostic.op]
            found.append(Diagnostic(diagnostic.code, diagnostic.severity, diagnostic.text(), path=path, line=number,
                                    column=column))
    return found


def _schema_problems(path: str, schema, number: int, column: int) -> list[Diagnostic]:
    """The contract rules (under ATen conventions) and the YAML rules on one entry."""
    found = []
    tags = ("out",) if _aliases_match_written_args(schema) else ()
    for diagnostic in check_schema(schema, tags=tags, style="library", generating=False):
        if RULES[diagnostic.code].aten_yaml:
            found.append(Diagnostic(diagnostic.code, diagnostic.severity, diagnostic.text(), path=path,
                                    line=number, column=column))
    for lint_rule in YAML_RULES:
        for problem in lint_rule.check(schema):
            found.append(Diagnostic(lint_rule.rule.code, lint_rule.rule.severity, f"{schema.op_name}: {problem}",
                                    path=path, line=number, column=column))
    return found


def _aliases_match_written_args(schema) -> bool:
    """ATen's conventions for aliased returns: the written arguments returned (out / in-place: the same
    convention `write_convention` recognises in Python defines, which torch.Tag.out / inplace make
    compile-safe there) and views returning a read-only alias of an argument; torchgen generates the
    functionalization of all of them for YAML-defined ops."""
    written = {letter for a in schema.mutated_args for letter in a.alias.before}
    viewed = {letter for a in schema.arguments if a.alias for letter in a.alias.before}
    for ret in schema.returns:
        alias = ret.alias
        if alias is None:
            continue
        if alias.is_write and not set(alias.before) <= written:
            return False
        if not alias.is_write and not set(alias.before) <= viewed:
            return False
    return True

