"""What one function body does, read from its code, for the rules that judge kernels and fakes (OPG3xx):
the parameters it writes (`x.add_()`, `x[...] = v`, `out=x`), returns, reads the data of (`.item()`),
allocates without a device, syncs the host or draws random numbers with, raises a TODO for, or re-binds
before use."""

from __future__ import annotations

import ast
import re

from ..records import UNKNOWN, Finding, Function, Param
from .context import FileContext
from .flow import Flow
from .syntax import FIELDLESS, body_nodes, children, has_keyword, keyword, mentions, own_args, walk

TODO_MARKER = "# opgen: TODO-fake"
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
# Tensors made from data, on the default device unless device= says otherwise: a kernel making its output so
# has outputs there (OPG304 stays quiet on its fake)
FROM_DATA = frozenset({"torch.tensor", "torch.as_tensor", "torch.from_numpy"})
RANDOM_FUNCS = frozenset({"rand", "randn", "randint", "randperm", "bernoulli", "multinomial", "normal", "poisson",
                          "rand_like", "randn_like", "randint_like", "dropout"})
RANDOM_METHODS = frozenset({"uniform_", "normal_", "bernoulli_", "random_", "exponential_", "geometric_", "cauchy_",
                            "log_normal_", "bernoulli", "multinomial"})
# A parameter named like this is on the host by construction (`cpu_index`, `seq_lens_host`): reading it
# is no device sync.
HOST_NAME = re.compile(r"cpu|host|(?:^|_)np(?:_|$)|numpy", re.IGNORECASE)
HOST_WORD = re.compile(r"\b(?:cpu|host)\b", re.IGNORECASE)
SYNC_METHODS = frozenset({"item", "tolist", "cpu", "numpy", "synchronize", "nonzero"})
# Calls that write their tensor arguments in place when their result is dropped: torch.distributed's
# collectives (and their look-alikes in communicator objects: `comm.all_reduce(x)`); an op (`torch.ops.*`)
# called for its effect alone writes an argument too.
IN_PLACE_COLLECTIVE = re.compile(r"(?:all_reduce|all_gather\w*|reduce_scatter\w*|broadcast|all_to_all\w*|reduce"
                                 r"|recv|irecv)$")


