"""The contract rules: each fires on its own bad example and not on its good one; torch confirms the premises."""

from __future__ import annotations

import re

import pytest

from opgen.contract import (
    CONTRACT_CODES,
    ERROR,
    RULES,
    check_namespace,
    check_ops,
    check_schema,
    custom_op_explicit_schema_reasons,
    fatal_for_generation,
    has_errors,
    mutates_args,
)
from opgen.schema import SchemaError, parse_schema

MARKED = "  +  has_side_effect("
AUTOGRAD = "  +  register_autograd(...)"
TAGGED = re.compile(r"  \+  tags=\(((?:torch\.Tag\.\w+,\s*)+)\)$")


def codes_for(example: str) -> set[str]:
    """Run the documented example format: schemas joined by '  and  ', optionally marked side-effecting
    ('  +  has_side_effect(...)'), tagged ('  +  tags=(torch.Tag.inplace,)') or given a backward formula
    ('  +  register_autograd(...)')."""
    marked = MARKED in example
    autograd = AUTOGRAD in example
    text = example.split(MARKED)[0].split(AUTOGRAD)[0]
    tagged = TAGGED.search(text)
    tags = tuple(re.findall(r"torch\.Tag\.(\w+)", tagged.group(1))) if tagged else ()
    text = text[:tagged.start()] if tagged else text
    try:
        schemas = [parse_schema(part) for part in text.split("  and  ")]
    except SchemaError:
        return {"OPG001"}
    found = {d.code for s in schemas for d in check_schema(s, tags=tags, side_effect_marked=marked, autograd=autograd)}
    return found | {d.code for d in check_ops(schemas)}


def test_catalogue_covers_the_documented_codes():
    assert set(CONTRACT_CODES) >= {"OPG001", *(f"OPG1{n:02d}" for n in range(1, 12))}
    for code in CONTRACT_CODES:
        rule = RULES[code]
        assert re.fullmatch(r"OPG[01]\d\d", code)
        assert rule.severity in ("error", "warning", "info")
        assert rule.summary and rule.explanation and rule.name


@pytest.mark.parametrize("code", CONTRACT_CODES)
def test_rule_fires_on_its_bad_example_only(code):
    rule = RULES[code]
    assert rule.bad and rule.good, f"{code} needs a bad and a good example"
    assert code in codes_for(rule.bad), rule.bad
    assert code not in codes_for(rule.good), rule.good


def test_examples_are_otherwise_clean_where_they_can_be():
    # A good example should not teach a different mistake (info-level OPG107 aside).
    for code in CONTRACT_CODES:
        noisy = {c for c in codes_for(RULES[code].good) if RULES[c].severity == ERROR}
        assert not noisy, (code, noisy)


def diag_codes(text: str, **kwargs) -> list[str]:
    return [d.code for d in check_schema(parse_schema(text), **kwargs)]


