"""Generated valid schemas: opgen and torch read them the same way, and the canonical text round-trips."""

from __future__ import annotations

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from schema_oracle import assert_agrees

from opgen.schema import SchemaError, parse_schema
from opgen.schema.model import SCALAR_TYPE_WORDS
from opgen.schema.parser import RESERVED_WORDS

SETTINGS = settings(max_examples=300, derandomize=True, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow])

names = st.from_regex(r"[a-z][a-z0-9_]{0,5}|_[a-z0-9]{1,3}|[A-Z][A-Za-z]{0,6}", fullmatch=True).filter(
    lambda n: n not in RESERVED_WORDS)
overloads = names.filter(lambda n: n != "default" and not n.startswith("__"))
sep = st.sampled_from([", ", ",", " , "])


def ints(lo=-(2**63), hi=2**63 - 1):
    return st.one_of(st.integers(-3, 3), st.integers(lo, hi)).map(str)


finite_floats = st.floats(allow_nan=False, allow_infinity=False, allow_subnormal=False)
float_texts = st.one_of(
    finite_floats.map(repr),
    st.sampled_from(["1e-6", "1e-06", "1.", "-0.5", ".5", "2", "1e5", "1.5E3", "1.5e+10", "-3", "0.0", "1e-05"]),
)
# Printable text, the escapes torch's strings know, and 3-digit octal codes.
string_chars = st.one_of(
    st.characters(min_codepoint=32, max_codepoint=126, blacklist_characters='"\\'),
    st.sampled_from(["\\n", "\\t", "\\a", "\\b", "\\f", "\\v", "\\\\", '\\"', "\\'", "\\000", "\\033", "\\177", "é", "#"]),
)
strings = st.lists(string_chars, max_size=6).map(lambda cs: '"' + "".join(cs) + '"')
devices = st.sampled_from(['"cpu"', '"cuda"', '"cuda:0"', '"meta"', "'cpu'", '"cuda:1"'])

# base type -> (strategy for one default value's text, or None when the type takes no default)
SCALARS = {
    "int": st.one_of(ints(), st.just("Mean")),
    "SymInt": ints(),
    "float": float_texts,
    "bool": st.sampled_from(["True", "False"]),
    "str": strings,
    "Scalar": st.one_of(ints(), float_texts),
    "ScalarType": st.one_of(st.sampled_from(sorted(SCALAR_TYPE_WORDS)), st.integers(0, 15).map(str)),
    "Layout": st.sampled_from(["strided", "0"]),
    "Device": devices,
    "MemoryFormat": st.sampled_from(["contiguous_format", "0"]),
    "Generator": None,
    "Any": None,
    "Tensor": None,
}
LISTABLE = {"int": True, "SymInt": True, "float": True, "bool": True, "Tensor": False, "Scalar": False,
            "ScalarType": False, "Device": False, "str": False}
letters = st.sampled_from("abcd")


@st.composite
def aliases(draw, write=None):
    """`(a)`, `(a!)`, `(a|b)`, `(a -> *)`, `(*)`, …"""
    before = draw(st.one_of(st.just("*"), st.lists(letters, min_size=1, max_size=2, unique=True).map("|".join)))
    is_write = draw(st.booleans()) if write is None else write
    text = before + ("!" if is_write else "")
    if draw(st.integers(0, 4)) == 0:
        text += draw(st.sampled_from([" -> *", " -> b", "->c|d"]))
    return f"({text})"


@st.composite
def argument_types(draw):
    """(type text, default strategy or None)."""
    base = draw(st.sampled_from(sorted(SCALARS)))
    scalar = SCALARS[base]
    form = draw(st.sampled_from(["plain", "optional", "list", "sized", "optional-list", "list-optional"]))
    alias = ""
    if base == "Tensor" and draw(st.booleans()):
        alias = draw(aliases())
    if form == "plain" or (form != "optional" and not (base in LISTABLE or base == "Tensor")):
        return base + alias, scalar
    if form == "optional":
        return base + alias + "?", _optional(scalar)
    if form == "list":
        if base == "Tensor" and alias == "" and draw(st.booleans()):
            return "Tensor[]" + draw(aliases(write=True)), None  # the c10d style `Tensor[](a!)`
        return base + alias + "[]", _list_of(scalar, base)
    if form == "sized" and base != "Tensor":
        n = draw(st.integers(0, 4))
        listed = _list_of(scalar, base, n)
        repeated = scalar.filter(lambda v: v in ("True", "False") or not v[:1].isalpha())  # torch repeats no words
        return f"{base}[{n}]", None if listed is None else st.one_of(repeated, listed)
    if form == "optional-list":
        return base + alias + "[]?", st.just("None")  # torch cannot parse a list default here
    if base == "Tensor":
        return "Tensor" + alias + "?[]", None
    return base + alias, scalar


def _optional(scalar):
    return st.just("None") if scalar is None else st.one_of(st.just("None"), scalar)


def _list_of(scalar, base, size=None):
    if scalar is None or not LISTABLE.get(base):
        return None
    lo, hi = (0, 3) if size is None else (size, size)
    return st.lists(scalar, min_size=lo, max_size=hi).map(lambda xs: "[" + ", ".join(xs) + "]")


@st.composite
def arguments(draw):
    count = draw(st.integers(0, 6))
    arg_names = draw(st.lists(names, min_size=count, max_size=count, unique=True))
    plain, defaulted = [], []
    for name in arg_names:
        typ, default = draw(argument_types())
        if default is not None and draw(st.booleans()):
            defaulted.append(f"{typ} {name}={draw(default)}")
        else:
            plain.append(f"{typ} {name}")
    parts = plain + defaulted  # no positional argument without a default after one with a default
    star = draw(st.integers(0, len(parts)))
    if draw(st.booleans()):
        # keyword-only arguments may come in any order: move some plain ones after the `*`
        kw = parts[star:]
        parts = parts[:star] + ["*"] + draw(st.permutations(kw))
    if not defaulted and draw(st.integers(0, 9)) == 0:
        parts.append("...")  # torch refuses defaults next to varargs
    return draw(sep).join(parts)


