"""Fuzzing the input boundary (issue 29): the shipped examples and schemas, mutated the ways bad input comes (keys
deleted, duplicated or retyped, odd unicode, long names, deep nesting, truncation), must load, explain and lint
into a result or an OpgenError (located), never another exception: another exception is what the CLI reports as
"internal error ... this is a bug in opgen". Derandomised, so a failure is the same on every run."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opgen.errors import OpgenError
from opgen.explain import describe
from opgen.lint.checks import check_records
from opgen.lint.collect import collect_source
from opgen.schema import parse_schema
from opgen.spec.load import load_spec_text

REPO = Path(__file__).resolve().parents[1]
SPECS = [path.read_text(encoding="utf-8") for path in sorted(REPO.glob("examples/**/*.yaml"))]
SCHEMAS = sorted({op["schema"] for text in SPECS for op in yaml.safe_load(text)["ops"]})
SETTINGS = settings(derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck))
ODD = ["\u202e", "\u200b", "\u0301", "\U0001f600", "\ufeff", "\x85", "\u2028", "\t", "\\", "'", '"', ": ", "#", "&a",
       "*a", "!!python/object:os.system", "{", "[", "\u00e9", "\uffff"]
VALUES = [None, True, 0, -1, 2**70, 1.5, float("inf"), float("nan"), "", "x" * 5000, [], {}, [1, [2, [3]]],
          {"shape": [2]}, {"values": [[1.0], [2.0, 3.0]]}, "Tensor(a!) x"]


def _paths(tree, prefix=()):
    """Every (path, value) inside nested dicts and lists."""
    yield prefix, tree
    if isinstance(tree, dict):
        for key, value in tree.items():
            yield from _paths(value, (*prefix, key))
    elif isinstance(tree, list):
        for index, value in enumerate(tree):
            yield from _paths(value, (*prefix, index))


def _replace(tree, path, new):
    if not path:
        return new
    parent = tree
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = new
    return tree


def _mutate(tree, data) -> object:
    spots = list(_paths(tree))
    path, value = spots[data.draw(st.integers(0, len(spots) - 1))]
    kind = data.draw(st.sampled_from(["delete", "retype", "unicode", "long", "nest", "duplicate"]))
    if kind == "delete" and path:
        parent = tree
        for key in path[:-1]:
            parent = parent[key]
        del parent[path[-1]]
        return tree
    if kind == "retype":
        return _replace(tree, path, copy.deepcopy(data.draw(st.sampled_from(VALUES))))
    if kind == "unicode" and isinstance(value, str):
        at = data.draw(st.integers(0, len(value)))
        return _replace(tree, path, value[:at] + data.draw(st.sampled_from(ODD)) + value[at:])
    if kind == "long" and isinstance(value, str):
        return _replace(tree, path, value + "_" + "n" * data.draw(st.sampled_from([60, 250, 4000])))
    if kind == "nest":
        for _ in range(data.draw(st.sampled_from([3, 70]))):
            value = [value] if data.draw(st.booleans()) else {"k": value}
        return _replace(tree, path, value)
    if kind == "duplicate" and isinstance(value, list) and value:
        return _replace(tree, path, value + value[:1])
    return tree


def _text_mutation(text: str, data) -> str:
    lines = text.split("\n")
    kind = data.draw(st.sampled_from(["none", "dup-line", "drop-line", "truncate", "tab", "deep"]))
    at = data.draw(st.integers(0, max(len(lines) - 1, 0)))
    if kind == "dup-line":  # a duplicated key, or a duplicated list item
        lines.insert(at, lines[at])
    elif kind == "drop-line":
        del lines[at]
    elif kind == "truncate":
        return text[:data.draw(st.integers(0, len(text)))]
    elif kind == "tab":
        lines[at] = "\t" + lines[at]
    elif kind == "deep":
        lines.append("    doc: " + "[" * 3000 + "]" * 3000)
    return "\n".join(lines)


def _expect_opgen_error_or_result(function, *args):
    try:
        return function(*args)
    except OpgenError:
        return None


@settings(SETTINGS, max_examples=80)
@given(st.data())
def test_mutated_specs_load_or_fail_with_a_located_error(data):
    text = data.draw(st.sampled_from(SPECS))
    if data.draw(st.booleans()):
        tree = yaml.safe_load(text)
        for _ in range(data.draw(st.integers(1, 3))):
            tree = _mutate(tree, data)
        try:
            text = yaml.safe_dump(tree, allow_unicode=data.draw(st.booleans()), sort_keys=False)
        except (yaml.YAMLError, RecursionError):
            return  # not a document anyone can write
    text = _text_mutation(text, data)
    try:
        load_spec_text(text, "fuzz.yaml")
    except OpgenError as error:
        assert error.path == "fuzz.yaml" and error.line is not None, error.render()


SCHEMA_PIECES = ["(", ")", "[", "]", "?", "!", ",", " ", "->", "*", "=", "Tensor", "int", "a", "(a!)", "[]", "99",
                 "9" * 30, "-", ".", "::", "\u00e9", "Dict(str, ", "None", "1e400", "'s'", "\\", "..."]


@settings(SETTINGS, max_examples=300)
@given(st.data())
def test_mutated_schemas_explain_or_fail_at_a_column(data):
    schema = data.draw(st.sampled_from(SCHEMAS))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(schema)))
        piece = data.draw(st.sampled_from(SCHEMA_PIECES)) * data.draw(st.sampled_from([1, 2, 40, 3000]))
        if data.draw(st.booleans()):
            schema = schema[:at] + piece + schema[at:]
        else:
            schema = schema[:at] + schema[at + len(piece):]
    try:
        describe(parse_schema(schema))
    except OpgenError as error:
        assert error.column is not None or not schema.strip(), (schema[:200], error.message)


CODE = '''import torch
lib = torch.library.Library("fz", "FRAGMENT")
lib.define({schema!r})
lib.impl("{name}", lambda *a: a[0], "CPU")

@torch.library.register_fake("fz::{name}")
def _(x, *rest):
    return torch.empty_like(x)
'''


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::SyntaxWarning")  # Python's, on the fuzzed code
@settings(SETTINGS, max_examples=40)
@given(st.data())
def test_mutated_registration_code_lints_without_an_internal_error(data):
    schema = data.draw(st.sampled_from(SCHEMAS))
    if data.draw(st.booleans()):
        schema = "(" * data.draw(st.sampled_from([1, 20, 5000])) + schema
    name = schema.split("(")[0] or "f"
    code = CODE.format(schema=schema, name=name)
    at = data.draw(st.integers(0, len(code)))
    code = code[:at] + data.draw(st.sampled_from(["", *ODD, "\n    (" * 50, "\x00", "lib.define(", '"""'])) + code[at:]
    record = collect_source("fuzz.py", code)
    for diagnostic in check_records([record]):
        assert diagnostic.path == "fuzz.py" and diagnostic.line is not None


@pytest.mark.parametrize("text", ["", "\x00", "ops: [" + "{a: " * 200, "---\n...\n---\n", "? [a, b]\n: c\n",
                                  "namespace: x\nops: &a [*a]\n", "!!binary xx\n", "namespace: [\n"])
def test_degenerate_documents_are_located_errors(text):
    with pytest.raises(OpgenError) as refused:
        load_spec_text(text, "doc.yaml")
    assert refused.value.path == "doc.yaml" and refused.value.line is not None