@pytest.mark.parametrize(("text", "kwargs", "expected"), [
    ("f(Tensor x) -> Tensor", {}, []),
    ("f_(Tensor(a!) x) -> ()", {}, []),
    ("f(Tensor(a!) x, Tensor(b!) y) -> ()", {}, []),
    ("f(Tensor(a!)[] xs, Tensor(a!) y) -> ()", {}, ["OPG101", "OPG107"]),
    ("f(Tensor(a!)[] xs, Tensor(a!) y) -> ()", {"style": "library"}, ["OPG101"]),
    ("f(Tensor(a!)[] xs, Tensor(a!) y) -> ()", {"style": "library", "generating": False}, []),
    ("f(Tensor(a!) x) -> Tensor(a!)", {"tags": ("inplace",)}, []),
    ("f.out(Tensor x, *, Tensor(a!) out) -> Tensor(a!)", {"tags": ("out",), "style": "library"}, []),
    ("f.out(Tensor x, *, Tensor(a!) out) -> Tensor(a!)", {}, ["OPG102", "OPG106"]),
    ("f(Tensor(a) x) -> Tensor(a)", {}, ["OPG102"]),
    ("f(Tensor x) -> (Tensor(a!)[] a, Tensor b)", {}, ["OPG102", "OPG107"]),
    ("f__(Tensor x) -> Tensor", {}, []),
    ("f_(Tensor x, Tensor(a!) y) -> ()", {}, ["OPG103"]),
    ("f_(*, Tensor(a!) y) -> ()", {}, ["OPG103", "OPG106"]),
    ("log(Tensor x) -> ()", {}, ["OPG104"]),
    ("log(Tensor x) -> ()", {"side_effect_marked": True}, []),
    ("log() -> ()", {}, ["OPG104", "OPG114"]),  # nothing to dispatch on either
    ("log() -> ()", {"generating": False}, ["OPG104"]),
    ("f(Tensor x) -> ...", {}, ["OPG107"]),
    ("f(Tensor x, *, Tensor? w=None) -> Tensor", {"style": "library"}, []),
    ("f(Tensor x, *, Tensor? w=None) -> Tensor", {}, ["OPG106"]),
    ("f(Tensor x, Layout l) -> Tensor", {"style": "library"}, []),
    ("f(Tensor x, Layout l) -> Tensor", {}, ["OPG107"]),
    ("f(Tensor x) -> ((Tensor))", {}, []),
    ("f(Tensor x) -> ((Tensor, Tensor))", {}, ["OPG107"]),
    ("prim::f(Tensor x) -> Tensor", {}, ["OPG108"]),
    ("inductor::f(Tensor x) -> Tensor", {}, ["OPG108"]),
    ("f(Tensor x, Scalar(a!) s) -> ()", {}, ["OPG109"]),
    ("f(Tensor(a!)?[] xs) -> ()", {}, []),
    ("f(Tensor(a) x, Tensor y) -> Tensor", {}, ["OPG110"]),
    ("f(Tensor x) -> (Tensor x, Tensor y)", {}, ["OPG107", "OPG111"]),
    ("f(Tensor(a!) x) -> Tensor(a!)", {"tags": None}, []),
    ("f.out(Tensor x, *, Tensor(a!) out) -> Tensor(a!)", {"tags": None}, []),
    ("f(Tensor(a!) x, Tensor(b!) y) -> Tensor(a!)", {"tags": None}, []),
    ("f(Tensor(a!) x, Tensor(b!) y) -> Tensor(a!)", {"tags": ("inplace",)}, ["OPG112"]),
    ("f.out(Tensor x, *, Tensor(a!) out) -> Tensor(a!)", {"tags": ("inplace",), "style": "library"}, ["OPG112"]),
    ("f(Tensor(a!) x) -> Tensor(a!)", {"tags": ("out",)}, ["OPG112"]),
])
def test_targeted_cases(text, kwargs, expected):
    assert diag_codes(text, **kwargs) == expected


def test_severities_and_messages_locate_the_op():
    diags = check_schema(parse_schema("ns::f.ov(Tensor(a!) x, Tensor(a!) y) -> Tensor(a!)"), style="library")
    assert [(d.code, d.severity) for d in diags] == [("OPG101", "info"), ("OPG102", "error")]
    assert all(d.message.startswith("ns::f.ov: ") for d in diags)
    assert "Tensor(a!) x, Tensor(b!) y" in diags[0].hint
    assert has_errors(diags)
    assert not has_errors(check_schema(parse_schema("prefetch(Tensor x) -> ()")))
    assert check_schema(parse_schema("inductor::f(Tensor x) -> Tensor"))[0].severity == "warning"
    assert check_namespace("myproj") == []


def test_mutates_args_lists_every_written_argument_in_order():
    schema = parse_schema("f(Tensor(a!) x, Tensor y, Tensor(b!)[] ys, Tensor(c!)? z=None) -> ()")
    assert mutates_args(schema) == ["x", "ys", "z"]


def test_inplace_twin_is_fine_when_it_matches():
    pair = [parse_schema("norm(Tensor x, float eps) -> Tensor"), parse_schema("norm_(Tensor(a!) x, float eps) -> ()")]
    assert check_ops(pair) == []
    other_namespace = [parse_schema("a::norm(Tensor x) -> Tensor"), parse_schema("b::norm_(Tensor(a!) x, int k) -> ()")]
    assert check_ops(other_namespace) == []


def test_explicit_schema_reasons_name_the_argument():
    reasons = custom_op_explicit_schema_reasons(parse_schema("f(Tensor x, int k, int[2] s=[1, 1]) -> Tensor y"))
    assert reasons == ["'int k'", "'int[2] s'", "return 'Tensor y'"]


# -- torch confirms the premises -------------------------------------------------------------------
torch = pytest.importorskip("torch")