RETURN_TYPES = ["Tensor", "Tensor?", "Tensor[]", "int", "SymInt", "float", "bool", "Scalar", "ScalarType", "str",
                "int[]", "SymInt[]", "Tensor(a!)", "Tensor(b)", "Tensor(a!)[]", "Tensor[](a!)", "(int, Tensor)",
                "(Tensor)", "NoneType", "Dict(str, Tensor)", "Any", "Layout", "Device"]


@st.composite
def returns(draw):
    form = draw(st.sampled_from(["none", "single", "paren-single", "tuple", "named", "one-tuple", "varret"]))
    rtype = st.sampled_from(RETURN_TYPES)
    if form == "none":
        return "()"
    if form == "varret":
        return "..."
    if form == "single":
        name = draw(st.one_of(st.just(""), names.map(lambda n: " " + n)))
        t = draw(rtype)
        return f"({t}{name})" if t.startswith("(") and name else f"{t}{name}"
    if form == "paren-single":
        return f"({draw(rtype)})"
    if form == "one-tuple":
        return f"(({draw(rtype)}))"
    count = draw(st.integers(2, 4))
    types = draw(st.lists(rtype, min_size=count, max_size=count))
    if form == "named":
        ret_names = draw(st.lists(names, min_size=count, max_size=count, unique=True))
        types = [f"{t} {n}" for t, n in zip(types, ret_names)]
    return "(" + draw(sep).join(types) + ")"


@st.composite
def schemas(draw):
    head = draw(names)
    if draw(st.booleans()):
        head = draw(names) + "::" + head
    if draw(st.booleans()):
        head += "." + draw(overloads)
    arrow = draw(st.sampled_from([" -> ", "->", "  ->  "]))
    comment = draw(st.sampled_from(["", "", "", "  # a comment", "#x"]))  # torch's lexer skips comments too
    return f"{head}({draw(arguments())}){arrow}{draw(returns())}{comment}"


@SETTINGS
@given(schemas())
@example("a(Any a, int[0] a0=1, int[2]? b=Mean, float? c=2, float d=2, ScalarType[1] e=6) -> ()")  # found by CI runs
def test_generated_schemas_agree_with_torch_and_round_trip(text):
    assert_agrees(text)


@SETTINGS
@given(st.lists(string_chars, max_size=8).map("".join))
def test_string_defaults_survive_printing(body):
    assert_agrees(f'f(str s="{body}") -> ()')


@SETTINGS
@given(finite_floats)
def test_float_defaults_survive_printing(value):
    assert_agrees(f"f(float x={value!r}, float[] y=[{value!r}]) -> ()")


ANY_TYPE = st.sampled_from(sorted(SCALARS) + ["DeviceIndex", "SymBool", "complex", "Storage", "Stream", "QScheme"])
ANY_FORM = st.sampled_from(["{}", "{}?", "{}[]", "{}[2]", "{}[]?", "{}[1]?", "{}?[]", "{}[][]"])
ANY_LITERAL = st.one_of(
    st.sampled_from(["None", "True", "False", "Mean", "long", "float", "strided", "contiguous_format", "cpu", "inf",
                     '"cpu"', '"cuda:0"', '"mean"', "''", "0", "-1", "2", "1.5", "1e-6", ".5", "1.", "0x10", "1E5",
                     "-2E-3", "1j"]),
    ints().map(str), finite_floats.map(repr), strings,
)
ANY_DEFAULT = st.one_of(ANY_LITERAL, st.lists(ANY_LITERAL, max_size=3).map(lambda xs: "[" + ", ".join(xs) + "]"))


@settings(SETTINGS, max_examples=1500)  # most draws are refused by opgen, which costs nothing
@given(ANY_TYPE, ANY_FORM, ANY_DEFAULT)
def test_opgen_never_accepts_a_default_torch_refuses_or_misreads(base, form, default):
    # Wider than the valid-schema generator: any type with any default. opgen may refuse more
    # than torch (its documented refusals), but whatever it accepts, torch must read the same way.
    text = f"f({form.format(base)} x={default}) -> ()"
    try:
        parse_schema(text)
    except SchemaError:
        return
    assert_agrees(text)


@SETTINGS
@given(schemas(), st.data())
def test_any_prefix_or_mangling_is_parsed_or_refused_cleanly(text, data):
    # Cut a valid schema anywhere, or splice a token into it: the parser answers with a SchemaError
    # whose column lies inside the text (never another exception), or with what torch reads too.
    cut = data.draw(st.integers(0, len(text)))
    junk = data.draw(st.sampled_from(JUNK))
    for variant in (text[:cut], text[:cut] + junk + text[cut:], text[:cut] + junk):
        try:
            parse_schema(variant)
        except SchemaError as error:
            assert error.column is None or 1 <= error.column <= len(variant) + 1, (variant, error.column)
            error.render()
            continue
        assert_agrees(variant)  # what opgen accepts, torch accepts and reads the same way


JUNK = ["", "(", ")", "[", "]", ",", "?", "!", "->", "*", "=", "'", '"', "::", ".", "...", "|", "1", "x", "Tensor", "@",
        "é", "\\", "#", " ", "-", "a!", "(a)", "[]", "?[]", "-> *", "None", "=1", "=[]", "[2]", "(a!)", "e5", "0",
        "Dict(str, Tensor)", "(int, int)", "[1]?", "(a -> b)", "(*)", "=Mean", "=long"]
