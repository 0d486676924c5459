"""Parse operator schema strings into `opgen.schema.model` objects.

Accepts the grammar of `torch._C.parse_schema` that custom ops use, and refuses, with the same
error type, what torch accepts but gets wrong (mistyped defaults, hex literals, duplicate names…).
Never imports torch.
"""

from __future__ import annotations

import difflib
import math
import re
from decimal import Decimal

from .errors import SchemaError
from .model import (
    ENUM_WORDS,
    Alias,
    Argument,
    BaseType,
    DictType,
    EnumWord,
    ListType,
    OptionalType,
    Return,
    Schema,
    TupleType,
    Type,
    base_name,
    format_default,
    new_argument,
    new_schema,
    strip_alias,
)

KNOWN_TYPES = frozenset({
    "Tensor", "int", "SymInt", "SymBool", "float", "bool", "str", "Scalar", "ScalarType", "Layout", "Device",
    "DeviceIndex", "MemoryFormat", "Generator", "Storage", "Stream", "QScheme", "complex", "Any",
    "NoneType",
})
RETIRED_TYPES = {
    "Dimname": "named tensors are gone from torch (`Dimname` no longer parses in torch 2.13); "
    "take an `int` dimension instead",
    "SymFloat": "torch's schema parser has no SymFloat; write float",
}
# Shared instances for the common case of a type with no alias annotation (they are immutable).
_PLAIN_TYPES = {name: BaseType(name) for name in KNOWN_TYPES}
_OPTIONAL_OF = {name: OptionalType(t) for name, t in _PLAIN_TYPES.items()}
_LIST_OF = {name: ListType(t) for name, t in _PLAIN_TYPES.items()}
_PLAIN_RETURNS = {name: Return(t) for name, t in _PLAIN_TYPES.items()}
_END = ("",) * 5
_DICT_KEY_TYPES = frozenset({"int", "SymInt", "bool", "float", "complex", "str", "Tensor", "Device", "DeviceIndex",
                             "ScalarType", "Layout", "MemoryFormat", "Any"})
_TYPE_SUFFIX = frozenset({"?", "[", "(", "!"})  # a token after a type name that makes the type longer
_IDENT_FIRST = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_")
_INTEGER_TYPES = frozenset({"int", "SymInt", "DeviceIndex"})
# Element types whose lists torch can give a default ("lists are only supported for float, int and
# complex types"; dtype, layout and memory format are ints there, and so is bool).
_LIST_DEFAULT_TYPES = frozenset({"int", "SymInt", "DeviceIndex", "float", "bool", "ScalarType", "Layout",
                                 "MemoryFormat"})

# One alternation, so that `findall` splits a schema into token strings in a single C call;
# the kind of a token follows from its first character. Positions are only worked out again
# (by `_offsets`) when an error needs a column.
_TOKEN = re.compile(
    r"""\s*(
        [A-Za-z_]\w*
      | [()\[\],?!|*=] | -> | :: | \.\.\.
      | -?0[xX][0-9a-fA-F]+
      | -?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?)[jJ]?
      | "{3}(?:[^\\]|\\[\s\S])*?"{3} | '{3}(?:[^\\]|\\[\s\S])*?'{3}
      | "(?:[^"\\\n]|\\[\s\S])*" | '(?:[^'\\\n]|\\[\s\S])*'
      | \.
      | \S
    )""",
    re.VERBOSE | re.ASCII,  # most frequent alternatives first; order matters only where they overlap
)
# A `#` outside a string starts a comment that runs to the end of the line (torch's lexer agrees).
_COMMENT = re.compile(r"""("{3}(?:[^\\]|\\[\s\S])*?"{3}|'{3}(?:[^\\]|\\[\s\S])*?'{3}"""
                      r"""|"(?:[^"\\\n]|\\[\s\S])*"|'(?:[^'\\\n]|\\[\s\S])*')|\#[^\n]*""")
_SUSPICIOUS = re.compile(r"[^\w\s()\[\],.?!|*=:>\-]", re.ASCII)
_OPS = frozenset({"::", "->", "...", "(", ")", "[", "]", ",", ".", "?", "!", "|", "*", "="})
# Words torch's lexer keeps for itself: it refuses them as operator, argument, return or alias names.
RESERVED_WORDS = frozenset({
    "False", "None", "True", "and", "as", "assert", "break", "class", "continue", "def", "del", "elif", "else",
    "for", "global", "if", "import", "in", "is", "not", "or", "pass", "raise", "return", "while", "with",
    "NoneType", "Ellipsis",
})
# Escapes torch's string literals know (torch/csrc/jit/frontend/parse_string_literal.h); anything
# else after a backslash must be a 3-digit octal code.
_ESCAPES = {"\\": "\\", "'": "'", '"': '"', "\n": "\n", "a": "\a", "b": "\b", "f": "\f", "n": "\n", "v": "\v",
            "t": "\t"}
