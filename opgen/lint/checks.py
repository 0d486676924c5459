"""The lint's loop: match the records of every linted file into ops (across files), then run each rule's
check over them, as `opgen.contract.check_schema` runs the contract rules over a schema.

Schema-level problems go through the parser and `opgen.contract` (one rule set); the lint rules, each
with its check and fix, live in `opgen.lint.rules` (one module per family).
"""

from __future__ import annotations

import re
from collections import defaultdict

from ..contract import Diagnostic, check_ops, check_schema
from ..schema import SchemaError, parse_schema
from ..schema.model import Schema
from ..schema.parser import span_column
from . import rules as R
from .records import Definition, FileRecord, Function, Registration, UnknownName, Where, import_root, package_of
from .rules.base import LINT_RULES, LintOp, Project, inferred_schema, qualified_name

CLASS_TYPE = re.compile(r"\b[A-Za-z_]\w*\.[A-Za-z_]\w*\.[A-Za-z_][\w.]*")


def check_records(records: list[FileRecord]) -> list[Diagnostic]:
    """Every rule over the records, matched within each import root (`records.import_root`)."""
    roots: dict[str, list[FileRecord]] = {}
    for record in records:
        roots.setdefault(import_root(record.path), []).append(record)
    return [diagnostic for group in roots.values() for diagnostic in _check_root(group)]


def _check_root(records: list[FileRecord]) -> list[Diagnostic]:
    found: list[Diagnostic] = []
    project = Project(records, by_name=defaultdict(list))
    side_effect = set()
    autograd: set = set()
    for record in records:
        side_effect |= record.side_effect_ops
        autograd |= record.autograd_ops
        project.unknown_names.extend(record.unknown_names)

    found.extend(_gather_ops(project))
    for op in project.checked_ops():
        definition = op.definition
        op.autograd = (definition.namespace, definition.name, definition.overload or "") in autograd
        op.side_effect_marked = (definition.namespace, definition.name) in side_effect \
            or project.maybe_named(op, "side_effect")
    op_rules = [r for r in LINT_RULES.values() if r.scope == "op"]
    for op in project.checked_ops():
        per_op = _contract(op)
        for lint_rule in op_rules:
            per_op.extend(lint_rule.check(op, project))
        found.extend(_without_superseded(per_op))
    for lint_rule in LINT_RULES.values():
        if lint_rule.scope == "project":
            found.extend(lint_rule.check(project))
    found.extend(_check_namespace_ops(project))
    return found


