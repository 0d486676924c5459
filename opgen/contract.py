"""The rules every operator must satisfy, shared by `opgen new`, `opgen explain` and `opgen lint`.

Each rule lives once, in `RULES`, with its code, severity, one-line summary, the reasoning
(`opgen explain --code`), and a bad and a good example. `check_schema` applies the rules that
can be decided from one schema; `check_ops` adds the ones that need every op of a namespace.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

from .registration_styles import STYLES
from .schema.model import BaseType, Schema, is_tensor_like, strip_alias
from .schema.types import custom_op_can_infer, inferred_return_ok

ERROR, WARNING, INFO = "error", "warning", "info"


@dataclass(frozen=True)
class SchemaFacts:
    """What is known about an op besides its schema. `tags`: the `torch.Tag` names it is defined with
    ("inplace", "out"), None when unknown (lint could not read them: neither assumed present nor absent);
    `style`: "custom_op" or "library" when known; `generating`: False when linting existing code;
    `autograd`: it gets a backward formula; `op`: its name as messages show it."""

    op: str
    tags: tuple[str, ...] | None = ()
    side_effect_marked: bool = False
    style: str | None = None
    generating: bool = True
    autograd: bool = False

    @property
    def known_tags(self) -> tuple[str, ...]:
        """The tags known to be there (none when unknown)."""
        return self.tags if self.tags is not None else ()

    @property
    def possible_tags(self) -> set[str]:
        """The aliasing tags that may be there (all of them when unknown)."""
        return set(ALIASING_TAGS) if self.tags is None else set(self.tags) & set(ALIASING_TAGS)


@dataclass(frozen=True)
class Rule:
    """One rule: its code, documentation and examples (`opgen explain --code`), and for the rules that a
    schema alone decides, `check(schema, facts)` yielding its diagnostics. `generated_only`: applies to
    code opgen generates, not to hand-written code under lint; `fatal_styles`: generation refuses an op
    in these registration styles even when the severity is below error; `aten_yaml`: False for the rules
that concern Python registration styles only, which lint leaves out for op_plugin / native YAML."""

    code: str
    name: str
    severity: str
    summary: str
    explanation: str
    bad: str = ""
    good: str = ""
    fixable: bool = False
    check: Callable[[Schema, SchemaFacts], Iterator[Diagnostic]] | None = field(default=None, compare=False)
    generated_only: bool = False
    fatal_styles: frozenset[str] = frozenset()
    aten_yaml: bool = True  # applies to ATen-convention YAML (op_plugin / native_functions `func:` entries)


@dataclass(frozen=True)
class Diagnostic:
    """A finding. `op` names the operator it is about; `part` says where in its schema (a `span_column`
    key: "name", "returns" or ("arg", name); None: the whole schema)."""

    code: str
    severity: str
    message: str
    hint: str = ""
    path: str | None = None
    line: int | None = None
    column: int | None = None
    fix: object | None = field(default=None, compare=False)
    op: str | None = field(default=None, compare=False)
    part: object = field(default=None, compare=False)

    def as_dict(self) -> dict:
        data = {"code": self.code, "severity": self.severity, "message": self.message}
        if self.hint:
            data["hint"] = self.hint
        for key in ("path", "line", "column"):
            if getattr(self, key) is not None:
                data[key] = getattr(self, key)
        return data

    def text(self) -> str:
        """The message and its hint on one line (lint findings, warnings printed by `opgen new`)."""
        return f"{self.message}; {self.hint}" if self.hint else self.message


RULES: dict[str, Rule] = {}


def rule(code: str, name: str, severity: str, summary: str, explanation: str, bad: str = "", good: str = "",
         fixable: bool = False, *, check=None, generated_only: bool = False,
         fatal_styles: frozenset[str] = frozenset(), aten_yaml: bool = True) -> Rule:
    if code in RULES:
        raise ValueError(f"duplicate rule code {code}")
    RULES[code] = Rule(code, name, severity, summary, explanation.strip(), bad, good, fixable, check, generated_only,
                       fatal_styles, aten_yaml)
    return RULES[code]


def diag(rule_: Rule, message: str, hint: str = "", severity: str | None = None, *, op: str | None = None,
         part: object = None) -> Diagnostic:
    return Diagnostic(rule_.code, severity or rule_.severity, message, hint, op=op, part=part)


RESERVED = {"prim": ERROR, "aten": ERROR, "torch": ERROR, "_": ERROR, "prims": ERROR, "inductor": WARNING,
            "higher_order": ERROR, "_c10d_functional": WARNING}
# The torch.Tag names whose contract opgen knows (and generates): they allow aliased returns.
ALIASING_TAGS = ("inplace", "out")


# --- the rules ------------------------------------------------------------------------------------
# A schema rule's check function stands right above its rule: `check(schema, facts)` yields diagnostics.


SCHEMA_INVALID = rule(
    "OPG001", "invalid-schema", ERROR, "the schema string does not parse (or parses to something wrong)",
    """