def _compiled_caller(lib, name: str, schema: str):
    """Define `schema` (one mutated tensor `x`), give it a kernel and a fake, and compile a caller."""
    returns_x = schema.endswith("-> Tensor(a!)")
    lib.define(schema)

    def kernel(x):
        x.add_(1)
        return x if returns_x else None

    lib.impl(name, kernel, "CompositeExplicitAutograd")
    torch.library.register_fake(f"opgen_contract::{name}", lambda x: x if returns_x else None, lib=lib)
    op = getattr(torch.ops.opgen_contract, name).default

    def caller(x):
        y = x.clone()
        op(y)
        return y * 2

    return torch.compile(caller, backend="aot_eager", fullgraph=True)


def test_torch_premise_of_OPG102_aliased_return_fails_compile():
    import torch._dynamo

    torch._dynamo.reset()
    aliased, fixed = "bump_ret_(Tensor(a!) x) -> Tensor(a!)", "bump_(Tensor(a!) x) -> ()"
    with torch.library._scoped_library("opgen_contract", "FRAGMENT") as lib:
        with pytest.raises(Exception, match="alias annotations"):
            _compiled_caller(lib, "bump_ret_", aliased)(torch.zeros(3))
        assert torch.equal(_compiled_caller(lib, "bump_", fixed)(torch.zeros(3)), torch.full((3,), 2.0))
    assert "OPG102" in codes_for(aliased)
    assert "OPG102" not in codes_for(fixed)


def test_torch_premise_of_OPG106_custom_op_refuses_kwarg_only_tensors():
    def f(x: torch.Tensor, *, bias: torch.Tensor) -> torch.Tensor:
        return x + bias

    with pytest.raises(NotImplementedError, match="kwarg-only Tensor args"):
        torch.library.custom_op("opgen_contract::kw", f, mutates_args=())
    assert "OPG106" in codes_for("kw(Tensor x, *, Tensor bias) -> Tensor")


def test_torch_premise_of_OPG108_prim_is_reserved():
    with pytest.raises(ValueError, match="prim is a reserved namespace"):
        torch.library.Library("prim", "FRAGMENT")
    assert "OPG108" in codes_for("prim::f(Tensor x) -> Tensor")


def test_torch_premise_of_OPG109_custom_op_inference_refuses_a_mutated_non_tensor():
    def f(x: torch.Tensor, n: int) -> None:
        return None

    with pytest.raises(ValueError, match="only Tensors or collections of Tensors can be mutated"):
        torch.library.custom_op("opgen_contract::mut_int", f, mutates_args=("n",))
    assert "OPG109" in codes_for("mut_int(Tensor x, int(a!) n) -> ()")


def test_torch_premise_of_OPG114_an_op_without_tensor_arguments_cannot_be_dispatched():
    """Library.define accepts `arange(int n)`, but a call finds no kernel; custom_op refuses it without a
    `device` argument. The look-alike with a tensor argument is called fine, and OPG114 only applies to
    what opgen generates."""
    with torch.library._scoped_library("opgen_contract", "FRAGMENT") as lib:
        lib.define("no_tensor(int n) -> Tensor")
        lib.impl("no_tensor", lambda n: torch.zeros(n), "CPU")
        with pytest.raises(NotImplementedError, match="There were no tensor arguments to this function"):
            torch.ops.opgen_contract.no_tensor(3)
        lib.define("with_tensor(Tensor like, int n) -> Tensor")
        lib.impl("with_tensor", lambda like, n: like.new_zeros(n), "CPU")
        assert torch.ops.opgen_contract.with_tensor(torch.ones(1), 3).shape == (3,)

    def arange(n: int) -> torch.Tensor:
        return torch.zeros(n)

    with pytest.raises(ValueError, match="Functions without tensor inputs are required to have a `device"):
        # as opgen generates it: custom_op(..., device_types="cpu")
        torch.library.custom_op("opgen_contract::no_tensor_co", arange, mutates_args=(), device_types="cpu")
    assert "OPG114" in codes_for("no_tensor(int n) -> Tensor")
    assert "OPG114" not in codes_for("with_tensor(Tensor like, int n) -> Tensor")
    assert "OPG114" not in codes_for("with_list(Tensor[] xs) -> Tensor")
    assert "OPG114" not in [d.code for d in check_schema(parse_schema("no_tensor(int n) -> Tensor"), generating=False)]


# What torch does with a schema that Library.define accepts, stage by stage, in each registration style that can
# write it ("custom_op": with an explicit schema=). opgen's verdict follows: an error only where torch breaks.
OPCHECK_UTILS = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_static",
                 "test_aot_dispatch_dynamic")


