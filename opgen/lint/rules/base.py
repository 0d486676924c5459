"""What every lint rule module shares: the rule record (doc, examples, check), and the facts a check reads.

A lint rule is registered with `lint_rule(...)` in the module of its family (registration.py: OPG2xx,
bodies.py: OPG3xx, yaml.py: OPG4xx); its check function stands right above it. `opgen.lint.checks`
gathers the facts (`Project`, `LintOp`) and runs every rule's check over them.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ...contract import Diagnostic, Rule, rule, tag_contract_problems
from ...schema.model import Schema
from ..records import Definition, FileRecord, Registration, UnknownName, Where


@dataclass(frozen=True)
class Invalid:
    source: str
    line: int
    fixed: str | None = None  # what `--fix` must turn `source` into, when the rule is fixable


# When a check runs: once per op ("op": check(op, project)), once per project ("project": check(project)),
# once per `func:` schema of an op YAML file ("yaml": check(schema)), or never (the finding comes from the
# collector, as syntax errors do).
SCOPES = ("op", "project", "yaml", None)


@dataclass(frozen=True)
class LintRule:
    rule: Rule
    valid: tuple[str, ...] = ()
    invalid: tuple[Invalid, ...] = ()
    extra: dict = field(default_factory=dict)
    opt_in: bool = False  # reported only when selected by its own code (`--select OPG207`), not by a prefix
    check: Callable[..., Iterable[Diagnostic]] | None = None
    scope: str | None = None
    supersedes: tuple[Rule, ...] = ()  # rules not reported for an op this one reports (their premise is wrong)


LINT_RULES: dict[str, LintRule] = {}


def code_example(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


_LIB = code_example("""
    import torch
    from torch.library import Library

    lib = Library("myops", "FRAGMENT")