_ESCAPE_HINT = "torch's schema strings know \\n \\t \\a \\b \\f \\v \\\\ \\\" \\' and 3-digit octal codes such as \\015"
# Device types `c10::Device` parses from a string default; npu is torch_npu's name for privateuseone.
DEVICE_TYPES = frozenset({
    "cpu", "cuda", "ipu", "xpu", "mkldnn", "opengl", "opencl", "ideep", "hip", "ve", "fpga", "maia", "xla", "lazy",
    "vulkan", "mps", "meta", "hpu", "mtia", "privateuseone", "npu",
})
_DEVICE = re.compile(r"([a-z_]+)(?::(0|[1-9]\d*))?")
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_INTEGER = re.compile(r"-?\d+")
_OCTAL = re.compile(r"[0-7]{3}")
_NONZERO_MANTISSA = re.compile(r"-?0*\.?0*[1-9]")
# How deep types (T[]?, (T, U), Dict(K, V)) and default lists may nest: real schemas need 2; a limit keeps a
# hostile schema from exhausting Python's recursion in the parser and in everything that walks its types.
MAX_NESTING = 16
# Digits an integer literal may have: Python refuses to convert longer ones, and torch's int64 has 19.
_MAX_DIGITS = 4000
_FLOAT_MIN_NORMAL = 2.2250738585072014e-308
_EXACT_MIN_NORMAL = Decimal(_FLOAT_MIN_NORMAL)  # strtod flags ERANGE below it even when rounding up to it


def _kind(token: str) -> str:
    if not token:
        return "eof"
    first = token[0]
    if first.isalpha() or first == "_":
        return "ident"
    if first in "\"'":
        return "string"
    if token in _OPS:
        return "op"
    if first.isdigit() or (len(token) > 1 and first in "-."):
        return "hex" if "x" in token or "X" in token else "number"
    return "bad"


def _blank_comments(text: str) -> str:
    """`text` with comments replaced by spaces, so that columns stay where they were."""
    return _COMMENT.sub(lambda m: m.group(1) or " " * len(m.group(0)), text)


def _offsets(text: str) -> list[int]:
    starts = [m.start(1) for m in _TOKEN.finditer(text)]
    return starts + [len(text)] * len(_END)


