"""Malformed schemas, and schemas torch accepts but reads wrongly: each refused at the right column."""

from __future__ import annotations

import json

import pytest

from opgen.schema import SchemaError, parse_schema

# (schema, where: a 1-based column or the text the caret must point at, message fragment, hint fragment)
CASES = [
    ("", 1, "empty schema", "a schema looks like"),
    ("   ", 1, "empty schema", None),
    ("(Tensor x) -> Tensor", "(", "expected an operator name", "a schema looks like"),
    ("f", 2, "expected '(' to open the argument list, found end of input", 'write "f(<arguments>) -> <returns>"'),
    ("f Tensor x) -> Tensor", "Tensor", "expected '(' to open the argument list", None),
    ("f(Tensor x -> Tensor", "->", "expected ',' or ')' after the argument", None),
    ("f(Tensor x) Tensor", 13, "expected '->' after the argument list, found 'Tensor'", "every schema declares its returns"),
    ("f(Tensor x)", 12, "expected '->' after the argument list, found end of input", None),
    ("f(Tensor x) - > Tensor", "-", "expected '->' after the argument list, found '-'", None),
    ("f(Tensor x) -> ", 16, "expected a type, found end of input", None),
    ("f(Tensor x) -> Tensor junk more", "more", "unexpected 'more' after the returns", "a schema ends after its returns"),
    ("f(Tensor x) -> Tensor)", 22, "unexpected ')' after the returns", None),
    ("f(Tensor x) -> (Tensor, Tensor", 31, "expected ',' or ')' in the returns, found end of input", None),
    ("f(Tensor x) -> (Tensor a,)", ",", "trailing ','", "remove the last comma"),
    ("f(Tensor x,) -> Tensor", ",", "trailing ','", "remove the last comma"),
    ("f(Tensor x,, Tensor y) -> Tensor", 12, "expected a type, found ','", "types are Tensor"),
    ("f(Tensr x) -> Tensor", "Tensr", "unknown type 'Tensr'", "did you mean 'Tensor'?"),
    ("f(Tensor x) -> Tensr", "Tensr", "unknown type 'Tensr'", "did you mean 'Tensor'?"),
    ("f(Tensor x, SymInteger n) -> ()", "SymInteger", "unknown type 'SymInteger'", "did you mean 'SymInt'?"),
    ("f(SymFloat x) -> Tensor", "SymFloat", "unsupported type 'SymFloat'", "write float"),
    ("f(Dimname d) -> Tensor", "Dimname", "unsupported type 'Dimname'", "take an `int` dimension"),
    ("f(Tensor) -> Tensor", ")", "expected an argument name after type 'Tensor', found ')'", "each argument is"),
    ("f(Tensor 1x) -> Tensor", "1x", "expected an argument name", None),
    ("f(Tensor x, int y=1.5) -> Tensor", "1.5", "default for 'y' does not fit type 'int': 1.5 is not an integer",
     "write an integer"),
    ("f(bool b=1) -> ()", "1)", "default for 'b' does not fit type 'bool': 1 is not True or False",
     "write True or False"),
    ("f(float x=True) -> ()", "True", "True is not a number", None),
    ('f(str s=1) -> ()', "1)", "1 is not a quoted string", 'a quoted string such as "mean"'),
    ("f(int x=0x10) -> ()", "0x10", "hex literal '0x10' as a default", "write it in decimal (16)"),
    ("f(int[0x2] x) -> ()", "0x2", "hex literals are not allowed", "decimal"),
    ("f(Tensor x, Tensor x) -> ()", 20, "duplicate argument name 'x'", "rename one"),
    ("f(Tensor x, int y=1, int z) -> ()", "int z", "argument 'z' has no default but follows 'y'",
     "make it keyword-only after '*'"),
    ("f.default(Tensor x) -> ()", "default", "'default' is not a legal overload name", "write 'f(' for that"),
    ("f.__x(Tensor x) -> ()", "__x", "'__x' is not a legal overload name", "start with '__'"),
    ("f(Tensor x, *, int a, *, int b) -> ()", 23, "a second '*' in the argument list", "the first is at column 13"),
    ("f(float eps=inf) -> ()", "inf", "'inf' is not a valid default", "1e+300"),
    ("f(float eps=nan) -> ()", "nan", "'nan' is not a valid default", "optional with None"),
    ("f(Tensor[] x=None) -> ()", "None", "default for 'x' does not fit type 'Tensor[]': None needs an optional type",
     "make it optional (Tensor[]?) and default to None"),
    # a list of optional tensors stays one when it becomes optional (torch parses `Tensor?[]? x=None`)
    ("f(Tensor?[] x=[]) -> ()", "[])", "a Tensor?[] argument cannot have a list default",
     "make it optional (Tensor?[]?) and default to None"),
    ("f(Tensor(a! x) -> ()", "x)", "expected ')' to close the alias annotation, found 'x'", "(a!), (a|b) or (a -> *)"),
    ("f(Tensor(! x) -> ()", "!", "expected an alias set name such as 'a', found '!'", None),
    ("f(Tensor(a -> ) x) -> ()", ") x", "expected an alias set after '->', found ')'", None),
    ('f(str s="abc) -> ()', '"', "unterminated string", 'close the string with "'),
    ("f(str s='abc) -> ()", "'", "unterminated string", "close the string with '"),
    ('f(str s="a\\x41") -> ()', "\\x", "unsupported escape '\\x' in a string", "3-digit octal"),
    ('f(str s="a\\r") -> ()', "\\r", "unsupported escape '\\r' in a string", "\\015"),
    ('f(str s="\\377") -> ()', "\\3", "octal escape '\\377' is not ASCII", "invalid UTF-8"),
    ("f(Tensor x) -> () @", "@", "unexpected character '@'", "schemas use ASCII letters"),
    ("f(Tensor é) -> ()", "é", "unexpected character 'é'", None),
    ("f(int x=99999999999999999999) -> ()", "999", "does not fit in a 64-bit integer", None),
    ("f(float x=1e400) -> ()", "1e400", "'1e400' is out of the range of a double", "stod"),
    ("f(float x=1e-400) -> ()", "1e-400", "'1e-400' is out of the range of a double", None),
    ("f(complex c=1j) -> ()", "1j", "complex literal '1j' as a default", None),
    ("f(Scalar s=1E5) -> ()", "1E5", "'1E5' with a capital E", "torch reads it as the integer 1"),
    ('f(Device d="gpu") -> ()', '"gpu"', "unknown device type 'gpu'", None),
    ('f(Device d="cuda:x") -> ()', '"cuda', "is not a device string", None),
    ("f(int[]? x=[1]) -> ()", "[1]", "torch cannot parse a [list] default for an optional list", None),
    ("f(int[] x=1) -> ()", "1)", "a list type needs a [list] default", "a list of an integer"),
    ("f(Tensor[] x=[]) -> ()", 14, "a Tensor[] argument cannot have a list default", "Tensor[]?"),
    ("f(Scalar[] x=[1, 2.5]) -> ()", "[1", "a Scalar[] argument cannot have a list default", "Scalar[]?"),
    ('f(Device[1] d="cpu") -> ()', '"cpu"', "a Device[] argument cannot have a list default", None),
    ("f(int[2] r=Mean) -> ()", "Mean", "cannot repeat the word 'Mean' over a 2-element list; write [Mean, Mean]", None),
    ("f(ScalarType d=float128) -> ()", "float128", "unknown ScalarType 'float128'", None),
    ("f(MemoryFormat m=channels_last) -> ()", "channels_last", "unknown MemoryFormat 'channels_last'", None),
    ("f(int r=Sum) -> ()", "Sum", "unknown word 'Sum'", None),
    ("f(Tensor if) -> ()", "if", "'if' is a reserved word and cannot be an argument name", "rename it"),
    ("def(Tensor x) -> ()", "def", "'def' is a reserved word and cannot be an operator name", None),
    ("f(Tensor x) -> Tensor return", "return", "'return' is a reserved word and cannot be a return name", None),
    ("f(int a=1, ...) -> ()", "...", "a schema with varargs '...' cannot have defaults", "remove the default of 'a'"),
    ("f(..., Tensor x) -> ()", "...", "'...' must be the last argument", "move '...' to the end"),
    ("f(int[-1] x) -> ()", "-1", "a list size must be a non-negative integer", None),
    ("f(int[2 x) -> ()", "x)", "expected ']' to close the list type", None),
    ("f(Tensor?? x) -> ()", 10, "'Tensor?' is already optional", "write one '?'"),
    ("f(int[2]?[] x) -> ()", 10, "a list of the fixed-size list 'int[2]?'", "T[N] or T[N]?"),
    ("f((int[2], int) x) -> ()", "2]", "a fixed-size list inside a tuple or Dict type", "write []"),
    ("f(Dict(str?, Tensor) d) -> ()", "str?", "'str?' cannot be a Dict key", "torch's dict keys are"),
    ("f(float x=2.22507385850720114e-308) -> ()", "2.2", "out of the range of a double", None),
    ("f(Dict(str Tensor) d) -> ()", "Tensor)", "expected ',' between the key and value types of Dict", None),
    ("ns::(Tensor x) -> ()", "(", "expected an operator name after '::'", None),
    ("f.(Tensor x) -> ()", "(", "expected an overload name after '.'", None),
    ("f(int x=) -> ()", ")", "expected a default value, found ')'", "defaults are None"),
    ("f(int[] x=[1, 2) -> ()", ")", "expected ',' between list elements", None),
]


