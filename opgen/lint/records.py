"""Plain records one file yields; the checks match them across every linted file.

They are small picklable dataclasses so worker processes can send them back cheaply (no AST).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field


class _Unknown:
    """A value the collector could not resolve statically (a singleton, also across processes)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<unknown>"

    def __reduce__(self):
        return "UNKNOWN"


UNKNOWN = _Unknown()


@dataclass(slots=True)
class Where:
    path: str
    line: int
    column: int  # 1-based


@dataclass(slots=True)
class Literal:
    """A string literal whose characters map 1:1 onto the source line (no escapes, one line).

    `offset` is the 0-based character column of the first character inside the quotes.
    """

    line: int
    offset: int
    value: str


@dataclass(slots=True)
class Param:
    name: str
    kind: str  # "positional", "kwonly", "varargs", "varkw"
    default: object = None
    has_default: bool = False
    annotation: str = ""


@dataclass(slots=True)
class Finding:
    """A fact about a function body: what it does, where."""

    what: str
    line: int
    column: int
    param: str = ""  # the parameter it concerns; for a hard-coded device, the device type


@dataclass(slots=True)
class Function:
    name: str
    where: Where
    params: list[Param]
    returns_annotation: str | None
    mutations: list[Finding] = field(default_factory=list)      # writes to parameters
    data_reads: list[Finding] = field(default_factory=list)     # .item(), .tolist(), nonzero ...
    returned_params: list[Finding] = field(default_factory=list)
    device_less_allocs: list[Finding] = field(default_factory=list)
    fixed_device_allocs: list[Finding] = field(default_factory=list)  # device="cpu" / torch.device("cpu")
    capture_unsafe: list[Finding] = field(default_factory=list)
    todo: Finding | None = None
    refuses: tuple[str, ...] = ()  # parameters whose non-None value the body raises on at its top level
    discarded: tuple[str, ...] = ()  # parameters re-bound at the top level before anything reads them
    uses_get_ctx: bool = False
    imported_from: str | None = None  # a placeholder: the function lives in this other file
    host_returns: tuple[str, ...] = ()  # names it returns that hold a tensor it made on the host
    makes_on_default_device: bool = False  # `torch.tensor(...)` / `as_tensor` / `from_numpy` without device=
    placeholder: bool = False  # its body does nothing: `pass`, `...`, a docstring, `raise NotImplementedError`
    truth_tests: list[Finding] = field(default_factory=list)  # `if bias:`: a parameter's truth value is tested
    # the body read with torch.compiler.is_compiling() true (a fake as torch.compile runs it), when it asks
    under_compile: Function | None = None


    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)


@dataclass(slots=True)
class LibraryDecl:
    namespace: str
    kind: str
    key: str
    where: Where
    module_level: bool
    scoped: bool


@dataclass(slots=True)
class Definition:
    """An op definition: `Library.define`, `torch.library.define`, `custom_op`, `direct_register_custom_op`."""

    namespace: str | None
    name: str
    overload: str
    where: Where
    style: str  # "library" or "custom_op"
    schema_text: str | None  # full text to parse, None when inferred from annotations
    schema_column: int | None = None  # 1-based column of schema_text[0] on `where.line` (exact literals only)
    schema_literal: Literal | None = None  # for fixes
    name_offset: int = 0  # how many leading characters of schema_text are not in the literal
    tags: tuple[str, ...] | None = ()  # None: could not be resolved
    mutates_args: object = None  # tuple of names, "unknown", or UNKNOWN
    mutates_where: Where | None = None
    kernel: Function | None = None
    device_types: tuple[str, ...] | None = None
    library_namespace: str | None = None  # the Library's namespace when the schema string carries its own
    fake_from_kernel: bool = False  # triton_op: torch traces the kernel itself on fake tensors
    unconditional: bool = False  # a module-level statement of its own (not under if/try/def): always runs
    api: str = ""  # "direct_register_custom_op" for that helper (a Library define + impl, not custom_op)

    @property
    def op_key(self) -> tuple[str | None, str, str]:
        return (self.namespace, self.name, self.overload)


@dataclass(slots=True)
class Registration:
    """A kernel, fake or Meta registration for one op."""

    role: str  # "kernel" or "fake"
    namespace: str | None
    name: str
    overload: str | None  # None: the text named no overload
    key: str  # dispatch key or device type as written; "fake" for register_fake
    where: Where
    api: str  # which API registered it, for messages
    function: Function | None = None
    custom_op_target: bool = False  # registered through a CustomOpDef method (`@op.register_fake`)
    # The definition this registration belongs to by construction (the kernel a custom_op call defines,
    # `@op.register_fake` on a CustomOpDef name, direct_register_custom_op's kernel and fake): matched to
    # that definition itself, not by name, so an op defined twice keeps each definition's own functions.
    origin: Definition | None = None