def _register(lib, style: str, name: str, schema: str, kernel, fake):
    """Define `name` + `schema` with a kernel and a fake in `style`; returns the OpOverload."""
    if style == "library":
        lib.define(name + schema)
        lib.impl(name, kernel, "CompositeExplicitAutograd")
        torch.library.register_fake(f"opgen_contract::{name}", fake, lib=lib)
        return getattr(torch.ops.opgen_contract, name).default
    written = tuple(mutates_args(parse_schema(name + schema)))
    custom = torch.library.custom_op(f"opgen_contract::{name}", kernel, mutates_args=written, schema=schema)
    custom.register_fake(fake)  # custom_op overwrites an op of the same name: a rerun needs no cleanup
    return custom._opoverload


def _stages(op, make_args, caller) -> dict[str, str]:
    """Each stage's outcome, "ok" or torch's message: the eager call, each opcheck test, and
    torch.compile(fullgraph=True, backend="aot_eager") of `caller` compared with eager."""
    import torch._dynamo

    found = {}
    try:
        op(*make_args())
        found["eager"] = "ok"
    except Exception as error:  # noqa: BLE001  (the outcome is the finding)
        found["eager"] = str(error)
    for util in OPCHECK_UTILS:
        result = torch.library.opcheck(op, make_args(), test_utils=(util,), raise_exception=False)[util]
        found[util] = "ok" if result == "SUCCESS" else str(result)
    torch._dynamo.reset()
    try:
        compiled = torch.compile(caller, backend="aot_eager", fullgraph=True)(*make_args())
        eager = caller(*make_args())
        found["compile"] = "ok" if all(torch.equal(a, b) for a, b in zip(compiled, eager)) else f"{compiled} != {eager}"
    except Exception as error:  # noqa: BLE001
        found["compile"] = str(error)
    return found


@pytest.mark.parametrize("style", ["library", "custom_op"])
@pytest.mark.parametrize("schema", ["(Tensor(a!) x, Tensor(a!) y) -> ()", "(Tensor(a!) x, Tensor(b!) y) -> ()"])
def test_torch_premise_of_OPG101_a_shared_alias_set_works_at_every_stage(style, schema):
    """`Tensor(a!) x, Tensor(a!) y` (OPG101) behaves as its one-letter-each look-alike everywhere, even when both
    arguments are one tensor or overlapping views: opgen notes it (info), never refuses or lints it."""
    def kernel(x, y):
        x.add_(1)
        y.mul_(2)

    name = "shared" if "(a!) y" in schema else "distinct"
    with torch.library._scoped_library("opgen_contract", "FRAGMENT") as lib:
        op = _register(lib, style, f"{name}_{style}", schema, kernel, lambda x, y: None)

        def caller(x, y):
            a, b, v, w = x.clone(), y.clone(), x * 3, x * 5
            op(a, b)
            op(v[:2], v[1:])  # overlapping views
            op(w, w)  # one tensor, twice
            return a, b, v, w

        outcome = _stages(op, lambda: (torch.ones(3), torch.ones(3)), caller)
    assert outcome == dict.fromkeys(["eager", *OPCHECK_UTILS, "compile"], "ok")
    diagnostics = check_schema(parse_schema("f" + schema), style=style)
    assert [(d.code, d.severity) for d in diagnostics if d.code == "OPG101"] == (
        [("OPG101", "info")] if name == "shared" else [])
    assert not any(fatal_for_generation(d, style) for d in diagnostics)
    assert "OPG101" not in {d.code for d in check_schema(parse_schema("f" + schema), style=style, generating=False)}


def test_torch_premise_of_OPG101_custom_op_infers_one_alias_set_per_mutated_tensor():
    """So a shared set needs an explicit schema= (OPG107's reasons, which `opgen new` follows)."""
    def bump(x: torch.Tensor, y: torch.Tensor) -> None:
        return None

    inferred = parse_schema("f" + torch.library.infer_schema(bump, mutates_args=("x", "y")))
    assert [a.alias.before for a in inferred.arguments] in ([("a0",), ("a1",)], [("a",), ("b",)])
    assert custom_op_explicit_schema_reasons(parse_schema("f(Tensor(a!) x, Tensor(a!) y) -> ()")) == [
        "alias set 'a' shared by 'x', 'y'"]
    assert custom_op_explicit_schema_reasons(parse_schema("f(Tensor(a!) x, Tensor(b!) y) -> ()")) == []


ALIAS_ANNOTATIONS = "Found a custom (non-ATen) operator whose output has alias annotations"


