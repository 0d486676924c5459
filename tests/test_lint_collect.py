"""The rooms of opgen/lint/collect/, each read on its own: the text (prefilter, lines walked, positions),
names (imports, constants, f-strings), the walk (what is read, who owns it), libraries, definitions,
registrations and their forms, wrappers, and function facts. No torch: these are pure readings of code."""

from __future__ import annotations

import ast
import textwrap

from opgen.lint.collect import collect_source, walk
from opgen.lint.collect import source as S
from opgen.lint.collect.context import FileContext
from opgen.lint.collect.functions import function_node
from opgen.lint.collect.libraries import library_at
from opgen.lint.collect.names import Names
from opgen.lint.records import UNKNOWN, FileRecord


def record(code: str, path: str = "m.py") -> FileRecord:
    return collect_source(path, textwrap.dedent(code).lstrip("\n"))


def context(code: str) -> FileContext:
    text = textwrap.dedent(code).lstrip("\n")
    return FileContext(FileRecord("m.py"), text, ast.parse(text))


def expr(code: str) -> ast.expr:
    return ast.parse(code, mode="eval").body


# -- source.py -------------------------------------------------------------------------------------------

def test_the_prefilter_passes_registration_code_and_skips_the_rest():
    assert S.may_register(b"@torch.library.custom_op('ns::f', mutates_args=())")
    assert S.may_register(b"from torch import library\n")
    assert not S.may_register(b"import torch\nx = torch.ones(3)\n")
    assert S.has_call_site(b"lib.define('f(Tensor x) -> Tensor')")
    assert not S.has_call_site(b"# see torch.library.custom_op for details\n")


CALL_SITE_TEXTS = [
    b"x = direct_register_custom_op(name, f)\ny = lib.impl('f', k)\n",
    b"torch.library.register_fake('ns::f')(f)  # custom_op(\n",
    b"c = torch.library.custom_op  # an alias\nd =\ttorch._library.fake_impl.x\nf = torch.library.a\n",
    b"getattr(\n  torch.library, 'impl')\ngetattr(torch._library)\nagetattr(torch.library)\n",
    b"from torch import library as L\n_scoped_library('ns', 'FRAGMENT')\nmy_impl(x)\nimpl (x)\n",
    b"s = 'register_fake(' + '''\ndefine(x)\n'''  # impl_abstract(\ndef fallback(self): pass\n",
    b"Library(\n=torch.library.impl\n.register_autograd\n.register_kernelx\n",
]


def test_call_sites_are_the_regex_matches_found_faster():
    """`_call_sites` tries the regex only where a match can start: its matches (so the verdicts) are exactly
    `finditer`'s, on each alternative of the pattern and on matches that overlap."""
    for text in CALL_SITE_TEXTS:
        expected = [m.span() for m in S.CALL_SITE.finditer(text)]
        assert expected, text
        assert [m.span() for m in S._call_sites(text)] == expected, text
    assert S.has_call_site(CALL_SITE_TEXTS[0]) and not S.has_call_site(b"s = 'lib.impl(x)'  # impl(\n")


def test_the_prefilter_looks_for_literals_that_share_a_substring_only_where_it_is():
    for text, expected in ((b"torch.library", True), (b"Library(", True), (b"from torch import library", True),
                           (b"register_fake", True), (b"register_kernel", True), (b"register_buffer", False),
                           (b"my_library = 1", False), (b"x.impl(", True), (b"impl", False),
                           (b"lib.define(s)", True), (b"x.define (", False), (b"impl(", False), (b".impl", False)):
        assert S.may_register(text) is expected, text


def test_only_lines_naming_an_api_or_a_local_alias_are_walked():
    text = "import torch\nc = torch.library.custom_op\n\n@c('ns::f')\ndef f(x): ...\ny = 1\n"
    assert S.interesting_lines(text, set()) == [2]
    assert S.interesting_lines(text, {"c"}) == [2, 4]
    assert S.covers([2, 4], 3, 4) and not S.covers([2, 4], 5, 6)


def test_positions_count_characters_and_literals_map_exactly():
    text = 'é = 1; lib.define("f(Tensor x) -> Tensor")\n'
    call = ast.parse(text).body[1].value
    source = S.Source("m.py", text)
    assert source.where(call).column == 8  # 1-based characters, although ast counts 'é' as two bytes
    literal = source.literal(call.args[0])
    assert literal is not None and text[literal.offset:].startswith("f(Tensor")
    assert source.literal(expr('"a\\tb"')) is None  # an escape: the characters do not map one to one


def test_noqa_comments_per_line_and_per_file():
    found = record("import torch  # noqa: OPG204, OPG301\n# opgen: noqa: OPG208\nx = 1  # noqa\n")
    assert found.noqa == {1: frozenset({"OPG204", "OPG301"}), 3: frozenset()}
    assert found.file_noqa == frozenset({"OPG208"})


# -- names.py ----------------------------------------------------------------------------------------------

