"""Read one Python file into a `FileRecord`: libraries, definitions, registrations, function facts.

Uses the stdlib `ast` (libcst is an order of magnitude slower and only needed for edits that keep
formatting). Names are resolved from the file's own imports (`import torch.library as tl`,
`from torch.library import impl as i`); schema strings are resolved from literals, module-level
constants, `+` and simple f-strings. What cannot be resolved is skipped, never guessed.
"""

from __future__ import annotations

import ast
import bisect
import os
import re
from dataclasses import dataclass, field

from .dispatch_keys import key_of_device_type
from .records import (
    UNKNOWN,
    Definition,
    FileRecord,
    Finding,
    Function,
    KeyLiteral,
    LibraryDecl,
    Literal,
    Param,
    Registration,
    Unreadable,
    Where,
    is_entry_point,
)

# Files that contain none of these cannot hold a registration (checked on bytes, before decoding;
# `in` on bytes is several times faster than one regex alternation).
PREFILTER_LITERALS = (b"custom_op", b"torch.library", b"register_fake", b"register_kernel", b"impl_abstract",
                      b"Library(", b"direct_register_custom_op", b"has_side_effect", b".impl(", b".define(")
LIBRARY_IMPORT = re.compile(rb"library\s+import|import\s+library")
# ... and, of those, the ones that call (or alias) one: mentions in comments and docs are common.
CALL_SITE = re.compile(
    rb"\b(?:custom_op|triton_op|register_fake|register_kernel|impl_abstract|Library|_scoped_library"
    rb"|direct_register_custom_op|has_side_effect|define|impl|fallback|register_autograd)\s*\("
    rb"|\.register_(?:fake|kernel|autograd)\b"
    rb"|library\s+import[^\n]*\bas\b"
)
NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Za-z]+[0-9]+(?:[\s,]+[A-Za-z]+[0-9]+)*))?", re.IGNORECASE)
FILE_NOQA = re.compile(r"^\s*#\s*opgen:\s*noqa(?::\s*(?P<codes>[A-Za-z]+[0-9]+(?:[\s,]+[A-Za-z]+[0-9]+)*))?\s*$",
                       re.IGNORECASE | re.MULTILINE)
TODO_MARKER = "# opgen: TODO-fake"
# A statement is only walked when one of its lines matches this.
INTERESTING = re.compile(r"Library\(|_scoped_library|define\(|impl\(|register_fake|register_kernel|impl_abstract"
                         r"|custom_op|triton_op|has_side_effect|fallback\(|register_autograd")

LIB = "torch.library."
LIBRARY_METHODS = frozenset({"define", "impl", "_register_fake", "fallback"})
KERNEL_METHODS_NOT_WRITING = frozenset({"requires_grad_", "share_memory_", "retain_grad_"})
VIEW_METHODS = frozenset({"view", "view_as", "narrow", "select", "unsqueeze", "squeeze", "transpose", "t",
                          "permute", "expand", "expand_as", "diagonal", "as_strided", "unflatten", "unbind",
                          "split", "chunk", "movedim", "swapaxes", "T", "mT", "real", "imag", "data", "detach"})
DATA_READS = frozenset({"item", "tolist", "numpy", "cpu"})
DYNAMIC_SHAPE = frozenset({"nonzero", "argwhere", "masked_select", "unique", "unique_consecutive"})
SHAPE_ATTRS = frozenset({"shape", "size", "dim", "ndim", "numel", "stride", "dtype", "device", "is_contiguous",
                         "storage_offset", "layout", "element_size", "nelement", "get_device"})
ALLOCATORS = frozenset({"empty", "zeros", "ones", "full", "empty_strided", "rand", "randn", "randint", "arange",
                        "eye", "linspace", "logspace", "randperm"})
RANDOM_FUNCS = frozenset({"rand", "randn", "randint", "randperm", "bernoulli", "multinomial", "normal", "poisson",
                          "rand_like", "randn_like", "randint_like", "dropout"})
RANDOM_METHODS = frozenset({"uniform_", "normal_", "bernoulli_", "random_", "exponential_", "geometric_", "cauchy_",
                            "log_normal_", "bernoulli", "multinomial"})
# A parameter named like this is on the host by construction (`cpu_index`, `seq_lens_host`): reading it
# is no device sync.
HOST_NAME = re.compile(r"cpu|host|(?:^|_)np(?:_|$)|numpy", re.IGNORECASE)
HOST_WORD = re.compile(r"\b(?:cpu|host)\b", re.IGNORECASE)
SYNC_METHODS = frozenset({"item", "tolist", "cpu", "numpy", "synchronize", "nonzero"})


def source_lines(text: str) -> list[str]:
    """Lines as Python's tokenizer counts them (`str.splitlines` also splits at form feeds and
    other characters that are not line ends in source code, which would shift every line after)."""
    return [line.removesuffix("\r") for line in text.split("\n")]


def may_register(data: bytes) -> bool:
    for literal in PREFILTER_LITERALS:
        if literal in data:
            return True
    return b"library" in data and LIBRARY_IMPORT.search(data) is not None


def read_file(path: str, data: bytes | None = None) -> FileRecord | None:
    """The record of one file, or None when it cannot hold a registration."""
    if data is None:
        with open(path, "rb") as handle:
            data = handle.read()
    if not may_register(data) or not CALL_SITE.search(data):
        return None
    text = data.decode("utf-8", errors="replace")
    return collect_source(path, text)


def collect_source(path: str, text: str) -> FileRecord:
    record = FileRecord(path)
    _read_noqa(record, text)
    try:
        tree = ast.parse(text, filename=path)
    except (SyntaxError, ValueError) as error:
        line = getattr(error, "lineno", None) or 1
        column = getattr(error, "offset", None) or 1
        message = getattr(error, "msg", None) or str(error)
        record.unreadable = Unreadable(message, line, max(column, 1))
        return record
    _Collector(record, text, tree).run()
    return record


def _read_noqa(record: FileRecord, text: str) -> None:
    if "noqa" not in text and "NOQA" not in text:
        return
    for match in FILE_NOQA.finditer(text):
        codes = match.group("codes")
        new = frozenset(re.split(r"[\s,]+", codes.upper().strip())) if codes else frozenset()
        if record.file_noqa is None:
            record.file_noqa = new
        elif record.file_noqa and new:
            record.file_noqa |= new
        else:
            record.file_noqa = frozenset()
    for number, line in enumerate(source_lines(text), 1):
        if "#" not in line:
            continue
        match = NOQA.search(line)
        if match and not FILE_NOQA.match(line):
            codes = match.group("codes")
            record.noqa[number] = frozenset(re.split(r"[\s,]+", codes.upper().strip())) if codes else frozenset()



@dataclass
class _Gathered:
    """The nodes a walk over the interesting statements finds, for `_Collector` to read in order."""

    calls: list = field(default_factory=list)
    defs: list = field(default_factory=list)
    assigns: list = field(default_factory=list)
    nested_imports: list = field(default_factory=list)


def _covers(interesting: list[int], first: int, last: int) -> bool:
    """Whether one of the sorted `interesting` lines is in first..last."""
    index = bisect.bisect_left(interesting, first)
    return index < len(interesting) and interesting[index] <= last