class _Parser:
    __slots__ = ("anonymous", "nesting", "pos", "scan", "text", "toks")

    def __init__(self, text: str) -> None:
        self.text = text
        self.nesting = 0  # open tuple types, Dict types and default lists around the position
        self.anonymous = 0  # `Tensor!` sets made so far: torch names them $0, $1, ... in schema order
        self.scan = _blank_comments(text) if "#" in text else text
        self.toks = _TOKEN.findall(self.scan)
        self.toks.extend(_END)  # "" marks the end; the fast paths look up to 4 tokens ahead
        self.pos = 0
        if not _SUSPICIOUS.search(self.scan):
            return
        for i, tok in enumerate(self.toks):
            if len(tok) == 1 and not ((tok.isascii() and tok.isalnum()) or tok == "_" or tok in _OPS):
                self.pos = i
                if tok in "\"'":
                    self.fail("unterminated string", hint=f"close the string with {tok}")
                self.fail(f"unexpected character {tok!r}",
                          hint="schemas use ASCII letters, digits, _ and ( ) [ ] , . ? ! | * = -> ::")

    # -- helpers ------------------------------------------------------------------------------
    def fail_at(self, offset: int, message: str, hint: str | None = None):
        raise SchemaError(message, source=self.text, column=offset + 1, hint=hint)

    def fail(self, message: str, hint: str | None = None, index: int | None = None):
        self.fail_at(_offsets(self.scan)[self.pos if index is None else index], message, hint)

    def enter(self, what: str) -> None:
        """One level deeper into a tuple type, a Dict type or a default list (the caller leaves it again)."""
        self.nesting += 1
        if self.nesting > MAX_NESTING:
            self.fail(f"{what} nested more than {MAX_NESTING} deep",
                      hint="opgen reads schemas nested a few levels deep (real ones need two); flatten it")

    def not_reserved(self, word: str, what: str, index: int) -> None:
        if word in RESERVED_WORDS:
            self.fail(f"{word!r} is a reserved word and cannot be {what}", index=index,
                      hint=f"torch's schema parser refuses it; rename it, e.g. '{word.lower()}_'")

    def kind(self, index: int | None = None) -> str:
        return _kind(self.toks[self.pos if index is None else index])

    def describe(self, index: int | None = None) -> str:
        tok = self.toks[self.pos if index is None else index]
        return repr(tok) if tok else "end of input"

    def peek(self, value: str) -> bool:
        return self.toks[self.pos] == value

    def accept(self, value: str) -> bool:
        if self.toks[self.pos] == value:
            self.pos += 1
            return True
        return False

    def expect(self, value: str, context: str, hint: str | None = None) -> None:
        if not self.accept(value):
            self.fail(f"expected {value!r} {context}, found {self.describe()}", hint)

    def ident(self, what: str, hint: str | None = None) -> str:
        tok = self.toks[self.pos]
        if not tok or not (tok[0].isalpha() or tok[0] == "_"):
            self.fail(f"expected {what}, found {self.describe()}", hint)
        self.pos += 1
        return tok

    # -- grammar ------------------------------------------------------------------------------
    def schema(self) -> Schema:
        toks = self.toks
        spans: dict = {}
        namespace = None
        name = toks[0]
        if name[:1] not in _IDENT_FIRST:
            self.ident("an operator name", hint='a schema looks like "my_op(Tensor x) -> Tensor"')
        name_at = 0
        if toks[1] == "::":
            self.not_reserved(name, "a namespace", 0)
            namespace, name_at, self.pos = name, 2, 2
            name = self.ident("an operator name after '::'")
        if name in RESERVED_WORDS:
            self.not_reserved(name, "an operator name", name_at)
        self.pos = name_at + 1
        spans["name"] = name_at
        overload = ""
        if toks[self.pos] == ".":
            self.pos += 1
            overload_at = self.pos
            overload = self.ident("an overload name after '.'")
            spans["overload"] = overload_at
            if overload == "default":
                self.fail("'default' is not a legal overload name", index=overload_at,
                          hint=f"torch reserves it for the unnamed overload: write '{name}(' for that, "
                          f"or pick another name such as '{name}.base('")
            if overload.startswith("__"):
                self.fail(f"{overload!r} is not a legal overload name", index=overload_at,
                          hint="torch refuses overload names that start with '__'; drop the leading underscores")
            self.not_reserved(overload, "an overload name", overload_at)
        self.expect("(", "to open the argument list", hint=f'write "{name}(<arguments>) -> <returns>"')
        arguments, varargs = self.arguments(spans)
        if toks[self.pos] != "->":
            self.fail(f"expected '->' after the argument list, found {self.describe()}",
                      hint="every schema declares its returns: '-> Tensor', '-> (Tensor a, Tensor b)' or '-> ()'")
        self.pos += 1
        spans["returns"] = self.pos
        returns, returns_tuple, varret = self.returns()
        if toks[self.pos]:
            self.fail(f"unexpected {self.describe()} after the returns", hint="a schema ends after its returns")
        spans["text"] = self.text
        return new_schema(name, tuple(arguments), tuple(returns), overload, namespace, returns_tuple, varargs, varret,
                          spans)

    def arguments(self, spans: dict) -> tuple[list[Argument], bool]:
        # The hot loop of the parser: the position lives in a local and goes back to `self.pos`
        # only around calls that read it (the general type parser, defaults, errors).
        args: list[Argument] = []
        arg_positions: list[int] = []  # token index of each argument, for span_column
        spans["args"] = arg_positions
        seen: set[str] = set()
        kwarg_only = False
        star_at = 0
        first_default: Argument | None = None
        varargs = False
        toks = self.toks
        pos = self.pos
        if toks[pos] == ")":
            self.pos = pos + 1
            return args, varargs
        while True:
            tok = toks[pos]
            if tok == "*":
                if kwarg_only:
                    self.pos = pos
                    first_col = _offsets(self.scan)[star_at] + 1
                    self.fail("a second '*' in the argument list",
                              hint=f"one '*' marks where keyword-only arguments start (the first is at column {first_col})")
                kwarg_only, star_at = True, pos
                pos += 1
            elif tok == "...":
                varargs = True
                self.pos = pos
                defaulted = next((a.name for a in args if a.has_default), None)
                if defaulted is not None:
                    self.fail("a schema with varargs '...' cannot have defaults",
                              hint=f"torch refuses it; remove the default of {defaulted!r}")
                pos += 1
                if toks[pos] != ")":
                    self.fail("'...' must be the last argument",
                              hint="varargs take everything after the named arguments; move '...' to the end")
            else:
                arg, arg_at, name_at, pos = self._argument(pos, kwarg_only)
                if arg.name in seen:
                    self.fail(f"duplicate argument name {arg.name!r}", index=name_at,
                              hint="torch accepts it silently, but the op could not be called by keyword; rename one")
                if not kwarg_only:
                    if arg.has_default:
                        first_default = first_default or arg
                    elif first_default is not None and type(arg.type) is not ListType:
                        # torch lets a list without a default follow one (FunctionSchema::checkSchema
                        # allows it for old broadcasting lists: `Tensor? bias=None, int[] stride`)
                        self.fail(f"argument {arg.name!r} has no default but follows {first_default.name!r}, "
                                  "which has one", index=arg_at,
                                  hint=f"give {arg.name!r} a default, move it before {first_default.name!r}, "
                                  "or make it keyword-only after '*'")
                seen.add(arg.name)
                arg_positions.append(arg_at)
                args.append(arg)
            tok = toks[pos]
            pos += 1
            if tok == ")":
                self.pos = pos
                return args, varargs
            if tok != ",":
                self.pos = pos - 1
                self.fail(f"expected ',' or ')' after the argument, found {self.describe()}")
            if toks[pos] == ")":
                self.pos = pos
                self.fail("trailing ',' before ')'", index=pos - 1, hint="remove the last comma")

    def _argument(self, pos: int, kwarg_only: bool) -> tuple[Argument, int, int, int]:
        """`<type> <name>[=<default>]` at token `pos`: (the argument, where it starts, where its name is, the
        token after it). Plain types are read inline: this is the hot path of the parser."""
        toks = self.toks
        arg_at = pos
        typ = _PLAIN_TYPES.get(toks[pos])
        nxt = toks[pos + 1]
        if typ is not None and nxt not in _TYPE_SUFFIX:
            pos += 1
        elif typ is not None and nxt == "?" and toks[pos + 2] not in _TYPE_SUFFIX:
            typ = _OPTIONAL_OF[toks[pos]]
            pos += 2
        else:
            self.pos = pos
            typ = self.type()
            pos = self.pos
        name = toks[pos]
        if name[:1] not in _IDENT_FIRST:
            self.pos = pos
            self._bad_argument_name(typ)
        if name in RESERVED_WORDS:
            self.not_reserved(name, "an argument name", pos)
        name_at = pos
        pos += 1
        if toks[pos] != "=":
            return new_argument(typ, name, None, False, kwarg_only), arg_at, name_at, pos
        if toks[pos + 1] == "None" and type(typ) is OptionalType:  # the most common default, nothing to check
            return new_argument(typ, name, None, True, kwarg_only), arg_at, name_at, pos + 2
        self.pos = pos + 1
        value = self.default_value()
        problem = _default_problem(typ, value)
        if problem:
            self.fail(f"default for {name!r} does not fit type '{typ}': {problem}", index=pos + 1,
                      hint=_default_hint(typ))
        return new_argument(typ, name, value, True, kwarg_only), arg_at, name_at, self.pos

    def _bad_argument_name(self, typ: Type):
        hint = 'each argument is "<type> <name>", e.g. "Tensor x" or "float eps=1e-06"'
        if self.toks[self.pos] == "(" and not isinstance(typ, BaseType):
            base = base_name(typ)
            hint = f"an alias annotation goes right after the type name: {base}(a!){str(typ)[len(base):]}"
        self.fail(f"expected an argument name after type '{typ}', found {self.describe()}", hint=hint)

    def type(self, in_container: bool = False) -> Type:
        typ = self._plain_type()
        if typ is not None:
            return typ
        name = self.toks[self.pos]
        if name in _PLAIN_TYPES and self.toks[self.pos + 1] not in ("(", "!"):
            typ = _PLAIN_TYPES[name]
            self.pos += 1
        elif name == "(":
            typ = self._tuple_type()
        else:
            typ = self._named_type()
        return self._type_suffixes(typ, in_container)

    def _plain_type(self) -> Type | None:
        """The shared immutable instance of an alias-free `T`, `T?`, `T[]` or a plain `T(a!)`, if that is what
        comes; None (position unchanged) for anything else."""
        toks, at = self.toks, self.pos
        name = toks[at]
        if name not in _PLAIN_TYPES:
            return None
        nxt = toks[at + 1]
        if nxt not in _TYPE_SUFFIX:
            self.pos = at + 1
            return _PLAIN_TYPES[name]
        if nxt == "?" and toks[at + 2] not in _TYPE_SUFFIX:
            self.pos = at + 2
            return _OPTIONAL_OF[name]
        if nxt == "[" and toks[at + 2] == "]" and toks[at + 3] not in _TYPE_SUFFIX:
            self.pos = at + 3
            return _LIST_OF[name]
        if nxt == "(":  # `Tensor(a!)`, `Tensor(a)`
            letter, mark = toks[at + 2], toks[at + 3]
            end = at + 5 if mark == "!" and toks[at + 4] == ")" else at + 4 if mark == ")" else 0
            if end and letter[:1] in _IDENT_FIRST and letter not in RESERVED_WORDS and toks[end] not in _TYPE_SUFFIX:
                self.pos = end
                return _aliased_base(name, letter, mark == "!")
        return None

    def _tuple_type(self) -> Type:
        at = self.pos
        self.enter("tuple types")
        self.pos += 1
        elems = [self.type(True)]
        while self.accept(","):
            elems.append(self.type(True))
        self.expect(")", "to close the tuple type")
        self.nesting -= 1
        return self._bounded(TupleType(tuple(elems)), at)

    def _bounded(self, typ: Type, at: int) -> Type:
        """`typ`, refused at token `at` when it nests deeper than MAX_NESTING."""
        if _type_depth(typ) > MAX_NESTING:
            self.fail(f"type '{_short(typ)}' nests more than {MAX_NESTING} deep", index=at,
                      hint="opgen reads types nested a few levels deep (real schemas need two, as in Tensor?[])")
        return typ

    def _named_type(self) -> Type:
        at = self.pos
        name = self.ident("a type", hint="types are Tensor, int, SymInt, float, bool, str, Scalar, ScalarType, "
                          "Device, Layout, MemoryFormat, Generator, Any, with ? for optional and [] for lists")
        if name == "Dict":
            return self._dict_type()
        if name == "None":
            name = "NoneType"
        if name not in KNOWN_TYPES:
            if name in RETIRED_TYPES:
                self.fail(f"unsupported type {name!r}", index=at, hint=RETIRED_TYPES[name])
            close = difflib.get_close_matches(name, sorted(KNOWN_TYPES), n=1)
            hint = f"did you mean {close[0]!r}?" if close else "known types: " + ", ".join(sorted(KNOWN_TYPES))
            self.fail(f"unknown type {name!r}", index=at, hint=hint)
        alias = self.alias() if self.toks[self.pos] in ("(", "!") else None
        return BaseType(name, alias)

    def _dict_type(self) -> Type:
        at = self.pos
        self.expect("(", "after Dict")
        self.enter("Dict types")
        key_at = self.pos
        key = self.type(True)
        if not isinstance(key, BaseType) or key.name not in _DICT_KEY_TYPES:
            self.fail(f"'{key}' cannot be a Dict key", index=key_at,
                      hint="torch's dict keys are int, SymInt, bool, float, complex, str, Tensor, Device, "
                      "ScalarType, Layout, MemoryFormat or Any")
        self.expect(",", "between the key and value types of Dict")
        value = self.type(True)
        self.expect(")", "to close Dict(...)")
        self.nesting -= 1
        return self._bounded(DictType(key, value), at)

    def _type_suffixes(self, typ: Type, in_container: bool) -> Type:
        """`typ` followed by any `?` and `[N]` suffixes."""
        depth = _type_depth(typ)
        while True:
            tok = self.toks[self.pos]
            if tok in ("?", "["):
                depth += 1
                if depth > MAX_NESTING:
                    self.fail(f"type '{_short(typ)}' nests more than {MAX_NESTING} deep",
                              hint="opgen reads types nested a few levels deep (real schemas need two, as in Tensor?[])")
            if tok == "?":
                if isinstance(typ, OptionalType):
                    self.fail(f"'{typ}' is already optional", hint="write one '?': torch reads T?? as T?")
                self.pos += 1
                typ = OptionalType(typ)
            elif tok == "[":
                typ = self._list_type(typ, in_container)
            else:
                return typ

    def _list_type(self, elem: Type, in_container: bool) -> Type:
        if _has_size(elem):
            self.fail(f"a list of the fixed-size list '{elem}'",
                      hint="torch accepts a fixed size only on the outermost list: T[N] or T[N]?")
        self.pos += 1
        size = None
        kind = self.kind()
        if kind == "number":
            text = self.toks[self.pos]
            if not text.isdigit():
                self.fail(f"a list size must be a non-negative integer, found {text!r}")
            if in_container:
                self.fail("a fixed-size list inside a tuple or Dict type",
                          hint="torch accepts a size only on an argument's or return's own list; write []")
            if len(text) > 19:
                self.fail(f"list size {_short_number(text)} does not fit in a 64-bit integer",
                          hint="a fixed list size is a small number, such as int[2]")
            size = int(text)
            self.pos += 1
        elif kind == "hex":
            self.fail("hex literals are not allowed", hint="write the size in decimal")
        self.expect("]", "to close the list type")
        toks = self.toks
        alias = self.alias() if toks[self.pos] == "!" or toks[self.pos] == "(" and self._alias_follows() else None
        return ListType(elem, size, alias)

    def _alias_follows(self) -> bool:
        # After `Tensor[]`, a '(' opens an alias annotation only when an identifier or '*' and then
        # '!', '|', '->' or ')' follow; anything else belongs to the next token of the schema.
        k = self.pos + 1
        return self.kind(k) == "ident" or self.toks[k] == "*"

    def alias(self) -> Alias:
        toks, pos = self.toks, self.pos  # at the '(' or '!' (callers check)
        if toks[pos] == "!":  # `Tensor!`: torch's shorthand for a written, anonymous alias set `Tensor($N!)`
            self.pos = pos + 1
            self.anonymous += 1
            return Alias((f"${self.anonymous - 1}",), (), True)
        name = toks[pos + 1]
        if name[:1] in _IDENT_FIRST and name not in RESERVED_WORDS:
            if toks[pos + 2] == "!" and toks[pos + 3] == ")":
                self.pos = pos + 4
                return _simple_alias(name, True)
            if toks[pos + 2] == ")":
                self.pos = pos + 3
                return _simple_alias(name, False)
        self.expect("(", "to open the alias annotation")
        before = self.alias_set("an alias set name such as 'a'")
        is_write = self.accept("!")
        after: list[str] = []
        if self.accept("->"):
            after = self.alias_set("an alias set after '->'")
        if not self.accept(")"):
            self.fail(f"expected ')' to close the alias annotation, found {self.describe()}",
                      hint="alias annotations look like (a), (a!), (a|b) or (a -> *)")
        return Alias(tuple(before), tuple(after), is_write)

    def alias_set(self, what: str) -> list[str]:
        names = [self.alias_name(what)]
        while self.accept("|"):
            names.append(self.alias_name(what))
        return names

    def alias_name(self, what: str) -> str:
        if self.accept("*"):
            return "*"
        at = self.pos
        name = self.ident(what, hint="alias annotations look like (a), (a!), (a|b) or (a -> *)")
        self.not_reserved(name, "an alias set name", at)
        return name

    def default_value(self):
        kind, text = self.kind(), self.toks[self.pos]
        if kind == "hex":
            self.fail(f"hex literal {text!r} as a default",
                      hint=f"torch silently reads it as 0; write it in decimal ({int(text, 16)})")
        if kind == "number":
            self.pos += 1
            if text[-1] in "jJ":
                self.fail(f"complex literal {text!r} as a default", index=self.pos - 1,
                          hint="opgen does not support complex defaults; take a float, or make it optional with None")
            if _INTEGER.fullmatch(text):
                if len(text) > _MAX_DIGITS:
                    self.fail(f"the {len(text.lstrip('-'))}-digit number {_short_number(text)} is out of range for "
                              "every schema type", index=self.pos - 1,
                              hint="an int default fits in 64 bits (19 digits), a float one below 1.8e+308")
                return int(text)
            if "E" in text and "." not in text:
                self.fail(f"{text!r} with a capital E", index=self.pos - 1,
                          hint=f"torch reads it as the integer {text.split('E')[0]} wherever it guesses int or float "
                          f"(Scalar, optionals, int); write {text.replace('E', 'e')}")
            return self.float_value(text)
        if kind == "string":
            self.pos += 1
            return self.string_value(text, self.pos - 1)
        if kind == "ident":
            self.pos += 1
            if text == "None":
                return None
            if text == "True":
                return True
            if text == "False":
                return False
            if text in ("inf", "nan"):
                self.fail(f"{text!r} is not a valid default", index=self.pos - 1,
                          hint="torch rejects it; for an unbounded limit use a large finite value such as 1e+300 "
                          "(or 9223372036854775807 for an int), or make the argument optional with None")
            return EnumWord(text)
        if self.accept("["):
            self.enter("default lists")
            items = []
            if not self.accept("]"):
                while True:
                    items.append(self.default_value())
                    if self.accept("]"):
                        break
                    self.expect(",", "between list elements")
            self.nesting -= 1
            return tuple(items)
        self.fail(f"expected a default value, found {self.describe()}",
                  hint="defaults are None, True, False, numbers, \"strings\", [lists] or enum words such as contiguous_format")

    def float_value(self, text: str) -> float:
        value = float(text)
        if math.isinf(value) or (value == 0.0 and _NONZERO_MANTISSA.match(text)) or (
                value and abs(value) <= _FLOAT_MIN_NORMAL and abs(Decimal(text)) < _EXACT_MIN_NORMAL):
            self.fail(f"{text!r} is out of the range of a double", index=self.pos - 1,
                      hint="torch's parser refuses it (stod); use a value between 2.2250738585072014e-308 and "
                      "1.7976931348623157e+308 in magnitude, or 0.0")
        return value

    def string_value(self, token: str, index: int) -> str:
        quote = 3 if len(token) >= 6 and token[:3] in ('"""', "'''") else 1
        body = token[quote:-quote]
        if "\\" not in body:
            return body
        parts: list[str] = []
        start = 0
        while True:
            slash = body.find("\\", start)
            if slash < 0:
                parts.append(body[start:])
                return "".join(parts)
            parts.append(body[start:slash])
            code = body[slash + 1]
            if code in _ESCAPES:
                parts.append(_ESCAPES[code])
                start = slash + 2
                continue
            octal = body[slash + 1:slash + 4]
            if _OCTAL.fullmatch(octal) and int(octal, 8) < 0o200:
                parts.append(chr(int(octal, 8)))
                start = slash + 4
                continue
            column = _offsets(self.scan)[index] + quote + slash
            if code in "xuU":
                self.fail_at(column, f"unsupported escape '\\{code}' in a string", hint=_ESCAPE_HINT)
            if _OCTAL.fullmatch(octal):
                self.fail_at(column, f"octal escape '\\{octal}' is not ASCII",
                             hint="torch would build invalid UTF-8 from it; write the character itself")
            self.fail_at(column, f"unsupported escape '\\{code}' in a string", hint=_ESCAPE_HINT)

    def returns(self) -> tuple[list[Return], bool, bool]:
        # `-> (T)` is `-> T`; `-> ((T))` is one return of the 1-tuple type `(T)`, as torch reads it.
        toks, pos = self.toks, self.pos
        first = toks[pos]
        if first in _PLAIN_TYPES and not toks[pos + 1]:
            self.pos = pos + 1
            return [_PLAIN_RETURNS[first]], False, False
        if first == "(" and toks[pos + 1] == ")":
            self.pos = pos + 2
            return [], False, False
        if self.accept("..."):
            return [], False, True
        if self.accept("("):
            rets: list[Return] = []
            if self.accept(")"):
                return rets, False, False
            while True:
                rets.append(self.return_())
                if self.accept(")"):
                    return rets, _is_tuple_return(rets), False
                if not self.accept(","):
                    self.fail(f"expected ',' or ')' in the returns, found {self.describe()}")
                if self.peek(")"):
                    self.fail("trailing ',' before ')'", index=self.pos - 1, hint="remove the last comma")
        rets = [self.return_()]
        return rets, _is_tuple_return(rets), False

    def return_(self) -> Return:
        typ = self.type()
        name = self.toks[self.pos]
        if name[:1] not in _IDENT_FIRST:
            return Return(typ, None)
        self.not_reserved(name, "a return name", self.pos)
        self.pos += 1
        return Return(typ, name)