def _without_superseded(diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    """The findings of one op, less those whose premise a reported rule contradicts (`LintRule.supersedes`)."""
    reported = {d.code for d in diagnostics}
    superseded = {rule.code for code in reported if code in LINT_RULES for rule in LINT_RULES[code].supersedes}
    return [d for d in diagnostics if d.code not in superseded]


def _gather_ops(project: Project) -> list[Diagnostic]:
    """Parse every definition's schema once (OPG001 for the unreadable ones) and attach the registrations to
    their ops (a kernel or fake imported from another file is read from there). No registration is dropped:
    one no definition matches goes to an op whose definition is unseen (C++), where the rules that need no
    schema still judge its functions."""
    found: list[Diagnostic] = []
    imported: dict[tuple[str, str], Function | None] = {}
    own: dict[int, LintOp] = {}  # id(Definition) -> its op
    for record in project.records:
        for definition in record.definitions:
            schema, problem = _schema_of(definition)
            if problem is not None:
                found.append(problem)
            if schema is None and definition.schema_text is not None:
                # defined, but unreadable: its registrations go to an unseen op, none of them dangling
                project.unknown_names.append(UnknownName("definition", re.escape(qualified_name(definition)),
                                                         definition.namespace, definition.where.path))
                continue
            if definition.kernel is not None and definition.kernel.imported_from is not None:
                definition.kernel = _resolve_import(definition.kernel, imported)
            op = LintOp(definition, schema, _op_key(definition))
            own[id(definition)] = op
            project.definitions.append(op)
            project.ops.setdefault(op.key, op)
            project.by_key.setdefault(op.key, []).append(op)
            project.by_name[op.key[:2]].append(op)
    for record in project.records:
        for registration in record.registrations:
            function = registration.function
            if function is not None and function.imported_from is not None:
                registration.function = function = _resolve_import(function, imported)
            if registration.role == "fake" and function is not None and function.under_compile is not None:
                registration.function = function.under_compile  # a fake is judged as torch.compile runs it
            targets = _targets(project, own, registration)
            if not targets:
                if not project.may_be_defined(registration):
                    project.dangling.append(registration)
                targets = [_unseen_op(project, registration)]
            for op in targets:
                (op.fakes if registration.role == "fake" else op.kernels).append(registration)
    return found


def _targets(project: Project, own: dict[int, LintOp], registration: Registration) -> list[LintOp]:
    """The ops a registration belongs to: the definition that made it, else every definition of the op key
    it names (an op defined twice, each definition under its own `if`, gets the registration at both)."""
    if registration.origin is not None and id(registration.origin) in own:
        return [own[id(registration.origin)]]
    return [op for key in _matching_keys(project, registration) for op in project.by_key[key]]


def _unseen_op(project: Project, registration: Registration) -> LintOp:
    """The op a registration names whose definition no linted file shows, made on first use."""
    namespace = registration.namespace
    if namespace is None:
        namespace = ("package", package_of(registration.where.path))
    key = (namespace, registration.name, registration.overload or "")
    op = project.unseen.get(key)
    if op is None:
        stand_in = Definition(registration.namespace, registration.name, registration.overload or "",
                              registration.where, "unseen", None)
        op = project.unseen[key] = LintOp(stand_in, None, key, seen=False)
    return op


def _contract(op: LintOp) -> list[Diagnostic]:
    """The contract rules on the op's schema, placed where the part they point at is in the code."""
    definition = op.definition
    schema = op.schema
    if schema is None:
        schema = inferred_schema(definition)
    if schema is None:
        return []
    found = []
    for diagnostic in check_schema(schema, tags=definition.tags, side_effect_marked=op.side_effect_marked,
                                   style=_contract_style(definition), generating=False, autograd=op.autograd):
        if definition.style == "custom_op" and diagnostic.code == R.NOT_INFERRABLE.code:
            continue  # an explicit schema= is exactly what that rule asks for
        if diagnostic.code == R.SIDE_EFFECT_ONLY.code and not _may_have_effects(op):
            continue
        where = _schema_where(op, diagnostic.part)
        found.append(Diagnostic(diagnostic.code, diagnostic.severity, diagnostic.text(), path=where.path,
                                line=where.line, column=where.column))
    return found


def _may_have_effects(op: LintOp) -> bool:
    """Whether the op's kernels may do something a compiled graph would lose by dropping the op: not when
    each kernel the code shows is a placeholder (`pass`, `raise NotImplementedError`), nor when the code
    shows no kernel for an op it cannot place in a namespace (a runtime Library's op, defined but never
    given a kernel here)."""
    kernels = [r.function for r in op.kernels] + [op.definition.kernel]
    shown = [k for k in kernels if k is not None]
    if shown:
        return not all(k.placeholder for k in shown)
    return op.definition.namespace is not None


def _contract_style(definition: Definition) -> str | None:
    """The registration style the contract judges: vLLM's direct_register_custom_op infers the schema as
    custom_op does but defines it through a Library (so keyword-only tensors are fine)."""
    if definition.api == "direct_register_custom_op":
        return "library"
    return definition.style if definition.style in ("library", "custom_op") else None


def _check_namespace_ops(project: Project) -> list[Diagnostic]:
    """`check_ops` (the contract rules over all ops: in-place twins) on the default overloads of the Library
    ops, placed at the op's definition."""
    schemas = [op.schema for op in project.definitions if op.schema is not None
               and op.definition.style == "library" and not op.schema.overload]
    defined_at: dict[str, Where] = {}
    for op in project.ops.values():
        if op.schema is not None:
            defined_at.setdefault(op.schema.qualified_name, op.definition.where)
    found = []
    for diagnostic in check_ops(schemas):
        where = defined_at.get(diagnostic.op)
        if where is not None:
            found.append(Diagnostic(diagnostic.code, diagnostic.severity, diagnostic.text(), path=where.path,
                                    line=where.line, column=where.column))
    return found


def _resolve_import(placeholder: Function, cache: dict) -> Function | None:
    from .collect import function_in_file

    seen = set()
    function = placeholder
    while function is not None and function.imported_from is not None:  # re-exports: follow a few hops
        key = (function.imported_from, function.name)
        if key in seen or len(seen) > 4:
            return None
        seen.add(key)
        if key not in cache:
            cache[key] = function_in_file(*key)
        function = cache[key]
    return function


def _schema_of(definition: Definition) -> tuple[Schema | None, Diagnostic | None]:
    where = definition.where
    if definition.schema_text is None:
        return None, None
    try:
        return parse_schema(definition.schema_text), None
    except SchemaError as error:
        if error.message.startswith("unknown type") and CLASS_TYPE.search(definition.schema_text):
            return None, None  # a custom class / opaque type (`__torch__.torch.classes.x.Y`): torch resolves it
        column = where.column
        if definition.schema_column is not None and error.column is not None:
            column = max(definition.schema_column + error.column - 1, 1)
        hint = f" ({error.hint})" if error.hint else ""
        return None, Diagnostic(R.SCHEMA_INVALID.code, R.SCHEMA_INVALID.severity,
                                f"invalid schema: {error.message}{hint}", path=where.path, line=where.line,
                                column=column)


def _schema_where(op: LintOp, key) -> Where:
    """Where a schema part (a `span_column` key, None: the op name) is in the code."""
    where = op.definition.where
    if op.definition.schema_column is None or op.schema is None:
        return where
    column = span_column(op.schema, key or "name")
    if column is None or column <= op.definition.name_offset:  # that part is not inside the literal
        return where
    literal = op.definition.schema_literal
    return Where(where.path, literal.line if literal else where.line, op.definition.schema_column + column - 1)


def _op_key(definition: Definition) -> tuple:
    """(namespace, name, overload); an op with no readable namespace is keyed by its package instead,
    so two packages linted together that both define `f` keep both."""
    namespace = definition.namespace
    if namespace is None:
        namespace = ("package", package_of(definition.where.path))
    return (namespace, definition.name, definition.overload)


def _matching_keys(project: Project, registration: Registration) -> list[tuple]:
    """The op keys a registration's (namespace, name, overload) names among the definitions."""
    by_name = project.by_name
    if registration.namespace is None:
        return _namespace_less_keys(project, registration)
    if registration.overload is None:
        key = (registration.namespace, registration.name, "")
        if key in project.ops:
            return [key]
        # A CustomOpDef method may match by name only.
        keys = {op.key for op in by_name.get((registration.namespace, registration.name), [])}
        return list(keys) if registration.custom_op_target and len(keys) == 1 else []
    key = (registration.namespace, registration.name, registration.overload)
    if key in project.ops:
        return [key]
    # A namespace-less vLLM op (its Library built at run time) registered under its real namespace.
    keys = {op.key for op in by_name.get((("package", package_of(registration.where.path)), registration.name), [])}
    return list(keys) if len(keys) == 1 else []


def _namespace_less_keys(project: Project, registration: Registration) -> list[tuple]:
    """A registration that names no namespace: the op of that name (and overload) its own package defines."""
    matches = [op for (_, name), group in project.by_name.items() if name == registration.name for op in group]
    wanted = registration.overload if registration.overload is not None else ""
    exact = [op for op in matches if op.definition.overload == wanted]
    matches = exact or (matches if registration.overload is None else [])
    package = package_of(registration.where.path)  # another package's op of that name is another op
    return sorted({op.key for op in matches if package_of(op.definition.where.path) == package}, key=repr)