def test_names_resolve_imports_constants_and_simple_fstrings():
    names = Names("m.py")
    tree = ast.parse("import torch.library as tl\nfrom torch.library import impl as i\nNS = 'ns'\n"
                     "OP = f'{NS}::f'\nOP = 'twice'\n")
    names.add_imports(tree.body[:2])
    names.add_constants(tree, {"NS": 1, "OP": 2})
    assert names.qualname(expr("tl.custom_op")) == "torch.library.custom_op"
    assert names.is_api(expr("i"), "impl") == "impl"
    assert names.value(expr("NS + '::g'")) == "ns::g"
    assert names.value(expr("f'{NS}::f.out'")) == "ns::f.out"
    assert names.value(expr("OP")) is UNKNOWN  # assigned twice: not a constant
    assert names.value(expr("f'{NS!r}'")) is UNKNOWN  # a conversion is not read


# -- walk.py -----------------------------------------------------------------------------------------------

def test_the_walk_reads_registration_statements_and_knows_their_owner():
    ctx = context("""
        import torch

        def helper(x):
            return x + 1

        def setup():
            torch.library.register_fake("ns::f", helper)
    """)
    walk.top_level(ctx)
    gathered = walk.gather(ctx)
    assert [ast.unparse(c.func) for c in gathered.calls] == ["torch.library.register_fake"]
    assert ctx.owners[id(gathered.calls[0])].name == "setup"
    assert set(ctx.functions) == {"helper", "setup"}


# -- libraries.py ------------------------------------------------------------------------------------------

def test_a_library_name_means_the_latest_library_assigned_above():
    found = record("""
        from torch.library import Library
        lib = Library("first", "DEF")
        lib.define("f(Tensor x) -> Tensor")
        lib = Library("second", "FRAGMENT")
        lib.define("g(Tensor x) -> Tensor")
    """)
    assert [(d.namespace, d.name) for d in found.definitions] == [("first", "f"), ("second", "g")]
    assert [(lib.namespace, lib.kind, lib.module_level) for lib in found.libraries] == [
        ("first", "DEF", True), ("second", "FRAGMENT", True)]
    ctx = context("lib = 1\n")
    assert library_at(ctx, expr("lib"), 1) is None


# -- definitions.py and registrations.py ------------------------------------------------------------------

def test_definitions_and_registrations_of_each_style():
    found = record("""
        import torch
        from torch.library import Library, impl, register_fake

        lib = Library("ns", "FRAGMENT")
        lib.define("scale(Tensor x, float s) -> Tensor", tags=(torch.Tag.pt2_compliant_tag,))
        lib.impl("scale", lambda x, s: x * s, "CUDA")


        @torch.library.custom_op("ns::add", mutates_args=(), device_types="cpu")
        def add(x: torch.Tensor) -> torch.Tensor:
            return x + 1


        @add.register_fake
        def _(x):
            return torch.empty_like(x)


        register_fake("ns::scale")(lambda x, s: torch.empty_like(x))
    """)
    # decorated functions are read before calls: custom_op's kernel and fake, then the Library's
    assert [(d.name, d.style, d.tags, d.device_types) for d in found.definitions] == [
        ("add", "custom_op", (), ("CPU",)), ("scale", "library", ("pt2_compliant_tag",), None)]
    assert [(r.role, r.name, r.key, r.api) for r in found.registrations] == [
        ("kernel", "add", "CPU", "custom_op"), ("fake", "add", "fake", "CustomOpDef.register_fake"),
        ("kernel", "scale", "CUDA", "Library.impl"), ("fake", "scale", "fake", "register_fake")]
    assert found.registrations[1].origin is found.definitions[0]  # the fake belongs to that definition


# -- wrappers.py -------------------------------------------------------------------------------------------

def test_a_local_wrapper_is_read_at_each_use_with_its_arguments():
    found = record("""
        import torch


        def meta(op_name):
            return torch.library.register_fake(f"ns::{op_name}")


        @meta("rows")
        def rows_meta(x):
            return x.new_empty(x.shape)
    """)
    assert [(r.namespace, r.name, r.function.name, r.where.line) for r in found.registrations] == [
        ("ns", "rows", "rows_meta", 8)]


# -- functions.py and facts.py -----------------------------------------------------------------------------

def test_function_facts_say_what_a_body_does():
    ctx = context("""
        import torch

        def kernel(x, out, n: int = 3):
            x.add_(1)
            out[0] = x.sum().item()
            y = torch.empty(n)
            return x
    """)
    ctx.add_imports([ctx.tree.body[0]])
    facts = function_node(ctx, ctx.tree.body[1])
    assert [(p.name, p.default) for p in facts.params] == [("x", None), ("out", None), ("n", 3)]
    assert sorted((f.line, f.what, f.param) for f in facts.mutations) == [
        (4, "calls .add_() on", "x"), (5, "assigns into", "out")]
    assert [f.what for f in facts.data_reads] == [".item()"]
    assert [f.what for f in facts.device_less_allocs] == ["torch.empty"]
    assert [f.param for f in facts.returned_params] == ["x"]
    assert function_node(ctx, ctx.tree.body[1]) is facts  # read once