@dataclass(slots=True)
class UnknownName:
    """A fake (or a kernel that serves fake tensors), a side-effect mark or a definition for an op whose name
    lint cannot read in full (`register_fake(f"ns::{name}")`, `has_side_effect(op)`, a schema built at run
    time). It makes the ops it may name unknown, nothing more: those whose `ns::name[.overload]` matches
    `pattern`, and, when its namespace is unread too (`namespace` None), only ops of its own package."""

    what: str  # "fake", "side_effect" or "definition"
    pattern: str  # a regular expression over "ns::name" / "ns::name.overload"
    namespace: str | None
    path: str

    def may_name(self, qualified: str, path: str) -> bool:
        if self.namespace is None and package_of(path) != package_of(self.path):
            return False
        return re.fullmatch(self.pattern, qualified) is not None


@dataclass(slots=True)
class KeyLiteral:
    """A dispatch-key string in a position that takes only dispatch keys."""

    value: str
    where: Where
    literal: Literal | None


@dataclass(slots=True)
class Unreadable:
    """The file could not be read (`parsed` False: an OSError) or parsed (`parsed` True: a SyntaxError)."""

    reason: str
    line: int = 1
    column: int = 1
    parsed: bool = True


@dataclass(slots=True)
class FileRecord:
    path: str
    libraries: list[LibraryDecl] = field(default_factory=list)
    definitions: list[Definition] = field(default_factory=list)
    registrations: list[Registration] = field(default_factory=list)
    dispatch_keys: list[KeyLiteral] = field(default_factory=list)
    side_effect_ops: set = field(default_factory=set)  # (ns, name) marked with has_side_effect
    autograd_ops: set = field(default_factory=set)  # (ns, name, overload) given a formula by register_autograd
    unknown_names: list = field(default_factory=list)  # UnknownName: ops named in a way we could not read
    unreadable: Unreadable | None = None  # why the file could not be read or parsed (then nothing else is known)
    noqa: dict = field(default_factory=dict)  # line -> frozenset of codes (empty: all)
    file_noqa: frozenset | None = None  # None: none; empty: whole file
    internal_error: str | None = None  # opgen could not read this file (a bug, or a pathological file)
    npu_renamed: bool = False  # imports torch_npu, which renames PrivateUse1 to npu: "NPU" is then a key
    entry_point: bool = False  # a script (`if __name__ == "__main__":`) or a test module: run, not imported
    read_digest: str | None = None  # sha256 of the bytes read: --fix rewrites the file only while it holds them


TEST_MODULE = re.compile(r"(?:^|/)(?:test_[^/]*|[^/]*_test)\.py$")


def is_entry_point(path: str, has_main_guard: bool) -> bool:
    """A file a process runs rather than imports next to the rest of its package: a script, or a test
    module (a per-file test runner imports one at a time)."""
    return has_main_guard or TEST_MODULE.search(path.replace(os.sep, "/")) is not None


def is_test_module(path: str) -> bool:
    """`test_*.py` / `*_test.py`: a test, which may only read an op's schema and never compile or call it."""
    return TEST_MODULE.search(path.replace(os.sep, "/")) is not None


def one_process(first: str, second: str, entry_points: set[str]) -> bool:
    """Whether two files' module-level code may run in one process as far as the code says: the same file,
    or two modules of which neither is an entry point (two scripts, or two test modules, never meet)."""
    return first == second or (first not in entry_points and second not in entry_points)


_PACKAGES: dict[str, str] = {}


def package_of(path: str) -> str:
    """`package_root`, cached by directory (every op and registration asks)."""
    directory = os.path.dirname(os.path.abspath(path))
    package = _PACKAGES.get(directory)
    if package is None:
        package = _PACKAGES[directory] = package_root(path)
    return package


def import_root(path: str) -> str:
    """The directory `path` is imported from: the one holding its top-level package, or a loose script's own
    directory (one `sys.path` entry). Ops are matched within one import root only: two unrelated trees
    defining the same `ns::name` never judge each other, so linting them together gives the union of their
    findings alone by construction."""
    package = package_of(path)
    if os.path.isfile(os.path.join(package, "__init__.py")):
        return os.path.dirname(package)
    return package


def package_root(path: str) -> str:
    """The directory of the top-level package `path` belongs to (its own directory when in none)."""
    directory = os.path.dirname(os.path.abspath(path))
    while os.path.isfile(os.path.join(directory, "__init__.py")):
        parent = os.path.dirname(directory)
        if parent == directory or not os.path.isfile(os.path.join(parent, "__init__.py")):
            break
        directory = parent
    return directory