class FunctionReader:
    """The facts the checks need about one function body."""

    def __init__(self, ctx: FileContext, node: ast.FunctionDef, *, compiling: bool = False) -> None:
        self.c = ctx
        self.node = node
        self.asks_compiling = False  # the body branches on torch.compiler.is_compiling() (or its old spellings)
        self.host: set[str] = set()  # parameters on the host by construction (name or docstring says so)
        self.rebound: dict[str, int] = {}  # re-bound parameters -> the first line that re-binds each
        self.looped: set[int] | None = None  # ids of the names inside loops (computed when needed)
        self.flow: Flow | None = None  # where the body's local values come from
        self.reads: set[str] = set()  # names holding an input's data: live parameters and values derived from one
        self.subs = live_nodes(ctx, node, compiling, self)  # every node of the body torch runs, walked once
        self.in_place: dict[str, str] | None = None  # names holding an in-place aten op's result (computed once)

    def read(self) -> Function:
        node = self.node
        own = params(node, self.c)
        lambda_ = isinstance(node, ast.Lambda)
        returns = getattr(node, "returns", None)
        function = Function("<lambda>" if lambda_ else node.name, self.c.where(node), own,
                            ast.unparse(returns) if returns is not None else None)
        names = {p.name for p in own if p.kind in ("positional", "kwonly")}
        self.host = self._host_params(names)
        self.rebound = self._rebound(names)
        live = names - self.rebound.keys()
        self.flow = Flow(self.c, self.subs, names)
        self.reads = live | self.flow.derived
        if lambda_:  # a lambda returns its body
            self._returned(node.body, function, live)
        else:
            function.placeholder = is_placeholder(node.body)
            function.refuses = tuple(_refused(node.body, names))
            function.discarded = tuple(_discarded(node.body, [n for n in self.rebound if self.rebound[n] > 0]))
        for sub in self.subs:
            self._node(sub, function, live)
        if function.todo is None:
            function.todo = self._todo_marker()
        function.mutations.extend(self._written_through_calls(function, live))
        function.truth_tests = self._truth_tests(live)
        function.host_returns = tuple(sorted(self._host_returns()))
        return function

    def _truth_tests(self, live: set[str]) -> list[Finding]:
        """Parameters whose truth value the body tests: the condition of an `if`, `while`, `assert` or
        conditional expression (`if bias:`, `if not scale:`, `if x and y:`), and an operand `and`/`or`
        decides on (`bias or default`). For a tensor that is `bool(tensor)`: its value, not whether it was
        given. (Which parameters are tensors is the schema's to say: the rule asks it.)"""
        tested: dict[int, ast.Name] = {}
        for sub in self.subs:
            kind = type(sub)
            if kind in (ast.If, ast.While, ast.IfExp, ast.Assert):
                _tested_names(sub.test, tested)
            elif kind is ast.BoolOp:
                for value in sub.values[:-1]:  # the last operand is the result, not tested (unless a condition)
                    _tested_names(value, tested)
            elif kind is ast.comprehension:
                for condition in sub.ifs:
                    _tested_names(condition, tested)
        return [self._finding("tests the truth of", name, name.id) for name in tested.values()
                if name.id in live or self._not_yet_rebound(name)]

    def _host_returns(self) -> set[str]:
        """The names this function returns (alone or in a tuple) that hold a host tensor it made: an op whose
        kernel returns one hands it to the next op by that name (a CPU handle, a CPU lengths tensor)."""
        found = set()
        for sub in self.subs:
            if type(sub) is not ast.Return:
                continue
            value = sub.value
            for element in value.elts if isinstance(value, ast.Tuple) else [value]:
                if isinstance(element, ast.Name) and element.id in self.flow.host:
                    found.add(element.id)
        return found

    def _written_through_calls(self, function: Function, live: set[str]) -> list[Finding]:
        """A parameter handed to a call whose result is dropped (`comm.all_reduce(x)`), then returned: the
        call can only have acted on it in place. (Lint cannot see which arguments an opaque call writes; the
        return of the argument is what it can see.)"""
        returned = {finding.param for finding in function.returned_params}
        found = []
        for sub in self.subs:
            if type(sub) is not ast.Expr or type(sub.value) is not ast.Call:
                continue
            call = sub.value
            callee = ast.unparse(call.func)
            qual = self.c.qualname(call.func) or ""
            if not (qual.startswith("torch.ops.") or IN_PLACE_COLLECTIVE.match(callee.rsplit(".", 1)[-1])):
                continue  # another call may only set metadata (`_set_buffer_donation(x)`), log or check it
            for arg in call.args:
                if isinstance(arg, ast.Name) and arg.id in live and arg.id in returned:
                    found.append(self._finding(f"hands to {callee}() (dropping its result) and returns", arg, arg.id))
        return found

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
        args = own_args(node)
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
            elif isinstance(element, ast.Name):
                written = self._in_place_results(live).get(element.id)
                if written is not None:  # `copy = torch.ops.aten.copy_.default(x, y)`, then `return copy`
                    function.returned_params.append(self._finding("returns", element, written))

    def _in_place_results(self, live: set[str]) -> dict[str, str]:
        """Names bound once to the result of an in-place aten op on a parameter (which is that parameter)."""
        if self.in_place is None:
            bound: dict[str, list] = {}
            for sub in self.subs:
                if type(sub) is ast.Assign:
                    for target in sub.targets:
                        if isinstance(target, ast.Name):
                            bound.setdefault(target.id, []).append(sub.value)
            self.in_place = {}
            for name, values in bound.items():
                value = values[0]
                if len(values) == 1 and isinstance(value, ast.Call) and value.args \
                        and _aten_in_place(self.c.qualname(value.func) or "") is not None:
                    root = self._root(value.args[0])
                    if root in live:
                        self.in_place[name] = root
        return self.in_place

    def _finding(self, what: str, node: ast.AST, param: str = "") -> Finding:
        where = self.c.where(node)
        return Finding(what, where.line, where.column, param)

    def _rebound(self, names: set[str]) -> dict[str, int]:
        """The parameters the body re-binds, each with the first line that does (0: from the start)."""
        rebound: dict[str, int] = {}
        # `out += x` writes a tensor in place (Tensor.__iadd__), it does not re-bind the name
        augmented = set()
        own = {id(arg) for arg in own_args(self.node)}
        subs = self.subs
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
            self.looped = {id(sub) for loop in walk(self.node) if isinstance(loop, (ast.For, ast.While))
                           for sub in walk(loop) if isinstance(sub, ast.Name)}
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
        for given in call.keywords:
            if given.arg == "out":
                outs = given.value.elts if isinstance(given.value, (ast.Tuple, ast.List)) else [given.value]
                for out in outs:
                    root = self._root(out)
                    if root in live:
                        function.mutations.append(self._finding("passes out=", out, root))

    def _torch_function(self, call: ast.Call, qual: str, function: Function, live: set[str]) -> None:
        """`torch.add_(x, ...)` (a write), `torch.empty(...)` (an allocation: which device), random ops,
        `torch.cuda.synchronize()`, and data-dependent shapes (`torch.nonzero(x)`)."""
        short = qual.rsplit(".", 1)[1]
        aten = _aten_in_place(qual)
        if aten is not None and call.args and short != aten:  # `torch.ops.aten.copy_.default(x, y)` writes x
            root = self._root(call.args[0])
            if root in live:
                function.mutations.append(self._finding(f"calls torch.ops.aten.{aten}() on", call, root))
        if short.endswith("_") and not short.startswith("_") and short not in KERNEL_METHODS_NOT_WRITING \
                and call.args:
            root = self._root(call.args[0])
            if root in live:
                function.mutations.append(self._finding(f"calls {qual}() on", call, root))
        if short in ALLOCATORS and qual == "torch." + short:
            self._allocation(call, qual, function)
        elif qual in FROM_DATA and not has_keyword(call, "device"):
            function.makes_on_default_device = True
        if short in RANDOM_FUNCS and (qual == "torch." + short or qual.startswith("torch.nn.functional.")):
            function.capture_unsafe.append(self._finding(f"random op {qual}()", call))
        if short == "synchronize":
            function.capture_unsafe.append(self._finding(f"host sync {qual}()", call))
        if short in DYNAMIC_SHAPE and qual == "torch." + short and call.args \
                and self._tensor_root(call.args[0]) in self.reads:
            function.data_reads.append(self._finding(f"{qual}()", call))
            if not self._on_host(call.args[0]):
                function.capture_unsafe.append(self._finding(f"host sync {qual}()", call))

    def _allocation(self, call: ast.Call, qual: str, function: Function) -> None:
        if not has_keyword(call, "device"):
            function.device_less_allocs.append(self._finding(qual, call))
            return
        fixed = self._fixed_device(keyword(call, "device"))
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
        if tensor_root not in self.reads:
            return
        if attr in DATA_READS or attr in DYNAMIC_SHAPE:
            function.data_reads.append(self._finding(f".{attr}()", call))
        if attr in SYNC_METHODS and not self._on_host(func.value):
            function.capture_unsafe.append(self._finding(f"host sync .{attr}()", call, tensor_root))
        if attr in RANDOM_METHODS:
            function.capture_unsafe.append(self._finding(f"random op .{attr}()", call))

    def _on_host(self, value: ast.AST) -> bool:
        """Whether a tensor expression is on the host: a parameter named or documented so, or a value the code
        makes there (reading it is no device sync)."""
        return self._tensor_root(value) in self.host or self.flow.is_host(value)

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
                if statement.value is not None and not mentions(statement.value, name):
                    yield name
                break
            if mentions(statement, name):
                break