_SIMPLE_ALIASES: dict[tuple[str, bool], Alias] = {}


def _type_depth(typ: Type) -> int:
    """How many list, optional, tuple and Dict levels `typ` has (a plain type: 0); bounded by the parser."""
    if isinstance(typ, (OptionalType, ListType)):
        return 1 + _type_depth(typ.elem)
    if isinstance(typ, TupleType):
        return 1 + max((_type_depth(elem) for elem in typ.elems), default=0)
    if isinstance(typ, DictType):
        return 1 + max(_type_depth(typ.key), _type_depth(typ.value))
    return 0


def _short(typ: Type) -> str:
    text = str(typ)
    return text if len(text) <= 40 else text[:37] + "..."


def _short_number(text: str) -> str:
    return text if len(text) <= 24 else f"{text[:10]}...{text[-10:]}"


def _simple_alias(name: str, is_write: bool) -> Alias:
    """`(a)` / `(a!)`, shared: the same few letters recur in every schema."""
    alias = _SIMPLE_ALIASES.get((name, is_write))
    if alias is None:
        alias = Alias((name,), (), is_write)
        if len(_SIMPLE_ALIASES) < 512:
            _SIMPLE_ALIASES[(name, is_write)] = alias
    return alias


_ALIASED_BASES: dict[tuple[str, str, bool], BaseType] = {}


