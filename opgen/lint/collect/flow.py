"""Where the values a function body names come from, as far as simple code shows. A name every binding of
which is computed from a parameter (`y = x.view(-1)`, `q, k = [contiguous(t) for t in (q, k)]`, a
parameter re-bound that way) holds that parameter's data: reading it is reading the input. A name every
binding of which is made on the host (`device="cpu"`, `.cpu()`, `torch.tensor(...)` or an allocator without
a device, or a call to a local helper returning such a tensor) is no device tensor: reading it is no sync.
Anything else (a loop variable, `with ... as`, a value we cannot follow) is neither."""

from __future__ import annotations

import ast

from .context import FileContext
from .names import Names
from .syntax import walk

SHAPE_ATTRS = frozenset({"shape", "size", "dim", "ndim", "numel", "stride", "dtype", "device", "is_contiguous",
                         "storage_offset", "layout", "element_size", "nelement", "get_device"})
ALLOCATORS = frozenset({"empty", "zeros", "ones", "full", "empty_strided", "rand", "randn", "randint", "arange",
                        "eye", "linspace", "logspace", "randperm"})
HOST_FACTORIES = ALLOCATORS | {"tensor", "from_numpy", "as_strided"}  # torch.<f>(...) without device=: CPU
TO_HOST = frozenset({"cpu", "numpy"})
TO_DEVICE = frozenset({"cuda", "npu", "xpu", "to", "pin_memory"})  # a method that may leave the host
COMPREHENSIONS = (ast.ListComp, ast.GeneratorExp, ast.SetComp)


class Flow:
    """The derived and host names of one function (`helpers`: whether calls to local functions are followed,
    one level)."""

    def __init__(self, ctx: FileContext, nodes: list[ast.AST], params: set[str], *, helpers: bool = True) -> None:
        self.ctx = ctx
        self.names: Names = ctx.names
        self.helpers = helpers
        self.bindings = _bindings(nodes)
        # a parameter re-bound to something not computed from the inputs no longer holds its input
        self.derived: set[str] = set(params)
        self.derived = {name for name in params if self._all(name, self.derives)}
        self._grow(self.derived, self.derives)
        self.host: set[str] = set()
        self._grow(self.host, self.is_host)

    def _all(self, name: str, test) -> bool:
        return all(value is not None and test(value) for value in self.bindings.get(name, ()))

    def _grow(self, found: set[str], test) -> None:
        """Add the names all of whose bindings pass `test` (which reads `found`) until nothing changes."""
        changed = True
        while changed:
            changed = False
            for name, values in self.bindings.items():
                if name not in found and values and self._all(name, test):
                    found.add(name)
                    changed = True

    def derives(self, node: ast.AST) -> bool:
        """Whether an expression is computed from a derived name (shape metadata is not its data)."""
        root = self.root(node)
        return root is not None and root in self.derived

    def root(self, node: ast.AST) -> str | None:
        """The name a value is computed from: through subscripts, attributes, method calls, `torch.<fn>(x, ...)`,
        a plain function's first argument that has one, and a comprehension over names."""
        while True:
            if isinstance(node, ast.Name):
                return node.id
            if isinstance(node, _Element):
                return node.root(self)
            if isinstance(node, ast.Subscript):
                node = node.value
            elif isinstance(node, ast.BinOp):  # `x * 2`: computed from x
                return self.root(node.left) or self.root(node.right)
            elif isinstance(node, ast.Attribute):
                if node.attr in SHAPE_ATTRS:
                    return None
                node = node.value
            elif isinstance(node, ast.Call):
                func = node.func
                if isinstance(func, ast.Attribute) and not self._is_torch(func):
                    if func.attr in SHAPE_ATTRS:
                        return None
                    node = func.value
                    continue
                if isinstance(func, ast.Attribute) and func.attr in ALLOCATORS:
                    return None  # torch.empty(x.shape[0]): a new tensor, its first argument a size
                return next((r for r in map(self.root, node.args) if r is not None), None)
            else:
                return None

    def _is_torch(self, func: ast.Attribute) -> bool:
        qual = self.names.qualname(func)
        return qual is not None and qual.startswith("torch.")

    def is_host(self, node: ast.AST) -> bool:
        """Whether an expression is a tensor made on the host (or computed from one there)."""
        while True:
            if isinstance(node, ast.Name):
                return node.id in self.host
            if isinstance(node, _Element):
                return node.host(self)
            if isinstance(node, (ast.Subscript, ast.Attribute)):
                node = node.value
            elif isinstance(node, ast.BinOp):  # `lens + 1` stays where lens is
                return self.is_host(node.left) or self.is_host(node.right)
            elif isinstance(node, ast.Call):
                verdict = self._host_call(node)
                if verdict is not None:
                    return verdict
                # a method's result lives where its receiver does, torch.<fn>(x, ...)'s where x does
                node = node.args[0] if self._is_torch_call(node) else node.func.value
            else:
                return False

    def _host_call(self, call: ast.Call) -> bool | None:
        """True / False when a call itself says where its result lives, None when that is its receiver's (or
        first argument's) place."""
        device = next((k.value for k in call.keywords if k.arg == "device"), None)
        if device is not None:
            return self._fixed_device(device) == "cpu"
        func = call.func
        if isinstance(func, ast.Attribute) and not self._is_torch(func):
            if func.attr in TO_HOST or func.attr == "to" and call.args and self._fixed_device(call.args[0]) == "cpu":
                return True
            return False if func.attr in TO_DEVICE else None
        qual = self.names.qualname(func) or ""
        if qual.startswith("torch.") and qual.rsplit(".", 1)[1] in HOST_FACTORIES:
            return True
        if isinstance(func, ast.Name) and self.helpers:
            return self._helper_returns_host(func.id)
        return None if call.args and qual.startswith("torch.") else False

    def _is_torch_call(self, call: ast.Call) -> bool:
        qual = self.names.qualname(call.func)
        return qual is not None and qual.startswith("torch.") and bool(call.args)

    def _fixed_device(self, node: ast.AST) -> str | None:
        if isinstance(node, ast.Call) and self.names.qualname(node.func) == "torch.device" and node.args:
            node = node.args[0]
        value = self.names.value(node)
        return value.split(":")[0] if isinstance(value, str) else None

    def _helper_returns_host(self, name: str) -> bool:
        """A local helper every `return` of which is a host tensor (read one level: its own calls are not
        followed)."""
        known = self.ctx.host_helpers.get(name)
        if known is None:
            known = self.ctx.host_helpers[name] = self._reads_as_host_helper(name)
        return known

    def _reads_as_host_helper(self, name: str) -> bool:
        functions = self.ctx.functions.get(name)
        if not functions:
            return False
        helper = functions[-1]
        nodes = walk(helper)
        returns = [n.value for n in nodes if isinstance(n, ast.Return) and n.value is not None]
        if not returns:
            return False
        flow = Flow(self.ctx, nodes, set(), helpers=False)
        return all(flow.is_host(value) for value in returns)