def _is_param_chain(node: ast.AST, live: set[str]) -> bool:
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name) and node.id in live




# Branches torch never takes when it calls or traces a kernel or fake (eager, torch.compile, export): they run
# only while exporting to ONNX or under TorchScript, so what they do is judged as the compiler sees it: not at all.
NEVER_TAKEN = frozenset({"torch.onnx.is_in_onnx_export", "torch.jit.is_scripting", "torch.jit.is_tracing",
                         "torch._C._get_tracing_state"})


def _tested_names(test: ast.AST, found: dict[int, ast.Name]) -> None:
    """The names a condition takes the truth value of: itself, under `not`, or as an `and`/`or` operand."""
    if isinstance(test, ast.Name):
        found[id(test)] = test
    elif isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        _tested_names(test.operand, found)
    elif isinstance(test, ast.BoolOp):
        for value in test.values:
            _tested_names(value, found)


# True while torch.compile (or torch.export) traces, so in a fake it traces with; false whenever a kernel runs
COMPILING = frozenset({"torch.compiler.is_compiling", "torch._dynamo.is_compiling", "torch._utils.is_compiling",
                       "torch._dynamo.external_utils.is_compiling"})


def _aten_in_place(qual: str) -> str | None:
    """`copy_` for `torch.ops.aten.copy_` / `torch.ops.aten.copy_.default`: an aten op in the in-place
    convention (its name ends in `_`), which writes its first argument and returns it."""
    parts = qual.split(".")
    if len(parts) in (4, 5) and parts[:3] == ["torch", "ops", "aten"] and parts[3].endswith("_") \
            and not parts[3].startswith("_"):
        return parts[3]
    return None