@pytest.mark.parametrize("style", ["library", "custom_op"])
@pytest.mark.parametrize(("schema", "broken"), [
    ("(Tensor(a!) x, int(b!) n) -> ()", True),
    ("(Tensor x, Scalar(a!) n) -> ()", True),
    ("(Tensor(a!) x, int n) -> ()", False),  # the correct look-alike
])
def test_torch_premise_of_OPG109_define_accepts_a_mutated_non_tensor_but_compile_fails(style, schema, broken):
    """Library.define and custom_op(schema=) accept `int(a!)`; the eager call and opcheck's schema, fake and autograd
    tests pass, but torch.compile and opcheck's aot_dispatch tests fail: OPG109 is an error exactly then."""
    writes_x = "Tensor(a!) x" in schema

    def kernel(x, n):
        if writes_x:
            x.add_(n)

    name = f"nt{len(schema)}_{style}"
    with torch.library._scoped_library("opgen_contract", "FRAGMENT") as lib:
        op = _register(lib, style, name, schema, kernel, lambda x, n: None)

        def caller(x, n):
            a = x.clone()
            op(a, n)
            return (a + 1,)

        outcome = _stages(op, lambda: (torch.ones(3), 2), caller)
    failing = {"test_aot_dispatch_static", "test_aot_dispatch_dynamic", "compile"} if broken else set()
    assert {stage for stage, result in outcome.items() if result != "ok"} == failing, outcome
    assert all(ALIAS_ANNOTATIONS in outcome[stage] for stage in failing), outcome
    diagnostics = [d for d in check_schema(parse_schema("f" + schema), style=style) if d.code == "OPG109"]
    assert [d.severity for d in diagnostics] == (["error"] if broken else [])
    assert all("torch.compile of a caller fails" in d.message for d in diagnostics)


# Schemas torch.library.register_autograd refuses, with the words of torch's message (torch/library.py).
AUTOGRAD_REFUSALS = [
    ("ag_mut(Tensor(a!) x) -> ()", (), RuntimeError, "non-functional operator"),
    ("ag_out.out(Tensor x, *, Tensor(a!) out) -> Tensor(a!)", ("out",), RuntimeError, "torch.Tag.out"),
    ("ag_kw(Tensor x, *, Tensor y) -> Tensor", (), NotImplementedError, "kwarg-only Tensor args"),
]


@pytest.mark.parametrize(("schema", "tags", "error", "words"), AUTOGRAD_REFUSALS)
def test_torch_premise_of_OPG113_register_autograd_refuses_non_functional_ops(schema, tags, error, words):
    name = schema.split("(")[0]
    with torch.library._scoped_library("opgen_contract", "FRAGMENT") as lib:
        lib.define(schema, tags=tuple(getattr(torch.Tag, t) for t in tags))
        with pytest.raises(error, match=re.escape(words)):
            torch.library.register_autograd(f"opgen_contract::{name}", lambda ctx, g: g, lib=lib)
    assert {d.code for d in check_schema(parse_schema(schema), tags=tags, autograd=True, style="library")
            if d.severity == ERROR} == {"OPG113"}
    assert "OPG113" not in {d.code for d in check_schema(parse_schema(schema), tags=tags, style="library")}


def test_torch_premise_of_OPG113_functional_ops_take_a_formula():
    with torch.library._scoped_library("opgen_contract", "FRAGMENT") as lib:
        lib.define("ag_ok(Tensor x, *, float s=1.0) -> Tensor")
        lib.impl("ag_ok", lambda x, *, s=1.0: x * s, "CPU")
        torch.library.register_autograd("opgen_contract::ag_ok", lambda ctx, g: g * ctx.s, lib=lib,
                                        setup_context=lambda ctx, inputs, keyword_only_inputs, output:
                                        setattr(ctx, "s", keyword_only_inputs["s"]))
        x = torch.ones(3, requires_grad=True)
        torch.ops.opgen_contract.ag_ok(x, s=3.0).sum().backward()
        assert torch.equal(x.grad, torch.full((3,), 3.0))
    assert "OPG113" not in codes_for("ag_ok(Tensor x, *, float s=1.0) -> Tensor  +  register_autograd(...)")


INFER_CASES = ["Tensor", "Tensor?", "Tensor[]", "Tensor?[]", "Tensor[]?", "int", "SymInt", "int?", "int[]", "SymInt[]",
               "int[2]", "SymInt[]?", "float", "float?", "float[]", "bool", "bool[]", "bool?", "str", "str?", "str[]",
               "Scalar", "Scalar?", "Scalar[]", "ScalarType", "ScalarType?", "Device", "Device?", "Layout",
               "MemoryFormat", "Generator?", "int?[]"]