torch either refuses the string or, worse, accepts it and reads something else (`int x=0x10` is 0,
`int y=1.5` is kept as a float). The message gives the column and what was expected.
""", bad="f(Tensor x, int y=1.5) -> Tensor", good="f(Tensor x, int y=1) -> Tensor")

def shared_alias_sets(schema: Schema) -> dict[str, list[str]]:
    """The alias sets that more than one mutated argument is written in: letter -> argument names."""
    letters: dict[str, list[str]] = defaultdict(list)
    for arg in schema.mutated_args:
        for letter in arg.alias.before:
            if letter != "*":
                letters[letter].append(arg.name)
    return {letter: names for letter, names in letters.items() if len(names) > 1}


def _shared_alias_set(schema: Schema, facts: SchemaFacts) -> Iterator[Diagnostic]:
    for letter, names in shared_alias_sets(schema).items():
        fresh = _fresh_letters(schema, len(names) - 1)
        yield diag(SHARED_ALIAS_SET, f"{facts.op}: arguments {', '.join(map(repr, names))} share alias set "
                   f"'{letter}': they may be the same storage (torch accepts this)", hint="if they never alias, "
                   "the usual spelling gives each its own letter, e.g. "
                   + ", ".join(f"Tensor({c}!) {n}" for c, n in zip([letter, *fresh], names)),
                   op=facts.op, part=("arg", names[1]))


SHARED_ALIAS_SET = rule(
    "OPG101", "shared-alias-set", INFO, "two mutated arguments share one alias set (allowed: they may alias)",
    """
`Tensor(a!) x, Tensor(a!) y` declares that the two written tensors may be the same storage. torch
2.13 accepts it in both registration styles (`Library.define`, `custom_op(..., schema=...)`) and at
every stage: the eager call, every `torch.library.opcheck` test, and `torch.compile(fullgraph=True)`
(aot_eager and inductor) give the eager result, even for the same tensor passed twice or overlapping
views; torch's own `symm_mem::all_to_all_vdev` is written this way. torch only warns (opcheck's
test_schema): "alias::a appears twice in same argument list which will make aliasing checks more
conservative". Nothing breaks, so this is a note, not a finding: `opgen lint` does not report it and
`opgen new` generates the op as written. One letter per tensor (`Tensor(a!) x, Tensor(b!) y`) is the
usual spelling and the only one `custom_op` infers from type hints, so opgen passes a shared set to
`custom_op` explicitly (`schema=`).
""", bad="f(Tensor(a!) x, Tensor(a!) y) -> ()", good="f(Tensor(a!) x, Tensor(b!) y) -> ()", check=_shared_alias_set,
    generated_only=True)

def _aliased_return(schema: Schema, facts: SchemaFacts) -> Iterator[Diagnostic]:
    if facts.possible_tags:
        return
    for index, ret in enumerate(schema.returns):
        if ret.alias is not None:
            label = f"return {ret.name!r}" if ret.name else f"return {index}"
            yield diag(ALIASED_RETURN, f"{facts.op}: {label} '{ret.type}' aliases an input, which torch.compile "
                       "cannot functionalize", hint="return nothing ('-> ()') or a fresh tensor; or tag the op "
                       "torch.Tag.inplace / torch.Tag.out (torch >= 2.13)", op=facts.op, part="returns")


ALIASED_RETURN = rule(
    "OPG102", "aliased-return", ERROR, "a return aliases an input (`-> Tensor(a!)` or `Tensor(a)`)",
    """