def _aliased_base(name: str, letter: str, is_write: bool) -> BaseType:
    """`Tensor(a!)` and friends, shared like `_simple_alias`."""
    key = (name, letter, is_write)
    typ = _ALIASED_BASES.get(key)
    if typ is None:
        typ = BaseType(name, _simple_alias(letter, is_write))
        if len(_ALIASED_BASES) < 512:
            _ALIASED_BASES[key] = typ
    return typ


def _has_size(typ: Type) -> bool:
    if isinstance(typ, OptionalType):
        typ = typ.elem
    return isinstance(typ, ListType) and typ.size is not None


def _is_tuple_return(rets: list[Return]) -> bool:
    """The op returns one Python tuple: several values, or one value of a tuple type (`-> ()` returns None)."""
    return len(rets) > 1 or (len(rets) == 1 and isinstance(rets[0].type, TupleType))


def _default_hint(typ: Type) -> str:
    base = base_name(typ)
    examples = {
        "int": "an integer such as 0 or -1", "SymInt": "an integer such as 0 or -1", "float": "a number such as 1.0 or 1e-06",
        "bool": "True or False", "str": 'a quoted string such as "mean"', "Scalar": "a number such as 1 or 0.5",
        "ScalarType": "a dtype word such as float32 or long", "Device": 'a quoted device such as "cpu"',
        "Tensor": "nothing, or None on Tensor?",
    }
    if isinstance(typ, ListType) and base not in _LIST_DEFAULT_TYPES:
        listed = strip_alias(typ)  # the list as written (`Tensor?[]` stays a list of optionals: `Tensor?[]?`)
        return f"a {listed} argument takes no default; make it optional ({listed}?) and default to None"
    text = examples.get(base, "a value of that type")
    if isinstance(typ, OptionalType):
        text += ", or None"
    if isinstance(typ, ListType) or (isinstance(typ, OptionalType) and isinstance(typ.elem, ListType)):
        text = f"a list of {text}, e.g. [0, 1]"
    return f"write {text}"