def _column(text: str, where) -> int:
    return where if isinstance(where, int) else text.index(where) + 1


def _id(case) -> str:
    return case[0] or "<empty>"


def test_there_are_enough_cases_and_they_are_distinct():
    assert len(CASES) >= 40
    assert len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize(("text", "where", "message", "hint"), CASES, ids=[_id(c) for c in CASES])
def test_refused_with_column_message_and_hint(text, where, message, hint):
    with pytest.raises(SchemaError) as caught:
        parse_schema(text)
    error = caught.value
    assert error.column == _column(text, where), error.render()
    assert message in error.message
    if hint is not None:
        assert error.hint and hint in error.hint, error.render()
    rendered = error.render().splitlines()
    assert rendered[0] == f"error: column {error.column}: {error.message}"
    if text.strip():
        assert rendered[1] == f"  | {text}"
        assert rendered[2] == "  | " + " " * (error.column - 1) + "^"


def test_a_non_string_is_refused():
    with pytest.raises(SchemaError, match="a schema must be a string, got int"):
        parse_schema(3)


def test_a_comment_is_not_an_error_and_keeps_columns():
    assert str(parse_schema("f(Tensor x) -> Tensor  # the identity")) == "f(Tensor x) -> Tensor"
    with pytest.raises(SchemaError) as caught:
        parse_schema("f(Tensor x, # a comment\n int y=1.5) -> Tensor")
    assert caught.value.column == len("f(Tensor x, # a comment\n int y=") + 1