torch.compile functionalizes custom ops; it cannot functionalize a custom op whose output carries
an alias annotation and fails with "Found a custom (non-ATen) operator whose output has alias
annotations". Return nothing (`-> ()`; the caller still sees the mutated tensor) or return a fresh
tensor. `-> Tensor(a!)` is only supported with `tags=torch.Tag.inplace` (or `torch.Tag.out` for
`.out` overloads), which needs a torch that has those tags (2.13+).
""", bad="scale_(Tensor(a!) x, float s) -> Tensor(a!)", good="scale_(Tensor(a!) x, float s) -> ()", check=_aliased_return)

def _underscore_not_inplace(schema: Schema, facts: SchemaFacts) -> Iterator[Diagnostic]:
    if schema.name.endswith("_") and not schema.name.endswith("__"):
        first = schema.positional[0] if schema.positional else None
        if first is None or not first.is_write:
            yield diag(UNDERSCORE_NOT_INPLACE, f"{facts.op}: the trailing '_' says in-place, but the first "
                       "argument is not mutated", hint=f"rename to '{schema.name.rstrip('_')}' or declare "
                       "the first argument 'Tensor(a!)'", op=facts.op, part="name")


UNDERSCORE_NOT_INPLACE = rule(
    "OPG103", "underscore-not-inplace", ERROR, "a name ending in `_` whose first argument is not mutated",
    """
A trailing underscore means "in-place on the first argument" to PyTorch's passes: the reinplacing
pass of torch.fx (used by npugraph_ex) asserts "First argument of inplace op must be mutable" when it
meets such an op. Drop the underscore or declare the first argument `Tensor(a!)`.
""", bad="scale_(Tensor x, float s) -> Tensor", good="scale(Tensor x, float s) -> Tensor", check=_underscore_not_inplace)

def _side_effect_only(schema: Schema, facts: SchemaFacts) -> Iterator[Diagnostic]:
    if not schema.returns and not schema.varret and not schema.is_mutable and not facts.side_effect_marked:
        hint = ("mark it with torch.fx.node.has_side_effect(op), or list the tensors it writes in mutates_args"
                if facts.style and STYLES[facts.style].mutation_declared_by == "mutates_args" and not facts.generating
                else "mark it with "
                "torch.fx.node.has_side_effect(op) (opgen new does this), or declare the tensors it writes as Tensor(a!)")
        yield diag(SIDE_EFFECT_ONLY, f"{facts.op}: returns nothing and mutates nothing, so compiled graphs drop it",
                   hint=hint, op=facts.op, part="returns")


SIDE_EFFECT_ONLY = rule(
    "OPG104", "side-effect-only", WARNING, "returns nothing and mutates nothing: mark it side-effecting",
    """
An op that returns nothing and mutates no argument only acts outside the graph (a prefetch, a
collective, a log). Unless it is marked with `torch.fx.node.has_side_effect(op)`, dead-code
elimination drops it from every compiled graph. `opgen new` emits that call for such ops.
""", bad="prefetch(Tensor x) -> ()", good="prefetch(Tensor x) -> ()  +  has_side_effect(torch.ops.ns.prefetch.default)", check=_side_effect_only, aten_yaml=False)

INPLACE_TWIN = rule(
    "OPG105", "inplace-twin", WARNING, "`foo_` is not a true in-place form of `foo`, but the compiler may swap them",
    """
npugraph_ex's default `inplace_pass` (torch.fx reinplace) looks up `ns::foo_` for every `ns::foo` in
the graph. When the argument types match position by position it substitutes `foo_` on dead
intermediates, so `foo_` must then be exactly the in-place form of `foo`: arguments with different
names (after the first) suggest it is not. When `foo_` mutates more than its first argument, the
pass fails with "Remaining arguments of inplace op must not be mutable". Rename one of the two, or
make `foo_` the true in-place form (same arguments, only the first mutated). Pairs whose argument
types differ are never swapped and are fine.
""", bad="scale(Tensor x, float factor) -> Tensor  and  scale_(Tensor(a!) x, float eps) -> ()",
    good="scale(Tensor x, float factor) -> Tensor  and  scale_(Tensor(a!) x, float factor) -> ()")

def _style_can(style: str | None, capability: str) -> bool:
    """Whether registration style `style` can do `capability` (a RegistrationStyle field); an unknown style
    (linted code whose style is not known) is assumed to be the one that cannot."""
    return bool(style) and getattr(STYLES[style], capability)


def _kwarg_only_tensor(schema: Schema, facts: SchemaFacts) -> Iterator[Diagnostic]:
    kw_tensors = [a.name for a in schema.kwarg_only if is_tensor_like(a.type)]
    if kw_tensors and "out" not in facts.possible_tags and not _style_can(facts.style, "keyword_only_tensors"):
        yield diag(KWARG_ONLY_TENSOR, f"{facts.op}: keyword-only tensor argument(s) "
                   f"{', '.join(map(repr, kw_tensors))} cannot be registered with custom_op",
                   hint=KWARG_ONLY_HINTS[facts.generating], op=facts.op, part=("arg", kw_tensors[0]))


# how to get such an op anyway: from a spec (generation refuses it for custom_op), or in code under lint
KWARG_ONLY_HINTS = {
    True: "the Library style registers them: set `style: library` in the spec (or pass `--style library` to "
          "`opgen new`); or make them positional",
    False: "the Library style registers them: torch.library.Library(ns, \"FRAGMENT\") with define() and impl() "
           "instead of custom_op; or make them positional",
}


KWARG_ONLY_TENSOR = rule(
    "OPG106", "kwarg-only-tensor", WARNING, "keyword-only Tensor argument: only the Library style can register it",
    """