class _Collector:
    def __init__(self, record: FileRecord, text: str, tree: ast.Module) -> None:
        self.record = record
        self.path = record.path
        self.text = text
        self.lines = source_lines(text)
        self.tree = tree
        self.aliases: dict[str, str] = {}
        self.constants: dict[str, object] = {}
        self.functions: dict[str, list[ast.AST]] = {}
        self.libraries: dict[str, list[tuple[int, LibraryDecl]]] = {}
        self.custom_ops: dict[str, Definition] = {}
        self.decorator_ids: set[int] = set()
        self.module_level_ids: set[int] = set()
        self.function_facts: dict[int, Function] = {}
        self.import_sources: dict[str, tuple[str, str, int]] = {}
        self.unconditional: set[int] = set()  # ids of calls in plain module-level statements
        self.applied: dict[int, ast.AST] = {}  # `register_fake("ns::f")(fake)`: id of the inner call -> `fake`
        self.owners: dict[int, ast.AST | None] = {}  # id of a call or def -> the def it is written in
        self.wrappers: dict[str, _Wrapper] = {}  # local functions that forward to a registration API
        self.templates: set[int] = set()  # ids of the registration calls inside wrappers (read at each use)
        self.bindings: dict[str, object] = {}  # while a wrapper's use is read: its parameters' arguments
        self.site: ast.AST | None = None  # ... and where it is used (registrations are reported there)

    # -- entry ----------------------------------------------------------------------------------
    def run(self) -> None:
        counts, imports = self._top_level()
        self._imports(imports)
        gathered = _Gathered()
        self._visit(self.tree.body, True, self._interesting_lines(), gathered, None)
        self._imports(gathered.nested_imports)
        if self._find_wrappers(gathered):  # their call sites name no registration API: walk those lines too
            gathered = _Gathered()
            self.functions.clear()
            self._top_level()
            self._visit(self.tree.body, True, self._interesting_lines(), gathered, None)
        self._constants(counts)
        self._register(gathered)

    def _top_level(self) -> tuple[dict[str, int], list[ast.AST]]:
        """Module-level functions (recorded), how often each name is assigned, and the imports."""
        counts: dict[str, int] = {}
        imports: list[ast.AST] = []
        for statement in self.tree.body:
            self.module_level_ids.add(id(statement))
            kind = type(statement)
            if kind is ast.FunctionDef or kind is ast.AsyncFunctionDef:
                self.functions.setdefault(statement.name, []).append(statement)
            elif kind is ast.Assign or kind is ast.AnnAssign:
                targets = statement.targets if kind is ast.Assign else [statement.target]
                for target in targets:
                    if isinstance(target, ast.Name):
                        counts[target.id] = counts.get(target.id, 0) + 1
            elif kind is ast.Import or kind is ast.ImportFrom:
                imports.append(statement)
            elif kind is ast.If and _is_main_guard(statement.test):
                self.record.entry_point = True
        self.record.entry_point = is_entry_point(self.path, self.record.entry_point)
        return counts, imports

    def _interesting_lines(self) -> list[int]:
        """The lines that mention a registration API (or a local alias of one), sorted. Only statements
        covering one are walked: walking every node of a big module costs more than parsing it."""
        pattern = INTERESTING
        local = sorted({name for name, target in self.aliases.items()
                        if target.startswith(("torch.library", "torch._library")) or target.endswith("custom_op")}
                       | self.wrappers.keys())
        if local:
            pattern = re.compile(INTERESTING.pattern + "|" + "|".join(rf"\b{re.escape(n)}\b" for n in local))
        interesting: list[int] = []
        line, last = 1, 0
        for match in pattern.finditer(self.text):  # one scan of the text, not one search per line
            line += self.text.count("\n", last, match.start())
            last = match.start()
            if not interesting or interesting[-1] != line:
                interesting.append(line)
        return interesting

    def _visit(self, statements: list, top: bool, interesting: list[int], gathered: _Gathered, owner) -> None:
        for statement in statements:
            kind = type(statement)
            if not top:  # what a registration may name later, even when not walked
                if kind is ast.FunctionDef or kind is ast.AsyncFunctionDef:
                    self.functions.setdefault(statement.name, []).append(statement)
                elif kind is ast.Import or kind is ast.ImportFrom:
                    gathered.nested_imports.append(statement)
            first = statement.decorator_list[0].lineno if getattr(statement, "decorator_list", None) \
                else statement.lineno
            if not _covers(interesting, first, statement.end_lineno or first):
                continue
            children = _child_statements(statement)
            if children and not _covers(interesting, first, children[0][0].lineno - 1):
                inner = statement if kind is ast.FunctionDef or kind is ast.AsyncFunctionDef else owner
                if inner is not owner:
                    self.owners[id(inner)] = owner
                for block in children:  # a plain header (class, if, try, def): look inside only
                    self._visit(block, False, interesting, gathered, inner)
            else:
                self._walk(statement, gathered, owner)

    def _walk(self, statement, gathered: _Gathered, owner) -> None:
        """Gather the calls, defs and assignments of one statement; `owners` maps each call and def to the
        function it is written in (None: module level), which is how registration wrappers are found."""
        plain = id(statement) in self.module_level_ids and type(statement) in (ast.Expr, ast.Assign, ast.AnnAssign)
        stack = [(statement, owner)]
        while stack:
            node, owner = stack.pop()
            kind = type(node)
            if kind is ast.Call:
                gathered.calls.append(node)
                self.owners[id(node)] = owner
                if plain:
                    self.unconditional.add(id(node))
            elif kind is ast.FunctionDef or kind is ast.AsyncFunctionDef:
                gathered.defs.append(node)
                self.owners[id(node)] = owner
                if node is not statement:
                    self.functions.setdefault(node.name, []).append(node)
                for decorator in node.decorator_list:
                    self.decorator_ids.add(id(decorator))
                owner = node
            elif kind is ast.Assign or kind is ast.AnnAssign or kind is ast.With:
                gathered.assigns.append(node)
            elif (kind is ast.Import or kind is ast.ImportFrom) and node is not statement:
                gathered.nested_imports.append(node)
            stack.extend((child, owner) for child in ast.iter_child_nodes(node))

    def _constants(self, counts: dict[str, int]) -> None:
        """Module-level names assigned once to a value opgen can read (op names, schemas, keys)."""
        for statement in self.tree.body:
            if isinstance(statement, ast.Assign) and len(statement.targets) == 1 \
                    and isinstance(statement.targets[0], ast.Name) and counts.get(statement.targets[0].id) == 1:
                value = self.value(statement.value)
                if value is not UNKNOWN:
                    self.constants[statement.targets[0].id] = value

    def _register(self, gathered: _Gathered) -> None:
        """Libraries, then decorated functions, then calls, in source order."""
        for node in sorted(gathered.assigns, key=lambda n: n.lineno):
            self._library_assignment(node)
        for node in sorted(gathered.defs, key=lambda n: n.lineno):
            for decorator in node.decorator_list:
                wrapper = self._wrapper_at(decorator)
                if wrapper is not None:
                    self._expand(wrapper, decorator, node)
                else:
                    self._decorator(decorator, node)
        for call in gathered.calls:  # a decorator applied by a call: `torch.library.impl(lib, "f", "CPU")(kernel)`
            if isinstance(call.func, ast.Call) and len(call.args) == 1 and isinstance(call.args[0],
                                                                                     (ast.Name, ast.Lambda)):
                self.applied[id(call.func)] = call.args[0]
        for call in sorted(gathered.calls, key=lambda n: (n.lineno, n.col_offset)):
            if id(call) in self.decorator_ids or id(call) in self.templates:
                continue
            wrapper = self._wrapper_at(call)
            if wrapper is not None and wrapper.kind == "call":
                self._expand(wrapper, call, None)
            else:
                self._call(call)

    # -- registration wrappers (one level) ----------------------------------------------------
    def _find_wrappers(self, gathered: _Gathered) -> bool:
        """Local functions whose body forwards its own parameters to a registration call:
        `def impl_abstract(op_name, fn): torch.library.register_fake(op_name, fn)` (called), a function
        returning `register_fake(op_name)` (a decorator), or a decorator factory whose inner function
        registers the function it decorates. Their uses are read as that registration, one level deep."""
        for call in gathered.calls:
            op_node = self._template_op(call)
            owner = self.owners.get(id(call))
            if op_node is None or owner is None:
                continue
            outer = self.owners.get(id(owner))
            for candidate, inner in ((owner, None), (outer, owner)):
                if candidate is None or candidate.name in KNOWN_HELPERS \
                        or not _mentions_any(op_node, _arg_names(candidate)):
                    continue  # a copy of vLLM's helper is read as that helper (it defines the op too)
                kind = "factory" if inner is not None else ("decorator" if _returns(candidate, call) else "call")
                if kind == "factory" and not _returns_name(candidate, inner.name):
                    continue
                self.wrappers[candidate.name] = _Wrapper(candidate, call, inner, kind)
                self.templates.add(id(call))
                break
        return bool(self.wrappers)

    def _template_op(self, call: ast.Call) -> ast.AST | None:
        """The op argument of a registration call (None when the call registers nothing)."""
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr in ("impl", "_register_fake"):
            return call.args[0] if call.args else _keyword(call, "op_name")
        qual = self.qualname(func)
        if qual is not None and qual.startswith(LIB) and qual[len(LIB):] in WRAPPED_APIS:
            return call.args[0] if call.args else (_keyword(call, "qualname") or _keyword(call, "op"))
        return None

    def _wrapper_at(self, node: ast.AST):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not self.bindings:
            return self.wrappers.get(node.func.id)
        return None

    def _expand(self, wrapper: _Wrapper, site: ast.Call, decorated: ast.AST | None) -> None:
        """Read the wrapper's registration as if written at `site` with its parameters bound to the
        arguments given there (and, for a decorator, its function parameter to the decorated function)."""
        bindings = _bind(wrapper.function, site)
        if wrapper.kind == "factory":
            if decorated is None or not _arg_names(wrapper.inner):
                return
            bindings[_arg_names(wrapper.inner)[0]] = decorated
        elif (wrapper.kind == "decorator") != (decorated is not None):
            return
        self.bindings, self.site = bindings, site
        try:
            if wrapper.kind == "decorator":
                self._decorator(wrapper.call, decorated)
            else:
                self._call(wrapper.call)
        finally:
            self.bindings, self.site = {}, None

    def _imports(self, imports: list[ast.AST]) -> None:
        for node in sorted(imports, key=lambda n: n.lineno):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == "torch_npu":
                        self.record.npu_renamed = True
                    if alias.asname:
                        self.aliases[alias.asname] = alias.name
                    else:
                        top = alias.name.split(".")[0]
                        self.aliases.setdefault(top, top)
            else:
                if (node.module or "").split(".")[0] == "torch_npu" and node.level == 0:
                    self.record.npu_renamed = True
                for alias in node.names:
                    local = alias.asname or alias.name
                    self.import_sources[local] = (node.module or "", alias.name, node.level)
                    if node.module and node.level == 0:
                        self.aliases[local] = f"{node.module}.{alias.name}"

    # -- resolution -----------------------------------------------------------------------------
    def qualname(self, node: ast.AST) -> str | None:
        """`torch.library.impl` for `tl.impl` after `import torch.library as tl`; None if not a dotted name."""
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        head = self.aliases.get(node.id, node.id)
        parts.append(head)
        return ".".join(reversed(parts))

    def is_api(self, func: ast.AST, *names: str) -> str | None:
        qual = self.qualname(func)
        if qual is None:
            return None
        for name in names:
            if qual == LIB + name or qual == "torch._library.custom_ops." + name and name == "custom_op":
                return name
        return None

    def value(self, node: ast.AST | None):
        """A constant value (str, int, float, bool, None, tuples of those), or UNKNOWN."""
        if node is None:
            return UNKNOWN
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id in self.bindings:
                return self._bound_value(node.id)
            return self.constants.get(node.id, UNKNOWN)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = self.value(node.left), self.value(node.right)
            if isinstance(left, str) and isinstance(right, str):
                return left + right
            return UNKNOWN
        if isinstance(node, ast.JoinedStr):
            parts = []
            for part in node.values:
                if isinstance(part, ast.Constant):
                    parts.append(str(part.value))
                elif isinstance(part, ast.FormattedValue) and part.conversion == -1 and part.format_spec is None:
                    inner = self.value(part.value)
                    if not isinstance(inner, (str, int)) or isinstance(inner, bool):
                        return UNKNOWN
                    parts.append(str(inner))
                else:
                    return UNKNOWN
            return "".join(parts)
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            items = [self.value(e) for e in node.elts]
            return UNKNOWN if any(i is UNKNOWN for i in items) else tuple(items)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            inner = self.value(node.operand)
            return -inner if isinstance(inner, (int, float)) and not isinstance(inner, bool) else UNKNOWN
        return UNKNOWN

    def _bound_value(self, name: str):
        """A wrapper parameter's value: the argument given at the use, read where the use is."""
        bound = self.bindings[name]
        if not isinstance(bound, ast.expr):
            return UNKNOWN
        saved, self.bindings = self.bindings, {}
        try:
            return self.value(bound)
        finally:
            self.bindings = saved

    def where(self, node: ast.AST) -> Where:
        return Where(self.path, node.lineno, self._column(node.lineno, node.col_offset) + 1)

    def _column(self, line: int, byte_offset: int) -> int:
        """ast gives UTF-8 byte offsets; report characters."""
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        if text.isascii():
            return byte_offset
        return len(text.encode("utf-8")[:byte_offset].decode("utf-8", errors="replace"))

    def literal(self, node: ast.AST) -> Literal | None:
        """The literal when its characters map 1:1 onto the line (so columns and edits are exact)."""
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)) or node.end_lineno != node.lineno:
            return None
        line = self.lines[node.lineno - 1]
        start = self._column(node.lineno, node.col_offset)
        end = self._column(node.lineno, node.end_col_offset)
        source = line[start:end]
        prefix = 0
        while prefix < len(source) and source[prefix] in "rRuU":
            prefix += 1
        body = source[prefix:]
        for quote in ('"""', "'''", '"', "'"):
            if body.startswith(quote) and body.endswith(quote) and len(body) >= 2 * len(quote):
                inner = body[len(quote):-len(quote)]
                if inner == node.value:
                    return Literal(node.lineno, start + prefix + len(quote), inner)
                return None
        return None

    def op_ref(self, node: ast.AST, default_ns: str | None) -> tuple[str | None, str, str | None] | None:
        """(namespace, name, overload or None) named by a string, `torch.ops.ns.op[.ovl]` or a custom_op."""
        value = self.value(node)
        if isinstance(value, str):
            ns = default_ns
            text = value
            if "::" in text:
                ns, text = text.split("::", 1)
            name, _, overload = text.partition(".")
            if not name:
                return None
            return ns, name, (overload if _ else None)
        qual = self.qualname(node) or self._getattr_path(node)
        if qual and qual.startswith("torch.ops."):
            parts = qual.split(".")[2:]
            if len(parts) == 2:
                return parts[0], parts[1], None
            if len(parts) == 3:
                return parts[0], parts[1], "" if parts[2] == "default" else parts[2]
        if isinstance(node, ast.Name) and node.id in self.custom_ops:
            definition = self.custom_ops[node.id]
            return definition.namespace, definition.name, definition.overload
        return None

    def _getattr_path(self, node: ast.AST) -> str | None:
        """`torch.ops.ns.f` for `getattr(getattr(torch.ops.ns, name), overload)` with readable names."""
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
                and len(node.args) == 2):
            return None
        head = self.qualname(node.args[0]) or self._getattr_path(node.args[0])
        attr = self.value(node.args[1])
        return f"{head}.{attr}" if head and isinstance(attr, str) else None

    def library_at(self, node: ast.AST, line: int, *, imported: bool = True) -> LibraryDecl | None:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.args:
            return self._library_factory(node.func.id)
        key = _dotted(node)
        if key is None:
            return None
        candidates = self.libraries.get(key)
        if not candidates:
            return self._imported_library(key) if imported else None
        before = [decl for at, decl in candidates if at <= line]
        if before:
            return before[-1]
        namespaces = {decl.namespace for _, decl in candidates}
        return candidates[0][1] if len(namespaces) == 1 else None

    def _library_factory(self, name: str) -> LibraryDecl | None:
        """`get_meta_lib().impl(...)`: a local function whose body returns `Library(...)`."""
        for function in self.functions.get(name, ())[-1:]:
            returned = [n.value for n in function.body if isinstance(n, ast.Return) and isinstance(n.value, ast.Call)]
            if len(returned) == 1:
                return self._library_call(returned[0], scoped=False, module_level=False, record=False)
        return None

    # -- libraries ------------------------------------------------------------------------------
    def _library_assignment(self, node: ast.AST) -> None:
        if isinstance(node, ast.With):
            for item in node.items:
                if isinstance(item.context_expr, ast.Call) and item.optional_vars is not None:
                    decl = self._library_call(item.context_expr, scoped=True, module_level=False)
                    key = _dotted(item.optional_vars)
                    if decl and key:
                        self.libraries.setdefault(key, []).append((node.lineno, decl))
            return
        value = node.value
        if not isinstance(value, ast.Call):
            return
        if len(value.args) >= 2 and self.is_api(value.func, "custom_op", "triton_op"):
            # `op = custom_op("ns::f", fn, ...)`, then `@op.register_fake`: the name is the op
            definition = self._custom_op(value, self._function_arg(value.args[1], value.lineno),
                                         triton=self.is_api(value.func, "triton_op") is not None)
            self.decorator_ids.add(id(value))  # read here, not again as a plain call
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if definition is not None and isinstance(target, ast.Name):
                    self.custom_ops[target.id] = definition
            return
        decl = self._library_call(value, scoped=False, module_level=id(node) in self.module_level_ids)
        if decl is None:
            return
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            key = _dotted(target)
            if key:
                self.libraries.setdefault(key, []).append((node.lineno, decl))

    def _library_call(self, call: ast.Call, *, scoped: bool, module_level: bool, record: bool = True
                      ) -> LibraryDecl | None:
        qual = self.qualname(call.func)
        if qual not in (LIB + "Library", LIB + "_scoped_library", "torch._library.Library"):
            return None
        args = _arguments(call, ("ns", "kind", "dispatch_key"))
        namespace, kind = self.value(args.get("ns")), self.value(args.get("kind"))
        key_node = args.get("dispatch_key")
        key = self.value(key_node) if key_node is not None else ""
        if not isinstance(namespace, str) or not isinstance(kind, str):
            return None
        decl = LibraryDecl(namespace, kind, key if isinstance(key, str) else UNKNOWN, self.where(call),
                           module_level, scoped or qual.endswith("_scoped_library"))
        if not record:
            return decl
        self.record.libraries.append(decl)
        if key_node is not None:
            self._dispatch_key(key_node)
        return decl

    def _dispatch_key(self, node: ast.AST) -> None:
        value = self.value(node)
        if isinstance(value, str) and value:
            self.record.dispatch_keys.append(KeyLiteral(value, self.where(node), self.literal(node)))

    # -- calls ----------------------------------------------------------------------------------
    def _call(self, call: ast.Call) -> None:
        func = call.func
        if isinstance(func, ast.Attribute):
            # Only a Library method name makes it worth opening the module an object was imported from.
            library = self.library_at(func.value, call.lineno, imported=func.attr in LIBRARY_METHODS)
            if library is not None:
                self._library_method(call, func.attr, library)
                return
            if isinstance(func.value, ast.Name) and func.value.id in self.custom_ops:
                self._custom_op_method(call, self.custom_ops[func.value.id], func.attr, None)
                return
        qual = self.qualname(func)
        if qual is None:
            return
        if qual.startswith(LIB):
            api = qual[len(LIB):]
            if api == "define":
                self._torch_library_define(call)
            elif api in ("impl", "_impl"):
                self._torch_library_impl(call, None)
            elif api in ("register_fake", "impl_abstract", "_register_fake"):
                self._register_fake(call, None)
            elif api == "register_kernel":
                self._register_kernel(call, None)
            elif api == "register_autograd":
                self._register_autograd(call.args[0] if call.args else _keyword(call, "op"))
            elif api == "custom_op" and call.args and len(call.args) >= 2:
                self._custom_op(call, self._function_arg(call.args[1], call.lineno))
        elif qual.endswith("direct_register_custom_op"):
            self._direct_register(call)
        elif qual in ("torch.fx.node.has_side_effect", "torch.fx.has_side_effect") or qual.endswith(".has_side_effect") \
                or qual == "has_side_effect":
            self._side_effect(call)

    def _library_method(self, call: ast.Call, method: str, library: LibraryDecl) -> None:
        if library.namespace is UNKNOWN:
            return
        if method == "define":
            args = _arguments(call, ("schema", "alias_analysis"))
            self._define(call, args.get("schema"), library.namespace, self._tags(call), "library", library)
        elif method == "impl":
            args = _arguments(call, ("op_name", "fn", "dispatch_key"))
            key_node = args.get("dispatch_key")
            if key_node is not None:
                self._dispatch_key(key_node)
                key = self.value(key_node)
            else:
                key = library.key or "CompositeImplicitAutograd"
            self._registration(args.get("op_name"), library.namespace, key, call,
                               self._function_arg(args.get("fn"), call.lineno), "Library.impl")
        elif method == "_register_fake":
            args = _arguments(call, ("op_name", "fn"))
            self._registration(args.get("op_name"), library.namespace, "fake", call,
                               self._function_arg(args.get("fn"), call.lineno), "Library._register_fake")
        elif method == "fallback":
            args = _arguments(call, ("fn", "dispatch_key"))
            if args.get("dispatch_key") is not None:
                self._dispatch_key(args["dispatch_key"])

    def _registration(self, op_node, default_ns, key, call, function, api, *, custom_op_target=False) -> None:
        ref = self.op_ref(op_node, default_ns) if op_node is not None else None
        role = "fake" if key in ("fake", "Meta") else "kernel"
        if ref is None:
            if role == "fake" or key in ("CompositeExplicitAutograd", "CompositeImplicitAutograd"):
                self.record.unresolved_fake_namespaces.add(default_ns)
            return
        if not isinstance(key, str):
            key = UNKNOWN
            self.record.unresolved_fake_namespaces.add(ref[0])
        namespace, name, overload = ref
        self.record.registrations.append(Registration(role, namespace, name, overload, key,
                                                      self.where(self.site or call), api, function, custom_op_target))

    def _torch_library_define(self, call: ast.Call) -> None:
        args = _arguments(call, ("qualname", "schema"))
        qual = self.value(args.get("qualname"))
        if not isinstance(qual, str) or "::" not in qual:
            return
        lib = _keyword(call, "lib")
        library = self.library_at(lib, call.lineno) if lib is not None else None
        self._define(call, args.get("schema"), qual.split("::", 1)[0], self._tags(call), "library", library,
                     name_prefix=qual.split("::", 1)[1])

    def _torch_library_impl(self, call: ast.Call, decorated: ast.AST | None) -> None:
        first = call.args[0] if call.args else _keyword(call, "qualname")
        library = self.library_at(first, call.lineno) if first is not None else None
        if library is not None:  # the deprecated impl(lib, name, dispatch_key) form: keys only
            args = _arguments(call, ("lib", "name", "dispatch_key"))
            key_node = args.get("dispatch_key")
            if key_node is not None:
                self._dispatch_key(key_node)
            key = self.value(key_node) if key_node is not None else (library.key or "CompositeImplicitAutograd")
            self._registration(args.get("name"), library.namespace, key, call,
                               self._function_node(decorated) if decorated else self._applied(call),
                               "torch.library.impl")
            return
        args = _arguments(call, ("qualname", "types", "func"))
        types = self.value(args.get("types"))
        function = self._function_node(decorated) if decorated else (
            self._function_arg(args["func"], call.lineno) if "func" in args else self._applied(call))
        for key in _device_keys(types):
            self._registration(args.get("qualname"), None, key, call, function, "torch.library.impl")

    def _register_fake(self, call: ast.Call, decorated: ast.AST | None) -> None:
        op_node = call.args[0] if call.args else None
        function = self._function_node(decorated) if decorated else (
            self._function_arg(call.args[1], call.lineno) if len(call.args) > 1 else self._applied(call))
        self._registration(op_node, None, "fake", call, function, "register_fake")

    def _register_kernel(self, call: ast.Call, decorated: ast.AST | None) -> None:
        op_node = call.args[0] if call.args else None
        types = self.value(call.args[1]) if len(call.args) > 1 else self.value(_keyword(call, "device_types"))
        function = self._function_node(decorated) if decorated else (
            self._function_arg(call.args[2], call.lineno) if len(call.args) > 2 else self._applied(call))
        for key in _device_keys(types):
            self._registration(op_node, None, key, call, function, "register_kernel")

    def _custom_op_method(self, call: ast.Call, definition: Definition, method: str, decorated) -> None:
        if method == "register_fake":
            function = self._function_node(decorated) if decorated else (
                self._function_arg(call.args[0], call.lineno) if call.args else None)
            self.record.registrations.append(Registration("fake", definition.namespace, definition.name,
                                                          definition.overload, "fake", self.where(call),
                                                          "CustomOpDef.register_fake", function, True,
                                                          origin=definition))
        elif method == "register_autograd":
            self.record.autograd_ops.add((definition.namespace, definition.name, definition.overload or ""))
        elif method == "register_kernel":
            types = self.value(call.args[0]) if call.args else self.value(_keyword(call, "device_types"))
            function = self._function_node(decorated) if decorated else (
                self._function_arg(call.args[1], call.lineno) if len(call.args) > 1 else None)
            for key in _device_keys(types):
                self.record.registrations.append(Registration("kernel", definition.namespace, definition.name,
                                                              definition.overload, key, self.where(call),
                                                              "CustomOpDef.register_kernel", function, True,
                                                              origin=definition))

    def _register_autograd(self, op_node) -> None:
        ref = self.op_ref(op_node, None) if op_node is not None else None
        if ref is not None and ref[0] is not None:
            self.record.autograd_ops.add((ref[0], ref[1], ref[2] or ""))

    def _side_effect(self, call: ast.Call) -> None:
        if not call.args:
            return
        ref = self.op_ref(call.args[0], None)
        if ref is None or ref[0] is None:
            self.record.unresolved_side_effect = True
        else:
            self.record.side_effect_ops.add((ref[0], ref[1]))

    # -- decorators -----------------------------------------------------------------------------
    def _decorator(self, decorator: ast.AST, function: ast.AST) -> None:
        if isinstance(decorator, ast.Attribute) and isinstance(decorator.value, ast.Name) \
                and decorator.value.id in self.custom_ops:
            self._custom_op_method(ast.Call(decorator, [], [], lineno=decorator.lineno,
                                            col_offset=decorator.col_offset),
                                   self.custom_ops[decorator.value.id], decorator.attr, function)
            return
        qual = self.qualname(decorator)
        if qual in (LIB + "register_fake", LIB + "impl_abstract"):  # bare `@register_fake` is not valid; skip
            return
        if not isinstance(decorator, ast.Call):
            return
        func = decorator.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in self.custom_ops:
            self._custom_op_method(decorator, self.custom_ops[func.value.id], func.attr, function)
            return
        api = self.is_api(func, "custom_op", "register_fake", "impl_abstract", "_register_fake", "impl", "_impl",
                          "register_kernel", "triton_op")
        if api in ("custom_op", "triton_op"):
            definition = self._custom_op(decorator, self._function_node(function), triton=api == "triton_op")
            if definition is not None:
                self.custom_ops[function.name] = definition
        elif api in ("register_fake", "impl_abstract", "_register_fake"):
            self._register_fake(decorator, function)
        elif api in ("impl", "_impl"):
            self._torch_library_impl(decorator, function)
        elif api == "register_kernel":
            self._register_kernel(decorator, function)

    # -- definitions ----------------------------------------------------------------------------
    def _tags(self, call: ast.Call) -> tuple[str, ...] | None:
        node = _keyword(call, "tags")
        if node is None:
            return ()
        items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
        tags = []
        for item in items:
            qual = self.qualname(item)
            if qual is None or not qual.startswith("torch.Tag."):
                return None
            tags.append(qual.rsplit(".", 1)[1])
        return tuple(tags)

    def _define(self, call, schema_node, namespace, tags, style, library, *, name_prefix: str = "") -> None:
        schema = self.value(schema_node)
        if not isinstance(schema, str):
            self.record.opaque_namespaces.add(namespace)
            return
        text = name_prefix + schema
        literal = self.literal(schema_node)
        head = text.split("(", 1)[0].strip()
        own_ns = None
        if "::" in head:
            own_ns, head = head.split("::", 1)
        name, _, overload = head.partition(".")
        definition = Definition(own_ns or namespace, name.strip(), overload.strip(), self.where(call), style, text,
                                tags=tags, library_namespace=namespace if own_ns else None,
                                unconditional=id(call) in self.unconditional)
        if literal is not None:
            definition.schema_literal = literal
            definition.schema_column = literal.offset + 1 - len(name_prefix)
            definition.name_offset = len(name_prefix)
            definition.where = Where(self.path, literal.line, literal.offset + 1)
        elif schema_node is not None:
            definition.where = self.where(schema_node)
        self.record.definitions.append(definition)

    def _custom_op(self, call: ast.Call, function: Function | None, triton: bool = False) -> Definition | None:
        name_value = self.value(call.args[0]) if call.args else self.value(_keyword(call, "name"))
        if not isinstance(name_value, str) or "::" not in name_value:
            return None
        namespace, name = name_value.split("::", 1)
        schema_node = _keyword(call, "schema")
        schema_text = None
        literal = None
        if schema_node is not None:
            schema = self.value(schema_node)
            if not isinstance(schema, str):
                return None
            schema_text = name + schema
            literal = self.literal(schema_node)
        mutates_node = _keyword(call, "mutates_args")
        mutates = self.value(mutates_node) if mutates_node is not None else UNKNOWN
        device_types = self.value(_keyword(call, "device_types"))
        definition = Definition(namespace, name, "", self.where(call), "custom_op", schema_text,
                                tags=self._tags(call), mutates_args=mutates,
                                mutates_where=self.where(mutates_node) if mutates_node is not None else None,
                                kernel=function,
                                device_types=_device_keys(device_types) if device_types is not UNKNOWN else None,
                                fake_from_kernel=triton)
        if literal is not None:
            definition.schema_literal = literal
            definition.schema_column = literal.offset + 1 - len(name)
            definition.name_offset = len(name)
        self.record.definitions.append(definition)
        if function is not None:
            for key in definition.device_types or ("CompositeExplicitAutograd",):
                self.record.registrations.append(Registration("kernel", namespace, name, "", key, self.where(call),
                                                              "custom_op", function, True, origin=definition))
        return definition

    def _direct_register(self, call: ast.Call) -> None:
        args = _arguments(call, ("op_name", "op_func", "mutates_args", "fake_impl", "target_lib", "dispatch_key",
                                 "tags"))
        name = self.value(args.get("op_name"))
        if not isinstance(name, str):
            return
        library = self.library_at(args["target_lib"], call.lineno) if args.get("target_lib") is not None else None
        namespace = library.namespace if library else None
        function = self._function_arg(args.get("op_func"), call.lineno)
        mutates_node = args.get("mutates_args")
        mutates = self.value(mutates_node) if mutates_node is not None else ()
        key_node = args.get("dispatch_key")
        key = "CUDA"
        if key_node is not None:
            self._dispatch_key(key_node)
            key = self.value(key_node)
        definition = Definition(namespace, name, "", self.where(call), "custom_op", None, tags=self._tags(call),
                                mutates_args=mutates,
                                mutates_where=self.where(mutates_node) if mutates_node is not None else None,
                                kernel=function, api="direct_register_custom_op")
        self.record.definitions.append(definition)
        if function is not None and isinstance(key, str):
            self.record.registrations.append(Registration("kernel", namespace, name, "", key, self.where(call),
                                                          "direct_register_custom_op", function, origin=definition))
        fake_node = args.get("fake_impl")
        if fake_node is not None and not (isinstance(fake_node, ast.Constant) and fake_node.value is None):
            self.record.registrations.append(Registration("fake", namespace, name, "", "fake", self.where(call),
                                                          "direct_register_custom_op",
                                                          self._function_arg(fake_node, call.lineno),
                                                          origin=definition))

    # -- functions ------------------------------------------------------------------------------
    def _applied(self, call: ast.Call) -> Function | None:
        """The function a registration call is applied to (`register_fake("ns::f")(fake)`), if any."""
        name = self.applied.get(id(call))
        return self._function_arg(name, call.lineno) if name is not None else None

    def _function_arg(self, node: ast.AST | None, line: int) -> Function | None:
        if isinstance(node, ast.Lambda):  # `lib.impl("f", lambda x: x.add_(1), "CPU")`: its body is read too
            return self._function_node(node)
        if not isinstance(node, ast.Name):
            return None
        if node.id in self.bindings:  # a wrapper's function parameter: the function given at the use
            bound = self.bindings[node.id]
            if isinstance(bound, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return self._function_node(bound)
            saved, self.bindings = self.bindings, {}
            try:
                return self._function_arg(bound if isinstance(bound, ast.expr) else None, line)
            finally:
                self.bindings = saved
        candidates = self.functions.get(node.id)
        if not candidates:
            return self._imported_function(node.id)
        before = [f for f in candidates if f.lineno <= line]
        return self._function_node(before[-1] if before else candidates[-1])

    def _imported_library(self, local: str) -> LibraryDecl | None:
        """`from .ops import lib`: the module-level Library of a sibling module."""
        source = self.import_sources.get(local)
        if source is None:
            return None
        module, name, level = source
        target = _module_file(self.path, module, level)
        if target is None:
            return None
        return _libraries_in_file(target).get(name)

    def _imported_function(self, local: str) -> Function | None:
        """A placeholder for a function imported from a file next to this one (resolved by the checks)."""
        source = self.import_sources.get(local)
        if source is None:
            return None
        module, name, level = source
        target = _module_file(self.path, module, level)
        if target is None:
            return None
        return Function(name, Where(target, 1, 1), [], None, imported_from=target)

    def _function_node(self, node: ast.AST | None) -> Function | None:
        if node is None:
            return None
        cached = self.function_facts.get(id(node))
        if cached is None:
            cached = self.function_facts[id(node)] = _FunctionReader(self, node).read()
        return cached


class _FunctionReader:
    """The facts the checks need about one function body."""

    def __init__(self, collector: _Collector, node: ast.FunctionDef) -> None:
        self.c = collector
        self.node = node
        self.host: set[str] = set()  # parameters on the host by construction (name or docstring says so)
        self.rebound: dict[str, int] = {}  # re-bound parameters -> the first line that re-binds each
        self.looped: set[int] | None = None  # ids of the names inside loops (computed when needed)

    def read(self) -> Function:
        node = self.node
        params = _params(node, self.c)
        lambda_ = isinstance(node, ast.Lambda)
        returns = getattr(node, "returns", None)
        function = Function("<lambda>" if lambda_ else node.name, self.c.where(node), params,
                            ast.unparse(returns) if returns is not None else None)
        names = {p.name for p in params if p.kind in ("positional", "kwonly")}
        self.host = self._host_params(names)
        self.rebound = self._rebound(names)
        live = names - self.rebound.keys()
        if lambda_:  # a lambda returns its body
            self._returned(node.body, function, live)
        else:
            function.refuses = tuple(_refused(node.body, names))
            function.discarded = tuple(_discarded(node.body, [n for n in self.rebound if self.rebound[n] > 0]))
        for sub in ast.walk(node):
            self._node(sub, function, live)
        if function.todo is None:
            function.todo = self._todo_marker()
        return function

    def _node(self, sub: ast.AST, function: Function, live: set[str]) -> None:
        kind = type(sub)
        if kind is ast.Call:
            self._call(sub, function, live)
        elif kind is ast.Assign:
            for target in sub.targets:
                self._store(target, function, live, "assigns into")
        elif kind is ast.AugAssign:
            self._store(sub.target, function, live, "updates in place", augmented=True)
        elif kind is ast.Return and sub.value is not None:
            self._returned(sub.value, function, live)
        elif kind is ast.Raise and sub.exc is not None and function.todo is None:
            self._raise(sub, function)
        elif kind is ast.Name and sub.id == "get_ctx" or kind is ast.Attribute and sub.attr == "get_ctx":
            function.uses_get_ctx = True

    def _todo_marker(self) -> Finding | None:
        """The `# opgen: TODO-fake` marker comment inside the function, if any."""
        node = self.node
        end = getattr(node, "end_lineno", node.lineno) or node.lineno
        for number in range(node.lineno, min(end, len(self.c.lines)) + 1):
            if TODO_MARKER in self.c.lines[number - 1]:
                return Finding("marker comment", number, self.c.lines[number - 1].index(TODO_MARKER) + 1)
        return None

    def _host_params(self, names: set[str]) -> set[str]:
        """Parameters on the host by construction: the name says so (`cpu_index`), a docstring line naming
        it does ("cu_seqlens: on the CPU"), or a comment on its own line of the signature does
        (`lens: torch.Tensor,  # CPU tensor`)."""
        host = {name for name in names if HOST_NAME.search(name)}
        node = self.node
        doc = ast.get_docstring(node) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else None
        for line in (doc or "").splitlines():
            if HOST_WORD.search(line):
                host |= {name for name in names if re.search(rf"\b{re.escape(name)}\b", line)}
        args = _own_args(node)
        for arg in args:  # only a parameter alone on its line owns the line's comment
            alone = arg.arg in names and sum(a.lineno == arg.lineno for a in args) == 1
            line = self.c.lines[arg.lineno - 1] if alone and arg.lineno <= len(self.c.lines) else ""
            head, _, tail = line.partition(arg.arg)
            if not head.strip() and HOST_WORD.search(tail.partition("#")[2]):
                host.add(arg.arg)
        return host

    def _returned(self, value: ast.AST, function: Function, live: set[str]) -> None:
        for element in value.elts if isinstance(value, ast.Tuple) else [value]:
            if isinstance(element, ast.Name) and (element.id in live or self._not_yet_rebound(element)):
                function.returned_params.append(self._finding("returns", element, element.id))

    def _finding(self, what: str, node: ast.AST, param: str = "") -> Finding:
        where = self.c.where(node)
        return Finding(what, where.line, where.column, param)

    def _rebound(self, names: set[str]) -> dict[str, int]:
        """The parameters the body re-binds, each with the first line that does (0: from the start)."""
        rebound: dict[str, int] = {}
        # `out += x` writes a tensor in place (Tensor.__iadd__), it does not re-bind the name
        augmented = set()
        own = {id(arg) for arg in _own_args(self.node)}
        subs = list(ast.walk(self.node))
        for sub in subs:
            if isinstance(sub, ast.AugAssign):
                augmented.add(id(sub.target))
        for sub in subs:
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, (ast.Store, ast.Del)) and sub.id in names \
                    and id(sub) not in augmented:
                rebound[sub.id] = min(rebound.get(sub.id, sub.lineno), sub.lineno)
            elif isinstance(sub, (ast.Global, ast.Nonlocal)):
                rebound.update((n, 0) for n in sub.names if n in names)
            elif isinstance(sub, ast.arg) and sub.arg in names and id(sub) not in own:
                rebound[sub.arg] = 0  # shadowed by a nested function's parameter
        return rebound

    def _not_yet_rebound(self, name: ast.Name) -> bool:
        """`return x` above every line that re-binds `x`, outside any loop: `x` is still the parameter
        (`if not ready: return x` ... `x = gather(x)`)."""
        first = self.rebound.get(name.id, 0)
        if not 0 < name.lineno < first:
            return False
        if self.looped is None:
            self.looped = {id(sub) for loop in ast.walk(self.node) if isinstance(loop, (ast.For, ast.While))
                           for sub in ast.walk(loop) if isinstance(sub, ast.Name)}
        return id(name) not in self.looped

    def _root(self, node: ast.AST) -> str | None:
        """The parameter a write through `node` reaches: `x`, `x[i]`, `x.data`, `x.view(...)[i]`."""
        while True:
            if isinstance(node, ast.Name):
                return node.id
            if isinstance(node, ast.Subscript) or (
                    isinstance(node, ast.Attribute) and node.attr in ("data", "T", "mT", "real", "imag")):
                node = node.value
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in VIEW_METHODS:
                node = node.func.value
            else:
                return None

    def _tensor_root(self, node: ast.AST) -> str | None:
        """The parameter a value is computed from, unless it is only shape metadata (`x.shape[0]`)."""
        while True:
            if isinstance(node, ast.Name):
                return node.id
            if isinstance(node, ast.Subscript):
                node = node.value
            elif isinstance(node, ast.Attribute):
                if node.attr in SHAPE_ATTRS:
                    return None
                node = node.value
            elif isinstance(node, ast.Call) and self._torch_data_call(node):
                node = node.args[0]  # `torch.index_select(x, ...)`: computed from x's values, as x.index_select(...)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if node.func.attr in SHAPE_ATTRS:
                    return None
                node = node.func.value
            else:
                return None

    def _torch_data_call(self, call: ast.Call) -> bool:
        """`torch.<fn>(x, ...)` computing from its first argument's values (not an allocator, whose first argument
        is a shape)."""
        qual = self.c.qualname(call.func) or ""
        short = qual.rsplit(".", 1)[-1]
        return bool(call.args) and qual in (f"torch.{short}", f"torch.nn.functional.{short}") and short not in ALLOCATORS

    def _store(self, target, function, live, how, augmented=False) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                self._store(element, function, live, how)
            return
        if isinstance(target, ast.Subscript) or (augmented and isinstance(target, ast.Name)):
            root = self._root(target)
            if root in live:
                function.mutations.append(self._finding(how, target, root))

    def _call(self, call: ast.Call, function: Function, live: set[str]) -> None:
        """What one call in the body does: writes through `out=`, then a `torch.*` function's or a tensor
        method's writes, data reads, allocations, random ops and host syncs."""
        self._out_keyword(call, function, live)
        func = call.func
        if not isinstance(func, ast.Attribute):
            return
        qual = self.c.qualname(func)
        if qual is not None and qual.startswith("torch.") and not _is_param_chain(func.value, live):
            self._torch_function(call, qual, function, live)
        else:
            self._tensor_method(call, func, function, live)

    def _out_keyword(self, call: ast.Call, function: Function, live: set[str]) -> None:
        for keyword in call.keywords:
            if keyword.arg == "out":
                outs = keyword.value.elts if isinstance(keyword.value, (ast.Tuple, ast.List)) else [keyword.value]
                for out in outs:
                    root = self._root(out)
                    if root in live:
                        function.mutations.append(self._finding("passes out=", out, root))

    def _torch_function(self, call: ast.Call, qual: str, function: Function, live: set[str]) -> None:
        """`torch.add_(x, ...)` (a write), `torch.empty(...)` (an allocation: which device), random ops,
        `torch.cuda.synchronize()`, and data-dependent shapes (`torch.nonzero(x)`)."""
        short = qual.rsplit(".", 1)[1]
        if short.endswith("_") and not short.startswith("_") and short not in KERNEL_METHODS_NOT_WRITING \
                and call.args:
            root = self._root(call.args[0])
            if root in live:
                function.mutations.append(self._finding(f"calls {qual}() on", call, root))
        if short in ALLOCATORS and qual == "torch." + short:
            self._allocation(call, qual, function)
        if short in RANDOM_FUNCS and (qual == "torch." + short or qual.startswith("torch.nn.functional.")):
            function.capture_unsafe.append(self._finding(f"random op {qual}()", call))
        if short == "synchronize":
            function.capture_unsafe.append(self._finding(f"host sync {qual}()", call))
        if short in DYNAMIC_SHAPE and qual == "torch." + short and call.args \
                and self._tensor_root(call.args[0]) in live:
            function.data_reads.append(self._finding(f"{qual}()", call))
            function.capture_unsafe.append(self._finding(f"host sync {qual}()", call))

    def _allocation(self, call: ast.Call, qual: str, function: Function) -> None:
        if not _has_kw(call, "device"):
            function.device_less_allocs.append(self._finding(qual, call))
            return
        fixed = self._fixed_device(_keyword(call, "device"))
        if fixed:
            function.fixed_device_allocs.append(self._finding(f"{qual}(device={fixed!r})", call, fixed.split(":")[0]))

    def _tensor_method(self, call: ast.Call, func: ast.Attribute, function: Function, live: set[str]) -> None:
        """`x.add_(...)` on a parameter (a write), `.item()`/`.tolist()` (data reads), host syncs, random ops."""
        attr = func.attr
        root = self._root(func.value)
        if attr.endswith("_") and not attr.startswith("_") and attr not in KERNEL_METHODS_NOT_WRITING \
                and root in live:
            function.mutations.append(self._finding(f"calls .{attr}() on", func.value, root))
        tensor_root = self._tensor_root(func.value)
        if tensor_root not in live:
            return
        if attr in DATA_READS or attr in DYNAMIC_SHAPE:
            function.data_reads.append(self._finding(f".{attr}()", call))
        if attr in SYNC_METHODS and tensor_root not in self.host:
            function.capture_unsafe.append(self._finding(f"host sync .{attr}()", call))
        if attr in RANDOM_METHODS:
            function.capture_unsafe.append(self._finding(f"random op .{attr}()", call))

    def _fixed_device(self, node: ast.AST | None) -> str | None:
        """'cpu' for `device="cpu"` or `device=torch.device("cpu")`: a device written into the code."""
        if isinstance(node, ast.Call) and self.c.qualname(node.func) == "torch.device" and node.args:
            node = node.args[0]
        value = self.c.value(node) if node is not None else UNKNOWN
        return value if isinstance(value, str) and value.split(":")[0] in ("cpu", "cuda", "npu", "meta") else None

    def _raise(self, node: ast.Raise, function: Function) -> None:
        exc = node.exc
        call = exc if isinstance(exc, ast.Call) else None
        name = self.c.qualname(call.func if call else exc)
        texts = []
        if call is not None:
            for arg in call.args:
                value = self.c.value(arg)
                if isinstance(value, str):
                    texts.append(value)
                elif isinstance(arg, ast.JoinedStr):
                    texts.extend(str(v.value) for v in arg.values if isinstance(v, ast.Constant))
        top_level = node in self.node.body
        if name == "NotImplementedError" and top_level or any("TODO" in t for t in texts):
            function.todo = self._finding("raises " + (name or "an error"), node)