# The non-optional types torch 2.13's schema parser gives a None default (Device, Any, Dimname, Storage, Stream,
# QScheme and lists it refuses).
_NONE_DEFAULT_TYPES = frozenset({"Tensor", "int", "SymInt", "float", "bool", "str", "Scalar", "ScalarType", "Layout",
                                 "MemoryFormat", "Generator", "complex"})


def _default_problem(typ: Type, value) -> str | None:
    if isinstance(typ, OptionalType):
        if value is None:
            return None
        elem = typ.elem
        if isinstance(elem, ListType):
            if isinstance(value, tuple):
                return "torch cannot parse a [list] default for an optional list; use None"
            if elem.size is not None:  # torch keeps the scalar as it is (no expansion)
                return _default_problem(elem.elem, value)
        return _default_problem(elem, value)
    if value is None:  # torch 2.13 takes `Tensor x=None`, `int n=None`, ... (measured per type), not a list's
        if isinstance(typ, BaseType) and typ.name in _NONE_DEFAULT_TYPES:
            return None
        return "None needs an optional type (add '?')"
    if isinstance(typ, ListType):
        elem = typ.elem
        if not isinstance(elem, BaseType) or elem.name not in _LIST_DEFAULT_TYPES:
            return f"a {strip_alias(elem)}[] argument cannot have a list default"
        if isinstance(value, tuple):
            for item in value:
                if item is None:  # torch's parser takes `Tensor x=None`, but asserts on a None in a list
                    return "a list default cannot hold None"
                problem = _default_problem(elem, item)
                if problem:
                    return problem
            return None
        if typ.size is not None:
            if isinstance(value, EnumWord):
                return (f"torch cannot repeat the word {value.word!r} over a {typ.size}-element list; "
                        f"write [{', '.join([value.word] * typ.size)}]")
            return _default_problem(elem, value)
        return "a list type needs a [list] default"
    if isinstance(value, tuple):
        return "a list for a non-list type"
    if not isinstance(typ, BaseType):
        return "defaults are not supported on this type"
    return _scalar_default_problem(typ.name, value)