""")


def lib_example(body: str) -> str:
    """An example that starts with the Library boilerplate above (4 lines); `body` starts on line 5."""
    return _LIB + code_example(body)


def lint_rule(code, name, severity, summary, explanation, *, valid=(), invalid=(), fixable=False,
              opt_in=False, check=None, scope=None, supersedes=()) -> Rule:
    assert scope in SCOPES and (check is None) == (scope is None), (code, scope)
    invalid = tuple(invalid)
    valid = tuple(valid)
    registered = rule(code, name, severity, summary, explanation,
                      bad=invalid[0].source.strip() if invalid else "", good=valid[0].strip() if valid else "",
                      fixable=fixable)
    LINT_RULES[code] = LintRule(registered, valid, invalid, opt_in=opt_in, check=check, scope=scope,
                                supersedes=tuple(supersedes))
    return registered


# --- the facts the checks read ------------------------------------------------------------------------


def inferred_schema(definition: Definition) -> Schema | None:
    """The schema torch infers for a custom_op from its kernel's type hints (used where no `schema=` parses); None
    for any other definition, or when torch would refuse the hints."""
    if definition.style != "custom_op" or definition.kernel is None:
        return None
    from ...schema.infer import infer_schema

    name = f"{definition.namespace}::{definition.name}" if definition.namespace else definition.name
    name += f".{definition.overload}" if definition.overload else ""
    return infer_schema(name, definition.kernel.params, definition.kernel.returns_annotation,
                        definition.mutates_args, definition.tags or ())


class LintOp:
    """What is known about one op across files: its definition, parsed schema, kernels and fakes; `name`
    as messages show it; `side_effect_marked`, `autograd`: marked has_side_effect / given a formula; `seen`:
    whether a linted file defines it."""

    __slots__ = ("autograd", "definition", "fakes", "kernels", "key", "name", "schema", "seen", "side_effect_marked")

    def __init__(self, definition: Definition, schema: Schema | None, key: tuple, *, seen: bool = True) -> None:
        self.definition = definition
        self.schema = schema
        self.key = key
        self.kernels: list[Registration] = []
        self.fakes: list[Registration] = []
        name = f"{definition.namespace}::{definition.name}" if definition.namespace else definition.name
        self.name = name + ("." + definition.overload if definition.overload else "")
        self.side_effect_marked = False
        self.autograd = False
        self.seen = seen  # False: no linted file defines the op (C++ or unreadable); `definition` is a stand-in


@dataclass
class Project:
    """Every linted file's records, matched: `definitions` in order (a redefinition too), `ops` the first
    definition of each op by key, `by_key` every definition of each key, `by_name` (namespace, name) -> its
    overloads, `unseen` the ops registrations name whose definition no linted file shows (defined in C++,
    or by a define opgen cannot read), `dangling` the registrations no definition matched (each is also on
    an unseen op), `unknown_names` the registrations and definitions whose op name we could not read in full
    (each makes the ops it may name unknown, nothing more)."""

    records: list[FileRecord]
    definitions: list[LintOp] = field(default_factory=list)
    ops: dict[tuple, LintOp] = field(default_factory=dict)
    by_key: dict[tuple, list[LintOp]] = field(default_factory=dict)
    by_name: dict[tuple, list[LintOp]] = field(default_factory=dict)
    unseen: dict[tuple, LintOp] = field(default_factory=dict)
    dangling: list[Registration] = field(default_factory=list)
    unknown_names: list[UnknownName] = field(default_factory=list)
    _host_returns: dict[str, set[str]] | None = None

    def maybe_named(self, op: LintOp, what: str) -> bool:
        """Whether a `what` ("fake", "side_effect") whose name we could not read may be for `op`."""
        qualified = qualified_name(op.definition)
        return any(u.what == what and u.may_name(qualified, op.definition.where.path) for u in self.unknown_names)

    def may_be_defined(self, registration: Registration) -> bool:
        """Whether a definition we could not read may define the op a registration names."""
        qualified = qualified_name(registration)
        return any(u.what == "definition" and u.may_name(qualified, registration.where.path)
                   for u in self.unknown_names)

    def host_returns(self, path: str) -> set[str]:
        """The names the kernels registered in a file return holding a host tensor they made."""
        if self._host_returns is None:
            self._host_returns = {}
            for op in self.checked_ops():
                for function in [r.function for r in op.kernels] + [op.definition.kernel]:
                    if function is not None and function.host_returns:
                        self._host_returns.setdefault(function.where.path, set()).update(function.host_returns)
        return self._host_returns.get(path, set())

    def checked_ops(self) -> list[LintOp]:
        """What the per-op rules run over: every definition (an op defined twice, under `if`/`else` or in two
        files, is checked at each), then the ops whose definition is unseen."""
        return [*self.definitions, *self.unseen.values()]


def qualified_name(named: Definition | Registration) -> str:
    """`ns::name` or `ns::name.overload` (`::name` when the code shows no namespace), as UnknownName patterns
    match it."""
    overload = f".{named.overload}" if named.overload else ""
    return f"{named.namespace or ''}::{named.name}{overload}"


def diag(rule_: Rule, message: str, where: Where, *, fix=None, severity: str | None = None) -> Diagnostic:
    return Diagnostic(rule_.code, severity or rule_.severity, message, path=where.path, line=where.line,
                      column=where.column, fix=fix)


def loc(where: Where) -> str:
    return f"{where.path}:{where.line}"


def unique(findings):
    """Findings with one per (line, what)."""
    seen = set()
    for finding in findings:
        if (finding.line, finding.what) not in seen:
            seen.add((finding.line, finding.what))
            yield finding


def write_convention(schema: Schema) -> str | None:
    """"out" or "inplace" (or "aten": ATen's convention, which no tag's contract covers) when the schema is ATen's out / in-place convention (`foo.out(..., *, Tensor(a!) out)
    -> Tensor(a!)`, `foo_(Tensor(a!) self, ...) -> Tensor(a!)`): it returns the tensors it writes, exactly as
    torch.Tag.out / torch.Tag.inplace require, so adding that tag is all it takes to be compile-safe."""
    aliased = [r for r in schema.returns if r.alias is not None]
    if not aliased or not all(r.alias.is_write for r in aliased):
        return None
    for tag in ("out", "inplace"):
        if not tag_contract_problems(schema, tag):
            return tag
    written = {letter for a in schema.mutated_args for letter in a.alias.before}
    # ATen's convention more widely (torchgen accepts it: `foo.out(Tensor(a!) self, *, Tensor(b!) out) ->
    # Tensor(b!)`): every aliased return is an argument the op writes; no tag takes it.
    return "aten" if all(set(r.alias.before) <= written for r in aliased) else None