KNOWN_HELPERS = frozenset({"direct_register_custom_op"})
WRAPPED_APIS = frozenset({"register_fake", "impl_abstract", "_register_fake", "impl", "_impl", "register_kernel"})


@dataclass
class _Wrapper:
    """A local registration wrapper: `function`'s parameters reach `call`, a registration; `kind` is "call"
    (used as `wrapper("ns::f", fn)`), "decorator" (returns the registration decorator) or "factory"
    (returns `inner`, which registers the function it decorates)."""

    function: ast.FunctionDef
    call: ast.Call
    inner: ast.FunctionDef | None
    kind: str


def _arg_names(node: ast.AST) -> list[str]:
    a = node.args
    return [arg.arg for arg in (*a.posonlyargs, *a.args, *a.kwonlyargs)]


def _mentions_any(node: ast.AST, names: list[str]) -> bool:
    wanted = set(names)
    return any(isinstance(sub, ast.Name) and sub.id in wanted for sub in ast.walk(node))


def _returns(function: ast.AST, call: ast.Call) -> bool:
    return any(isinstance(n, ast.Return) and n.value is call for n in ast.walk(function))


def _returns_name(function: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Return) and isinstance(n.value, ast.Name) and n.value.id == name
               for n in function.body)


def _bind(function: ast.FunctionDef, call: ast.Call) -> dict[str, object]:
    """The wrapper's parameters bound to the call's arguments, else to their defaults."""
    a = function.args
    positional = [*a.posonlyargs, *a.args]
    bound: dict[str, object] = {}
    for arg, default in zip(reversed(positional), reversed(a.defaults)):
        bound[arg.arg] = default
    for arg, default in zip(a.kwonlyargs, a.kw_defaults):
        if default is not None:
            bound[arg.arg] = default
    for arg, value in zip(positional, call.args):
        if not isinstance(value, ast.Starred):
            bound[arg.arg] = value
    for keyword in call.keywords:
        if keyword.arg is not None:
            bound[keyword.arg] = keyword.value
    return bound