def _scalar_default_problem(t: str, value) -> str | None:
    """What is wrong with `value` as the default of a plain (non-list, non-optional) type named `t`."""
    if t == "Tensor":
        return "a Tensor argument can only default to None, and only as Tensor?"
    if t in _INTEGER_TYPES:
        if isinstance(value, (bool, float)):
            return f"{_literal(value)} is not an integer"
        if isinstance(value, EnumWord):
            return None if value.word in ENUM_WORDS["int"] else f"unknown word {value.word!r}"
        return _int64_problem(value) if isinstance(value, int) else f"{_literal(value)} is not an integer"
    if t == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"{_literal(value)} is not a number"
        return None
    if t == "bool":
        return None if isinstance(value, bool) else f"{_literal(value)} is not True or False"
    if t == "Scalar":
        if isinstance(value, int) and not isinstance(value, bool):
            return _int64_problem(value)
        return None if isinstance(value, (int, float)) else f"{_literal(value)} is not a number"
    if t == "str":
        return None if isinstance(value, str) else f"{_literal(value)} is not a quoted string"
    if t == "Device":
        return _device_problem(value)
    if t in ENUM_WORDS:
        words = ENUM_WORDS[t]
        if isinstance(value, EnumWord):
            if value.word in words:
                return None
            close = difflib.get_close_matches(value.word, sorted(words), n=1)
            return f"unknown {t} {value.word!r}" + (f" (did you mean {close[0]!r}?)" if close else
                                                    f" (torch accepts {', '.join(sorted(words))})")
        return None if isinstance(value, int) and not isinstance(value, bool) else f"{_literal(value)} is not a {t}"
    return f"torch cannot parse a default for type {t!r}"