@pytest.mark.parametrize("type_text", INFER_CASES)
def test_torch_premise_of_OPG107_the_type_table_matches_infer_schema(type_text):
    from opgen.schema.types import custom_op_can_infer, inferred_schema_type, python_annotation

    t = parse_schema(f"f({type_text} a) -> ()").arguments[0].type
    annotation = python_annotation(t)
    hint = None if annotation is None else eval(annotation, {"torch": torch, "Number": torch.types.Number})
    inferred = None
    if hint is not None:
        def fn(a):
            return None

        fn.__annotations__ = {"a": hint, "return": None}
        try:
            inferred = torch.library.infer_schema(fn, mutates_args=()).split("(", 1)[1].split(" a)")[0]
        except ValueError:
            inferred = None
    assert inferred_schema_type(t) == inferred, annotation
    assert custom_op_can_infer(t) == (inferred == type_text)


# Each schema torch refuses for a tag, with the words of torch's own message (torch/library.py
# _validate_inplace_schema / _validate_out_schema) and of opgen's.
TAG_REFUSALS = [
    ("inplace", "f(Tensor x, float s) -> Tensor", "first positional argument to be mutable",
     "first positional argument 'x' to be mutable"),
    ("inplace", "f(*, Tensor(a!) x) -> Tensor(a!)", "at least one positional argument", "first positional argument"),
    ("inplace", "f(Tensor(a!) x) -> ()", "must return exactly one value", "exactly one return"),
    ("inplace", "f(Tensor(a!) x) -> (Tensor(a!), Tensor)", "must return exactly one value", "exactly one return"),
    ("inplace", "f(Tensor(a!) x, Tensor(b!) y) -> Tensor(b!)", "return aliases", "return to be the first argument"),
    ("inplace", "f(Tensor(a!) x) -> Tensor", "return must alias the first argument", "return to be the first argument"),
    ("inplace", "f(Tensor(a!) x, Tensor(b!) y) -> Tensor(a!)", "Found additional mutable args: ['y']", "not also 'y'"),
    ("inplace", "f(Tensor(a!)[] xs) -> Tensor(a!)", "to be a Tensor", "to be a Tensor"),
    ("out", "f(Tensor x) -> Tensor", "at least one mutable argument", "at least one mutated"),
    ("out", "f(Tensor(a!) out) -> Tensor(a!)", "Found mutable positional args: ['out']", "keyword-only"),
    ("out", "f(Tensor x, *, Tensor(a!) out) -> ()", "got 1 mutable args but 0 returns", "every mutated argument"),
    ("out", "f(Tensor x, *, Tensor(a!) a, Tensor(b!) b) -> (Tensor(b!), Tensor(a!))", "Return 0",
     "return 0 to be the mutated argument 'a'"),
    ("out", "f(Tensor x, *, Tensor(a!)[] out) -> Tensor(a!)", "only supports Tensor mutable arguments",
     "only mutated arguments of type Tensor"),
]


@pytest.mark.parametrize(("tag", "text", "torch_words", "opgen_words"), TAG_REFUSALS)
def test_torch_premise_of_OPG112_tag_contracts_match_define_time_checks(tag, text, torch_words, opgen_words):
    diagnostics = [d for d in check_schema(parse_schema(text), tags=(tag,), style="library") if d.code == "OPG112"]
    assert diagnostics and opgen_words in diagnostics[0].message, [d.message for d in diagnostics]
    with torch.library._scoped_library("opgen_contract", "FRAGMENT") as lib, \
            pytest.raises(ValueError, match=re.escape(torch_words)):
        lib.define(text, tags=(getattr(torch.Tag, tag),))


@pytest.mark.parametrize(("tag", "text"), [
    ("inplace", "f_(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)"),
    ("out", "f.out(Tensor x, Tensor y, *, Tensor(a!) out) -> Tensor(a!)"),
    ("out", "f.two(Tensor x, *, Tensor(a!) values, Tensor(b!) indices) -> (Tensor(a!) values, Tensor(b!) indices)"),
])
def test_torch_premise_of_OPG112_valid_tagged_schemas_are_accepted_by_both(tag, text):
    assert "OPG112" not in diag_codes(text, tags=(tag,), style="library")
    with torch.library._scoped_library("opgen_contract", "FRAGMENT") as lib:
        lib.define(text, tags=(getattr(torch.Tag, tag),))