# -- the same through the command line -----------------------------------------------------------
@pytest.mark.parametrize(("text", "where", "message", "hint"), CASES, ids=[_id(c) for c in CASES])
def test_cli_refuses_with_exit_2_and_no_traceback(run_opgen, text, where, message, hint):
    result = run_opgen("explain", text)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stdout == ""  # no partial output
    assert "Traceback" not in result.stderr
    assert message in result.stderr
    if text.strip():
        assert f"column {_column(text, where)}:" in result.stderr
        assert f"  | {text}\n" in result.stderr
    if hint is not None:
        assert "= hint: " in result.stderr and hint in result.stderr


def test_cli_json_stdin_reports_every_bad_line_in_order(run_opgen):
    lines = [c[0] for c in CASES if c[0].strip() and "\n" not in c[0]]
    result = run_opgen("explain", "--json", "-", input="\n".join(lines) + "\n")
    assert result.returncode == 2
    assert "Traceback" not in result.stdout + result.stderr
    objects = [json.loads(line) for line in result.stdout.splitlines()]
    assert [o["input"] for o in objects] == lines
    expected = {c[0]: (_column(c[0], c[1]), c[2]) for c in CASES}
    for obj in objects:
        column, message = expected[obj["input"]]
        assert obj["error"]["column"] == column
        assert message in obj["error"]["message"]


def test_none_for_a_non_optional_tensor_or_scalar_is_accepted_as_torch_does():
    """torch 2.13's parser takes `Tensor x=None` and `int n=None` (not `Tensor[] x=None`); so does opgen, and both
    print it back the same."""
    import torch

    for text in ("f(Tensor x=None) -> Tensor", "f(Tensor x, int n=None, float s=None) -> ()"):
        assert str(parse_schema(text)) == str(torch._C.parse_schema(text)) == text