def _is_main_guard(test: ast.AST) -> bool:
    """`__name__ == "__main__"` (either way round)."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, test.comparators[0]]
    return any(isinstance(n, ast.Name) and n.id == "__name__" for n in sides) and any(
        isinstance(n, ast.Constant) and n.value == "__main__" for n in sides)


def _child_statements(statement: ast.AST) -> list[list[ast.stmt]]:
    """The statement blocks inside a compound statement (bodies, else, finally, handlers, cases)."""
    blocks = []
    for name in ("body", "orelse", "finalbody"):
        block = getattr(statement, name, None)
        if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
            blocks.append(block)
    for handler in getattr(statement, "handlers", ()) or ():
        blocks.append(handler.body)
    for case in getattr(statement, "cases", ()) or ():
        blocks.append(case.body)
    blocks.sort(key=lambda block: block[0].lineno)
    return blocks


def _module_file(path: str, module: str, level: int) -> str | None:
    """The file a `from <module> import ...` in `path` reads, when it is a source file on disk."""
    parts = [p for p in module.split(".") if p]
    if level > 0:
        base = os.path.dirname(os.path.abspath(path))
        for _ in range(level - 1):
            base = os.path.dirname(base)
        bases = [base]
    else:
        if not parts:
            return None
        bases, current = [], os.path.dirname(os.path.abspath(path))
        while True:  # the package root is an ancestor directory of this file
            bases.append(current)
            parent = os.path.dirname(current)
            if parent == current:
                break
            current = parent
    for base in bases:
        stem = os.path.join(base, *parts)
        for candidate in (stem + ".py", os.path.join(stem, "__init__.py")):
            if os.path.isfile(candidate):
                return candidate if os.path.isabs(path) else os.path.relpath(candidate)
    return None


_LIBRARIES_BY_FILE: dict[str, dict[str, LibraryDecl]] = {}


def _libraries_in_file(path: str) -> dict[str, LibraryDecl]:
    """The module-level `name = Library(...)` objects of a file (cached: several files import them)."""
    cached = _LIBRARIES_BY_FILE.get(path)
    if cached is not None:
        return cached
    found: dict[str, LibraryDecl] = {}
    _LIBRARIES_BY_FILE[path] = found
    try:
        with open(path, "rb") as handle:
            data = handle.read()
        if b"Library(" not in data and b"_scoped_library(" not in data:
            return found
        text = data.decode("utf-8", errors="replace")
        tree = ast.parse(text, filename=path)
    except (OSError, SyntaxError, ValueError, RecursionError):
        return found
    collector = _Collector(FileRecord(path), text, tree)
    collector._imports([n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))])
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Call):
            decl = collector._library_call(node.value, scoped=False, module_level=False)
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if decl is not None and isinstance(target, ast.Name):
                    found[target.id] = decl
    return found


def function_in_file(path: str, name: str) -> Function | None:
    """Facts about the module-level function `name` of another file (a kernel or fake imported by a
    registration), or None when it is not there."""
    try:
        with open(path, "rb") as handle:
            text = handle.read().decode("utf-8", errors="replace")
        tree = ast.parse(text, filename=path)
    except (OSError, SyntaxError, ValueError):
        return None
    collector = _Collector(FileRecord(path), text, tree)
    collector._imports([n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))])
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            collector.functions.setdefault(name, []).append(node)
    definition = collector.functions.get(name)
    if not definition:
        return collector._imported_function(name)
    return collector._function_node(definition[-1])


def _refused(body: list[ast.stmt], names: set[str]):
    """The parameters a top-level `if p is not None: raise ...` refuses (`offsets` not supported)."""
    for statement in body:
        test = statement.test if isinstance(statement, ast.If) else None
        if isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id in names \
                and len(test.ops) == 1 and isinstance(test.ops[0], ast.IsNot) \
                and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value is None \
                and isinstance(statement.body[0], ast.Raise):
            yield test.left.id


def _discarded(body: list[ast.stmt], names: list[str]):
    """The parameters whose first mention in the body is a top-level statement re-binding them to something
    else (`out = x.clone()`, not `out = out.view(...)`): the value the caller passed is never read or written."""
    for name in names:
        for statement in body:
            targets = statement.targets if isinstance(statement, ast.Assign) else (
                [statement.target] if isinstance(statement, ast.AnnAssign) else [])
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                if statement.value is not None and not _mentions(statement.value, name):
                    yield name
                break
            if _mentions(statement, name):
                break


def _mentions(node: ast.AST, name: str) -> bool:
    return any(isinstance(sub, ast.Name) and sub.id == name for sub in ast.walk(node))


def _is_param_chain(node: ast.AST, live: set[str]) -> bool:
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name) and node.id in live


def _own_args(node: ast.FunctionDef) -> list[ast.arg]:
    a = node.args
    own = [*a.posonlyargs, *a.args, *a.kwonlyargs]
    if a.vararg:
        own.append(a.vararg)
    if a.kwarg:
        own.append(a.kwarg)
    return own


def _params(node: ast.FunctionDef, collector: _Collector) -> list[Param]:
    a = node.args
    params: list[Param] = []
    positional = [*a.posonlyargs, *a.args]
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    for arg, default in zip(positional, defaults):
        params.append(_param(arg, "positional", default, collector))
    if a.vararg:
        params.append(Param(a.vararg.arg, "varargs"))
    for arg, default in zip(a.kwonlyargs, a.kw_defaults):
        params.append(_param(arg, "kwonly", default, collector))
    if a.kwarg:
        params.append(Param(a.kwarg.arg, "varkw"))
    return params


def _param(arg: ast.arg, kind: str, default: ast.AST | None, collector: _Collector) -> Param:
    annotation = ast.unparse(arg.annotation) if arg.annotation is not None else ""
    if default is None:
        return Param(arg.arg, kind, None, False, annotation)
    value = collector.value(default)
    if value is UNKNOWN:
        qual = collector.qualname(default)
        value = qual if qual else UNKNOWN
    return Param(arg.arg, kind, value, True, annotation)


def _arguments(call: ast.Call, names: tuple[str, ...]) -> dict[str, ast.AST]:
    """Bind positional and keyword arguments of a call to parameter names."""
    bound = {name: arg for name, arg in zip(names, call.args) if not isinstance(arg, ast.Starred)}
    for keyword in call.keywords:
        if keyword.arg in names:
            bound[keyword.arg] = keyword.value
    return bound


def _keyword(call: ast.Call, name: str) -> ast.AST | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _has_kw(call: ast.Call, name: str) -> bool:
    return any(k.arg == name or k.arg is None for k in call.keywords)


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def _device_keys(types) -> tuple[str, ...]:
    """Dispatch keys for `types`/`device_types` ("cpu" -> CPU, "default" -> CompositeExplicitAutograd, a
    renamed PrivateUse1 backend's "npu" or "tpu" -> PrivateUse1)."""
    if types is None:
        return ("CompositeExplicitAutograd",)
    if isinstance(types, str):
        types = (types,)
    if not isinstance(types, tuple):
        return (UNKNOWN,)
    return tuple(key_of_device_type(typ) if isinstance(typ, str) else UNKNOWN for typ in types)
