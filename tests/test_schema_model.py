"""The schema model's own contracts: printing, derived fields, positions, fast constructors."""

from __future__ import annotations

from dataclasses import replace

import pytest

from opgen.schema import parse_schema
from opgen.schema.model import (
    Alias,
    Argument,
    BaseType,
    ListType,
    OptionalType,
    Return,
    Schema,
    TupleType,
    format_default,
    new_argument,
    new_schema,
    strip_alias,
)
from opgen.schema.parser import span_column


def test_fast_constructors_build_equal_objects():
    t = BaseType("Tensor", Alias(("a",), (), True))
    assert new_argument(t, "x", None, True, False) == Argument(t, "x", None, True, False)
    assert hash(new_argument(t, "x", 1, True, True)) == hash(Argument(t, "x", 1, True, True))
    args, rets = (Argument(t, "x"),), (Return(BaseType("Tensor")),)
    built = new_schema("f", args, rets, "out", "ns", False, False, False, {})
    assert built == Schema("f", args, rets, overload="out", namespace="ns")
    with pytest.raises(AttributeError):
        built.name = "g"  # still frozen


@pytest.mark.parametrize(("text", "canonical", "returns_tuple", "count"), [
    ("f(Tensor x) -> Tensor", "f(Tensor x) -> Tensor", False, 1),
    ("f(Tensor x) -> (Tensor)", "f(Tensor x) -> Tensor", False, 1),
    ("f(Tensor x) -> ((Tensor))", "f(Tensor x) -> ((Tensor))", True, 1),
    ("f(Tensor x) -> ((Tensor, Tensor))", "f(Tensor x) -> ((Tensor, Tensor))", True, 1),
    ("f(Tensor x) -> ((int, int) a)", "f(Tensor x) -> ((int, int) a)", True, 1),
    ("f(Tensor x) -> (Tensor a, Tensor b)", "f(Tensor x) -> (Tensor a, Tensor b)", True, 2),
    ("f(Tensor x) -> ((float)[1]?)", "f(Tensor x) -> ((float)[1]?)", False, 1),
    ("f(Tensor x) -> ()", "f(Tensor x) -> ()", False, 0),
    ("f(...) -> ...", "f(...) -> ...", False, 0),
])
def test_return_forms(text, canonical, returns_tuple, count):
    schema = parse_schema(text)
    assert str(schema) == canonical
    assert schema.returns_tuple is returns_tuple
    assert len(schema.returns) == count


def test_a_replaced_return_list_prints_by_its_returns():
    schema = parse_schema("f(Tensor(a!) x) -> (Tensor(a!) x_out, Tensor y)")
    fewer = replace(schema, returns=schema.returns[1:])
    assert str(fewer) == "f(Tensor(a!) x) -> Tensor y"
    assert fewer == parse_schema(str(fewer))


def test_span_column_finds_each_part():
    text = "ns::f.ov(Tensor x, *, int y=1) -> Tensor"
    schema = parse_schema(text)
    assert span_column(schema, "name") == text.index("f.ov") + 1
    assert span_column(schema, "overload") == text.index("ov(") + 1
    assert span_column(schema, "returns") == text.rindex("Tensor") + 1
    assert span_column(schema, ("arg", "x")) == text.index("Tensor x") + 1
    assert span_column(schema, ("arg", "y")) == text.index("int y") + 1
    assert span_column(schema, ("arg", "nope")) is None
    assert span_column(replace(schema, spans={}), "name") is None


def test_shared_instances_do_not_leak_between_schemas():
    a = parse_schema("f(Tensor(a!) x, Tensor? y=None) -> ()").arguments
    b = parse_schema("g(Tensor(a) x, Tensor? y) -> ()").arguments
    assert a[0].type == BaseType("Tensor", Alias(("a",), (), True)) and a[0].is_write
    assert b[0].type == BaseType("Tensor", Alias(("a",), (), False)) and not b[0].is_write
    assert a[1].has_default and not b[1].has_default
    assert a[1].type is b[1].type == OptionalType(BaseType("Tensor"))


def test_strip_alias_reaches_inside_containers():
    t = parse_schema("f((Tensor(a!), Tensor[](b!)?) x) -> ()").arguments[0].type
    assert strip_alias(t) == TupleType((BaseType("Tensor"), OptionalType(ListType(BaseType("Tensor")))))


@pytest.mark.parametrize(("value", "text"), [
    ("plain", '"plain"'),
    ('say "hi"\\', '"say \\"hi\\"\\\\"'),
    ("\n\t\a\b\f\v", '"\\n\\t\\a\\b\\f\\v"'),
    ("\r\x00\x1b\x7f", '"\\015\\000\\033\\177"'),
    ("é#", '"é#"'),
    (1e-06, "1e-06"),
    (5.0, "5.0"),
    (True, "True"),
    ((1, 2), "[1, 2]"),
])
def test_format_default(value, text):
    assert format_default(value) == text