`torch.library.custom_op` refuses keyword-only Tensor arguments ("custom_op with kwarg-only Tensor
args") unless the op is tagged `torch.Tag.out`, and `register_autograd` refuses them too. The Library
style (`Library.define` + `impl`) registers them: generate with `style: library` in the spec, or
`opgen new SPEC --style library`; or make the tensor positional.
""", bad="f(Tensor x, *, Tensor bias) -> Tensor", good="f(Tensor x, Tensor? bias=None) -> Tensor", check=_kwarg_only_tensor, fatal_styles=frozenset({"custom_op"}), aten_yaml=False)

def _not_inferrable(schema: Schema, facts: SchemaFacts) -> Iterator[Diagnostic]:
    if not facts.style or STYLES[facts.style].infers_schema:
        reasons = custom_op_explicit_schema_reasons(schema)
        if reasons:
            yield diag(NOT_INFERRABLE, f"{facts.op}: custom_op needs an explicit schema= ({'; '.join(reasons)})",
                       op=facts.op)


NOT_INFERRABLE = rule(
    "OPG107", "custom-op-explicit-schema", INFO, "custom_op cannot infer this schema from type hints",
    """
`custom_op` infers a schema from the function's annotations, and some schema types have no
annotation that infers back to them (`int` becomes `SymInt`, `int[2]` loses its size, `Layout`,
`MemoryFormat`, `Generator`, `str[]` are refused, list defaults are refused). opgen then passes the
schema explicitly with `schema=`; nothing to do unless you write the registration by hand.
""", bad="f(Tensor x, int[2] k=[1, 1]) -> Tensor", good="f(Tensor x, SymInt[] k) -> Tensor", check=_not_inferrable, aten_yaml=False)

def _reserved_namespace(schema: Schema, facts: SchemaFacts) -> Iterator[Diagnostic]:
    if schema.namespace:
        for diagnostic in check_namespace(schema.namespace):
            yield replace(diagnostic, op=facts.op, part="name")


RESERVED_NAMESPACE = rule(
    "OPG108", "reserved-namespace", ERROR, "the namespace is reserved by PyTorch",
    """
`prim` is refused by `Library` ("prim is a reserved namespace"); `aten` belongs to PyTorch and a
`DEF` library there fails; `torch`, `_` and other internal names collide with torch's own
registrations. Use your project's name as the namespace.
""", bad="aten::my_op(Tensor x) -> Tensor", good="myproj::my_op(Tensor x) -> Tensor", check=_reserved_namespace)

def _mutated_non_tensor(schema: Schema, facts: SchemaFacts) -> Iterator[Diagnostic]:
    for arg in schema.mutated_args:
        if not is_tensor_like(arg.type):
            yield diag(MUTATED_NON_TENSOR, f"{facts.op}: argument {arg.name!r} of type '{strip_alias(arg.type)}' is "
                       "marked as written, but only tensors can be (torch.compile of a caller fails)",
                       hint=f"remove the annotation '{arg.alias}' on {arg.name!r}", op=facts.op, part=("arg", arg.name))


MUTATED_NON_TENSOR = rule(
    "OPG109", "mutated-non-tensor", ERROR, "a non-Tensor argument is marked as written (`int(a!)`): torch.compile fails",
    """
Only tensors (and lists or optionals of tensors) can be mutated. torch 2.13's `Library.define` and
`custom_op(..., schema=...)` accept `int(a!) n`, and the eager call and opcheck's test_schema,
test_faketensor and test_autograd_registration pass; but `torch.compile` of any caller, and opcheck's
test_aot_dispatch_static / test_aot_dispatch_dynamic, fail with "Found a custom (non-ATen) operator
whose output has alias annotations". `custom_op` without `schema=` refuses it when the op is defined:
"only Tensors or collections of Tensors can be mutated". Remove the annotation (a Python number cannot
be written in place anyway).
""", bad="f(Tensor x, int(a!) n) -> ()", good="f(Tensor(a!) x, int n) -> ()", check=_mutated_non_tensor)

def _alias_without_write(schema: Schema, facts: SchemaFacts) -> Iterator[Diagnostic]:
    if any(r.alias for r in schema.returns):
        return
    for arg in schema.arguments:
        alias = arg.alias
        if alias is not None and not alias.is_write and alias.before:
            yield diag(ALIAS_WITHOUT_WRITE, f"{facts.op}: argument {arg.name!r} has a read-only alias "
                       f"annotation '{alias}'", hint=f"drop '{alias}' or write '({alias.before[0]}!)' if the op "
                       "writes it", op=facts.op, part=("arg", arg.name))


ALIAS_WITHOUT_WRITE = rule(
    "OPG110", "view-input", WARNING, "an input carries a read-only alias annotation `(a)`",
    """
`Tensor(a)` on an input only means something when a return shares the set (a view op), and custom
view ops cannot be functionalized by torch.compile. For a custom op, drop the annotation and return
a fresh tensor, or mark the input `(a!)` if the op writes it.
""", bad="f(Tensor(a) x) -> Tensor", good="f(Tensor x) -> Tensor", check=_alias_without_write, aten_yaml=False)

def _return_name_clash(schema: Schema, facts: SchemaFacts) -> Iterator[Diagnostic]:
    for ret in schema.returns:
        same_name = schema.argument(ret.name) if ret.name else None
        # The out convention names a return after the out argument it aliases: that is no clash.
        if same_name is not None and not _same_alias_set(same_name.alias, ret.alias):
            yield diag(NO_RETURN_NAME_CLASH, f"{facts.op}: return {ret.name!r} has the name of an argument",
                       hint=f"rename it, e.g. '{ret.name}_out'", op=facts.op, part="returns")


NO_RETURN_NAME_CLASH = rule(
    "OPG111", "return-name-clash", ERROR, "a named return has the same name as an argument",
    """
Generated Python code (fake functions, tests) binds arguments and returns by name; a return named
like an argument shadows it. Rename the return. Returns named after the out argument they alias
(the `.out` convention) are fine, and `opgen lint` does not apply this rule to hand-written code.
""", bad="f(Tensor x) -> Tensor x", good="f(Tensor x) -> Tensor y", check=_return_name_clash, generated_only=True)

def _tag_contract(schema: Schema, facts: SchemaFacts) -> Iterator[Diagnostic]:
    for tag in (t for t in ALIASING_TAGS if t in facts.known_tags):
        problems = tag_contract_problems(schema, tag)
        if problems:
            yield diag(TAG_CONTRACT, f"{facts.op}: " + "; ".join(message for message, _ in problems),
                       hint=TAG_HINTS[tag], op=facts.op, part=problems[0][1])


TAG_CONTRACT = rule(
    "OPG112", "tag-contract", ERROR, "a schema tagged `torch.Tag.inplace` / `torch.Tag.out` breaks the tag's contract",
    """
torch checks a tagged schema when it is defined (`Library.define`, `custom_op`) and refuses it
with a ValueError. `Tag.inplace`: the first positional argument is a mutable `Tensor(a!)`, it is
the only mutated argument, and the op returns exactly it (`-> Tensor(a!)`). `Tag.out`: every
mutated argument is a keyword-only `Tensor(a!)` (after the `*`), and the op returns all of them,
in order, each with its argument's alias set. With the tag, torch.compile functionalizes the
aliased return and torch generates the fake itself; the tags exist only in torch >= 2.13.
""", bad="scale_(Tensor(a!) x, Tensor(b!) y) -> Tensor(a!)  +  tags=(torch.Tag.inplace,)",
    good="scale_(Tensor(a!) x, float s) -> Tensor(a!)  +  tags=(torch.Tag.inplace,)", check=_tag_contract, aten_yaml=False)

def _autograd_not_functional(schema: Schema, facts: SchemaFacts) -> Iterator[Diagnostic]:
    problems = autograd_problems(schema, facts.known_tags) if facts.autograd else []
    if problems:
        yield diag(AUTOGRAD_NOT_FUNCTIONAL, f"{facts.op}: " + "; ".join(message for message, _ in problems),
                   hint=AUTOGRAD_HINT, op=facts.op, part=problems[0][1])


AUTOGRAD_NOT_FUNCTIONAL = rule(
    "OPG113", "autograd-not-functional", ERROR, "an autograd formula is registered for a non-functional op",
    """
`torch.library.register_autograd` (and `CustomOpDef.register_autograd`) refuses ops that mutate an
argument ("Cannot register autograd formula for non-functional operator"), ops tagged
`torch.Tag.out` ("Out variants do not support autograd") and ops with keyword-only tensor
arguments (NotImplementedError). Give the backward formula to a functional twin that returns fresh
tensors and make the mutating op call it, or move the tensors before the `*`.
""", bad="scale_(Tensor(a!) x, float s) -> ()  +  register_autograd(...)",
    good="scale(Tensor x, float s) -> Tensor  +  register_autograd(...)", check=_autograd_not_functional)

def _no_tensor_input(schema: Schema, facts: SchemaFacts) -> Iterator[Diagnostic]:
    if not any(is_tensor_like(arg.type) for arg in schema.arguments):
        yield diag(NO_TENSOR_INPUT, f"{facts.op}: no tensor argument to dispatch on", hint=(
            "take the tensor whose device the op runs on (e.g. `Tensor like`); opgen does not generate factory "
            "ops (a BackendSelect kernel, Device examples) yet"), op=facts.op, part="name")


NO_TENSOR_INPUT = rule(
    "OPG114", "no-tensor-input", ERROR, "an op without tensor arguments: nothing to dispatch on",
    """
The dispatcher picks a kernel from the tensor arguments' devices. `Library.define` accepts an op with
none, but a kernel registered for a device key (CPU, PrivateUse1) is then never called ("There were
no tensor arguments to this function ..., but no fallback function is registered"); only a
BackendSelect or CompositeExplicitAutograd kernel is. `custom_op` refuses such an op outright unless it
takes a `device: torch.device` argument ("Functions without tensor inputs are required to have a
`device: torch.device` argument"). opgen registers device kernels and generates no examples with a
Device yet, so it refuses to generate such an op; hand-written code (which `opgen lint` reads) may
register the right kernel itself.
""", bad="arange(int n, ScalarType dtype) -> Tensor", good="arange_like(Tensor like, int n) -> Tensor",
    check=_no_tensor_input, generated_only=True)

def _list_after_default(schema: Schema, facts: SchemaFacts) -> Iterator[Diagnostic]:
    defaulted = None
    for argument in schema.positional:
        if argument.has_default:
            defaulted = defaulted or argument
        elif defaulted is not None:
            yield diag(LIST_AFTER_DEFAULT, f"{facts.op}: {argument.name!r} has no default but follows "
                       f"{defaulted.name!r}, which has one", hint=f"give {argument.name!r} a default, move it before "
                       f"{defaulted.name!r}, or make it keyword-only after '*'", op=facts.op,
                       part=("arg", argument.name))
            return


LIST_AFTER_DEFAULT = rule(
    "OPG115", "list-after-default", ERROR, "a list argument without a default follows a defaulted one",
    """
torch accepts a list argument without a default after a defaulted one (`Tensor? bias=None, int[] stride`:
FunctionSchema keeps it for old broadcasting lists; any other type there is refused), but a Python
function cannot take its arguments in that order, so opgen cannot generate the kernel, fake and op
functions for it. Give the list a default, move it before the defaulted argument, or make it
keyword-only. `opgen lint` does not apply this rule to hand-written code (torch accepts the schema).
""", bad="f(Tensor x, int a=1, int[] y) -> Tensor", good="f(Tensor x, int[] y, int a=1) -> Tensor",
    check=_list_after_default, generated_only=True)

# Every rule's `bad` and `good` is schema text that `check_schema` (or, for "A  and  B", `check_ops`)
# judges; "  +  has_side_effect(...)" after a schema means the op is marked side-effecting, and
# "  +  tags=(torch.Tag.X,)" that it is defined with that tag, "  +  register_autograd(...)" that it gets a
# backward formula.
CONTRACT_CODES = tuple(RULES)


def check_schema(schema: Schema, *, tags: tuple[str, ...] | None = (), side_effect_marked: bool = False,
                 style: str | None = None, generating: bool = True, autograd: bool = False) -> list[Diagnostic]:
    """Diagnostics decidable from one schema: every rule that has a check, in code order (see SchemaFacts
    for the arguments; `generating=False` leaves out the rules that only constrain generated code)."""
    name = schema.qualified_name + (f".{schema.overload}" if schema.overload else "")
    facts = SchemaFacts(name, tags, side_effect_marked, style, generating, autograd)
    found: list[Diagnostic] = []
    for rule_ in RULES.values():
        if rule_.check is not None and (generating or not rule_.generated_only):
            found.extend(rule_.check(schema, facts))
    return found


TAG_HINTS = {
    "inplace": "Tag.inplace wants 'name_(Tensor(a!) self, ...) -> Tensor(a!)': only the first positional argument "
               "mutated, and returned",
    "out": "Tag.out wants 'name.out(..., *, Tensor(a!) out) -> Tensor(a!)': every mutated argument keyword-only "
           "and returned, in order",
}


def tag_contract_problems(schema: Schema, tag: str) -> list[tuple[str, object]]:
    """What torch's define-time check of `torch.Tag.<tag>` would refuse in `schema` (torch/library.py
    `_validate_inplace_schema` / `_validate_out_schema`), as (message, part of the schema it is about);
    the part is a `span_column` key: "name", "returns" or ("arg", name)."""
    written = schema.mutated_args
    problems: list[tuple[str, object]] = []
    if tag == "inplace":
        first = schema.arguments[0] if schema.arguments and not schema.arguments[0].kwarg_only else None
        if first is None:
            return [("Tag.inplace needs a first positional argument (the tensor it mutates and returns)", "name")]
        where = ("arg", first.name)
        if not first.is_write:
            problems.append(((f"Tag.inplace requires the first positional argument {first.name!r} to be mutable "
                             "(e.g. Tensor(a!))"), where))
        elif strip_alias(first.type) != BaseType("Tensor"):
            problems.append(((f"Tag.inplace requires the first positional argument {first.name!r} to be a Tensor, "
                             f"not '{first.type}'"), where))
        returns = schema.returns
        if len(returns) != 1:
            problems.append((f"Tag.inplace requires exactly one return (the first argument), not {len(returns)}",
                             "returns"))
        elif not _returns_argument(returns[0], first):
            problems.append(((f"Tag.inplace requires the return to be the first argument: '{returns[0].type}' "
                             f"should be '{first.type}'"), "returns"))
        others = [a.name for a in written if a is not first]
        if others:
            problems.append(((f"Tag.inplace allows only the first positional argument to be mutated, not also "
                             f"{', '.join(map(repr, others))}"), ("arg", others[0])))
        return problems
    if tag == "out":
        if not written:
            return [("Tag.out needs at least one mutated keyword-only argument (e.g. *, Tensor(a!) out)", "name")]
        positional = [a.name for a in written if not a.kwarg_only]
        if positional:
            problems.append(((f"Tag.out requires every mutated argument to be keyword-only (after the *), not "
                             f"{', '.join(map(repr, positional))}"), ("arg", positional[0])))
        not_tensor = [a.name for a in written if strip_alias(a.type) != BaseType("Tensor")]
        if not_tensor:
            problems.append(((f"Tag.out supports only mutated arguments of type Tensor, not "
                             f"{', '.join(map(repr, not_tensor))}"), ("arg", not_tensor[0])))
        if len(schema.returns) != len(written):
            problems.append(((f"Tag.out requires the op to return every mutated argument ({len(written)}), not "
                             f"{len(schema.returns)} value(s)"), "returns"))
        else:
            for index, (ret, arg) in enumerate(zip(schema.returns, written)):
                if not _returns_argument(ret, arg):
                    problems.append(((f"Tag.out requires return {index} to be the mutated argument {arg.name!r} "
                                     f"('{arg.type}'), not '{ret.type}'"), "returns"))
                    break
        return problems
    raise ValueError(f"unknown tag {tag!r}")


AUTOGRAD_HINT = ("register the backward on a functional op (fresh outputs, no Tensor(a!), no out= tag, tensors "
                 "before the `*`)")


def autograd_problems(schema: Schema, tags: tuple[str, ...] = ()) -> list[tuple[str, object]]:
    """Why torch's `register_autograd` would refuse `schema` (torch/library.py), as (message, part of the
    schema it is about); the part is a `span_column` key: "name", "returns" or ("arg", name)."""
    if "out" in tags:
        return [("a torch.Tag.out op cannot have an autograd formula (out variants do not support autograd)",
                 "name")]
    problems: list[tuple[str, object]] = []
    written = [a.name for a in schema.mutated_args]
    if written:
        problems.append((f"a mutable op cannot have an autograd formula: it writes {', '.join(map(repr, written))}",
                         ("arg", written[0])))
    aliased = [ret for ret in schema.returns if ret.alias is not None]
    if aliased and not written:
        problems.append(("an op returning an alias of an input cannot have an autograd formula", "returns"))
    kw_tensors = [a.name for a in schema.kwarg_only if is_tensor_like(a.type)]
    if kw_tensors:
        problems.append(((f"register_autograd does not support keyword-only tensor arguments "
                          f"({', '.join(map(repr, kw_tensors))})"), ("arg", kw_tensors[0])))
    return problems


def _returns_argument(ret, arg) -> bool:
    """`ret` is a plain Tensor return written in `arg`'s alias set (`Tensor(a!)` for `Tensor(a!) x`)."""
    alias = ret.alias
    return (strip_alias(ret.type) == BaseType("Tensor") and alias is not None and alias.is_write
            and arg.alias is not None and set(alias.before) == set(arg.alias.before))


def check_namespace(namespace: str) -> list[Diagnostic]:
    severity = RESERVED.get(namespace)
    if severity is None:
        return []
    return [diag(RESERVED_NAMESPACE, f"namespace {namespace!r} is reserved by PyTorch",
                 hint="use your project's name as the namespace", severity=severity)]


def check_ops(schemas: list[Schema]) -> list[Diagnostic]:
    """Rules over all ops of a project: in-place twins."""
    found: list[Diagnostic] = []
    by_name = {(s.namespace, s.name): s for s in schemas}
    for (namespace, op_name), schema in sorted(by_name.items(), key=lambda kv: (kv[0][0] or "", kv[0][1])):
        twin = by_name.get((namespace, op_name + "_"))
        if twin is None:
            continue
        problem = _inplace_twin_problem(schema, twin)
        if problem:
            found.append(diag(INPLACE_TWIN, f"{op_name!r} and {twin.name!r}: {problem}",
                              hint=f"make {twin.name!r} take the same arguments as {op_name!r} with only the first "
                              "mutated, or rename one of them", op=schema.qualified_name))
    return found


def _inplace_twin_problem(functional: Schema, inplace: Schema) -> str | None:
    """What goes wrong when torch.fx's reinplace pass pairs `functional` with `inplace` (None: nothing)."""
    # Mirrors torch.fx.passes.reinplace._schemas_match: types position by position, then mutability.
    if len(functional.arguments) != len(inplace.arguments) or any(
        strip_alias(a.type) != strip_alias(b.type) for a, b in zip(functional.arguments, inplace.arguments)
    ):
        return None
    extra = [a.name for a in inplace.arguments[1:] if a.alias is not None]
    if extra:
        return (f"{inplace.name!r} also mutates {', '.join(map(repr, extra))}, so the compiler's reinplace pass "
                "fails with 'Remaining arguments of inplace op must not be mutable'")
    renamed = [(a.name, b.name) for a, b in zip(functional.arguments[1:], inplace.arguments[1:]) if a.name != b.name]
    if renamed:
        pairs = ", ".join(f"{a!r} vs {b!r}" for a, b in renamed)
        return (f"the compiler may substitute {inplace.name!r} for {functional.name!r}, but their arguments differ "
                f"({pairs}): is it really the in-place form?")
    return None


def _same_alias_set(a, b) -> bool:
    return a is not None and b is not None and bool(set(a.before) & set(b.before))


def _fresh_letters(schema: Schema, count: int) -> list[str]:
    used = {letter for a in schema.arguments if a.alias for letter in a.alias.before}
    letters = [c for c in "abcdefghijklmnopqrstuvwxyz" if c not in used]
    return letters[:count]


def custom_op_explicit_schema_reasons(schema: Schema) -> list[str]:
    """Why `custom_op` would infer a different schema from type hints (empty: it infers this one)."""
    reasons = [f"alias set '{letter}' shared by {', '.join(map(repr, names))}"
               for letter, names in shared_alias_sets(schema).items()]
    for arg in schema.arguments:
        if not custom_op_can_infer(arg.type):
            reasons.append(f"'{arg.type} {arg.name}'")
        elif arg.has_default and isinstance(arg.default, tuple):
            reasons.append(f"list default of {arg.name!r}")
    for ret in schema.returns:
        if not inferred_return_ok(ret.type) or ret.name:
            reasons.append(f"return '{ret}'")
    if schema.varargs or schema.varret:
        reasons.append("varargs '...'")
    return reasons


def mutates_args(schema: Schema) -> list[str]:
    """The `mutates_args` a custom_op needs: every argument written to."""
    return [a.name for a in schema.mutated_args]


def fatal_for_generation(diagnostic: Diagnostic, style: str | None) -> bool:
    """Whether `opgen new` refuses an op with this diagnostic when generating in `style`."""
    return diagnostic.severity == ERROR or style in RULES[diagnostic.code].fatal_styles


def has_errors(diagnostics: list[Diagnostic]) -> bool:
    return any(d.severity == ERROR for d in diagnostics)