def live_nodes(ctx: FileContext, node: ast.AST, compiling: bool = False, reader=None) -> list[ast.AST]:
    """The nodes of a function, less the branches torch never takes (`if torch.onnx.is_in_onnx_export():`'s
    body, `if not torch.jit.is_scripting(): ... else:`'s else), and the side of an `is_compiling()` test that
    `compiling` rules out (a kernel runs with it false, in eager mode and in a compiled graph alike: torch
    calls kernels after compiling; a fake runs with it true while torch.compile traces). A `reader` is told
    when the function asks `is_compiling()`."""
    text = ctx.source.text
    if "is_in_onnx_export" not in text and "is_scripting" not in text and "is_tracing" not in text \
            and "_get_tracing_state" not in text and "is_compiling" not in text:
        return body_nodes(node)  # the common case: nothing to skip
    found, todo = [], [node]
    while todo:
        current = todo.pop()
        found.append(current)
        if isinstance(current, (ast.If, ast.IfExp)):
            guard = _never_taken(ctx, current.test, compiling, reader)
            if guard is not None:
                found.append(current.test)
                taken = current.orelse if guard else current.body
                taken = taken if isinstance(taken, list) else [taken]
                todo.extend(reversed([child for child in taken if type(child) not in FIELDLESS]))
                continue
        todo.extend(reversed([child for child in children(current) if type(child) not in FIELDLESS]))
    return found


def _never_taken(ctx: FileContext, test: ast.AST, compiling: bool, reader) -> bool | None:
    """True: `test` is never true when torch runs the op (so its body is dead); False: never false (`not ...`,
    so its else is dead); None: it may be either."""
    negated = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
    inner = test.operand if negated else test
    if isinstance(inner, ast.Call) and not inner.args:
        qual = ctx.qualname(inner.func)
        if qual in NEVER_TAKEN:
            return not negated
        if qual in COMPILING:
            if reader is not None:
                reader.asks_compiling = True
            return compiling == negated
    return None


def is_placeholder(body: list[ast.stmt]) -> bool:
    """A body that does nothing: `pass`, `...`, a docstring only, `raise NotImplementedError` (a stand-in defined
    so that code naming the op imports, or a prototype)."""
    for statement in body:
        if isinstance(statement, ast.Pass):
            continue
        if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
            continue  # a docstring, `...`
        if isinstance(statement, ast.Raise) and statement.exc is not None:
            raised = statement.exc.func if isinstance(statement.exc, ast.Call) else statement.exc
            if isinstance(raised, ast.Name) and raised.id == "NotImplementedError":
                continue
        return False
    return True


def params(node: ast.FunctionDef, collector) -> list[Param]:
    """A function's parameters, with the defaults `collector` (anything with `value` and `qualname`) can read."""
    a = node.args
    found: list[Param] = []
    positional = [*a.posonlyargs, *a.args]
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    for arg, default in zip(positional, defaults):
        found.append(_param(arg, "positional", default, collector))
    if a.vararg:
        found.append(Param(a.vararg.arg, "varargs"))
    for arg, default in zip(a.kwonlyargs, a.kw_defaults):
        found.append(_param(arg, "kwonly", default, collector))
    if a.kwarg:
        found.append(Param(a.kwarg.arg, "varkw"))
    return found


def _param(arg: ast.arg, kind: str, default: ast.AST | None, collector) -> Param:
    annotation = ast.unparse(arg.annotation) if arg.annotation is not None else ""
    if default is None:
        return Param(arg.arg, kind, None, False, annotation)
    value = collector.value(default)
    if value is UNKNOWN:
        qual = collector.qualname(default)
        value = qual if qual else UNKNOWN
    return Param(arg.arg, kind, value, True, annotation)