class _Element:
    """The i-th value a comprehension over a tuple of expressions makes: `[f(t) for t in (q, k)]`'s second
    element is `f(k)`, read as the comprehension's element with its variable bound to `k`."""

    __slots__ = ("element", "item", "variable")

    def __init__(self, element: ast.AST, variable: str, item: ast.AST) -> None:
        self.element, self.variable, self.item = element, variable, item

    def root(self, flow: Flow) -> str | None:
        root = flow.root(self.element)
        return flow.root(self.item) if root == self.variable else root

    def host(self, flow: Flow) -> bool:
        return flow.is_host(self.element) or flow.root(self.element) == self.variable and flow.is_host(self.item)


_UNFOLLOWED = (ast.For, ast.AsyncFor, ast.comprehension)


def _bindings(nodes: list[ast.AST]) -> dict[str, list]:
    """Every name bound among a function's nodes, each with the values bound to it (None: bound some way we do
    not follow: a loop, `with`, `except`, an import, `global`)."""
    found: dict[str, list] = {}
    for sub in nodes:
        kind = type(sub)
        if kind is ast.Assign:
            for target in sub.targets:
                _bind(found, target, sub.value)
        elif kind is ast.AnnAssign or kind is ast.NamedExpr:
            if sub.value is not None:
                _bind(found, sub.target, sub.value)
        elif kind in _UNFOLLOWED:
            _bind(found, sub.target, None)
        elif kind is ast.withitem:
            if sub.optional_vars is not None:
                _bind(found, sub.optional_vars, None)
        elif kind is ast.ExceptHandler:
            if sub.name:
                found.setdefault(sub.name, []).append(None)
        elif kind is ast.Global or kind is ast.Nonlocal:
            for name in sub.names:
                found.setdefault(name, []).append(None)
    return found


def _bind(found: dict[str, list], target: ast.AST, value: ast.AST | None) -> None:
    if isinstance(target, ast.Name):
        found.setdefault(target.id, []).append(value)
    elif isinstance(target, (ast.Tuple, ast.List)):
        for index, element in enumerate(target.elts):
            _bind(found, element, _unpacked(value, index, len(target.elts)))
    elif isinstance(target, ast.Starred):
        _bind(found, target.value, None)


def _unpacked(value: ast.AST | None, index: int, count: int):
    """The value the index-th of `count` unpacked targets gets: an element of a tuple, of a comprehension over
    a tuple, or (unknown which part) the whole value."""
    if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == count:
        return value.elts[index]
    if isinstance(value, COMPREHENSIONS) and len(value.generators) == 1:
        generator = value.generators[0]
        items = generator.iter
        if isinstance(generator.target, ast.Name) and not generator.ifs and isinstance(items, (ast.Tuple, ast.List)) \
                and len(items.elts) == count:
            return _Element(value.elt, generator.target.id, items.elts[index])
        return None
    return value