def _int64_problem(value: int) -> str | None:
    if _INT64_MIN <= value <= _INT64_MAX:
        return None
    return f"{value} does not fit in a 64-bit integer"


def _device_problem(value) -> str | None:
    if not isinstance(value, str):
        return f"{_literal(value)} is not a quoted device string"
    match = _DEVICE.fullmatch(value)
    if match is None:
        return f"{_literal(value)} is not a device string like \"cpu\" or \"cuda:0\""
    if match.group(1) not in DEVICE_TYPES:
        close = difflib.get_close_matches(match.group(1), sorted(DEVICE_TYPES), n=1)
        return f"unknown device type {match.group(1)!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
    return None


def _literal(value) -> str:
    return format_default(value)


def parse_schema(text: str) -> Schema:
    """Parse one schema string; raise `SchemaError` (with column, caret and hint) if it is bad."""
    if not isinstance(text, str):
        raise SchemaError(f"a schema must be a string, got {type(text).__name__}")
    stripped = text.strip()
    if not stripped:
        raise SchemaError("empty schema", source=text, column=1,
                          hint='a schema looks like "my_op(Tensor x) -> Tensor"')
    return _Parser(text).schema()


def span_column(schema: Schema, key) -> int | None:
    """1-based column, inside the parsed text, of a part of the schema.

    `key` is "name", "overload", "returns" or ("arg", name). Worked out on demand so that
    parsing stays cheap.
    """
    spans = schema.spans
    if "text" not in spans:
        return None
    if isinstance(key, tuple) and key[0] == "arg":
        positions = spans.get("args", ())
        names = [a.name for a in schema.arguments]
        if len(positions) != len(names) or key[1] not in names:
            return None
        index = positions[names.index(key[1])]
    else:
        index = spans.get(key)
        if index is None:
            return None
    return _offsets(spans["text"])[index] + 1


# torch prints an anonymous alias set (`Tensor! out`, as bitsandbytes' `.out` overloads declare it) as
# `Tensor($0! -> ) out`, which neither torch's parser nor opgen's reads back
_TORCH_ANONYMOUS_ALIAS = re.compile(r"\(\$\d+(!?)(?: -> [^()]*)?\)")


def parse_torch_schema(text: str) -> Schema:
    """Parse `str(op._schema)` as torch prints it: an anonymous alias set is read as written (`Tensor!`)."""
    return parse_schema(_TORCH_ANONYMOUS_ALIAS.sub(r"\1", text))
