"""Names a spec gives that become Python names and file names in the generated project: the ones that would
break it are refused where the spec wrote them, with a rename.

Only what breaks the project is refused. An op may be named `sum`, `max` or `abs`, as torch's own are: the
generated code is checked for the builtins it really calls where the op's function would shadow them
(`shadowed_builtins`, run on the rendered files, so the check follows the templates and the spec's own bodies).
"""

from __future__ import annotations

import ast
import builtins
import keyword
import sys

from ..errors import OpgenError
from ..layout import BOUND_NAMES

# The longest op name (with its overload): the files named after it (`<op>_cuda.py`, the writer's temp file
# beside it) stay within the 255 bytes a file name may have.
MAX_OP_NAME = 200
# Python's standard library, as the newest and the oldest Python a generated project runs on know it: a
# package of the same name on the tests' sys.path (pytest's `pythonpath = ["."]`) replaces the real module.
_REMOVED_STDLIB = frozenset({  # gone from newer Pythons, still importable on 3.10-3.12
    "asynchat", "asyncore", "distutils", "imp", "smtpd", "aifc", "audioop", "cgi", "cgitb", "chunk", "crypt",
    "imghdr", "lib2to3", "mailcap", "msilib", "nis", "nntplib", "ossaudiodev", "pipes", "sndhdr", "spwd", "sunau",
    "telnetlib", "uu", "xdrlib",
})
# Top-level modules the generated tests import, directly or through torch, pytest and numpy (opgen: the checks,
# opgen.testing), and names a test folder may take.
_TEST_IMPORTS = frozenset({
    "torch", "torchgen", "functorch", "torch_npu", "npugraph_ex", "triton", "sympy", "mpmath", "networkx", "jinja2",
    "markupsafe", "filelock", "fsspec", "typing_extensions", "setuptools", "pkg_resources", "_distutils_hack",
    "optree", "opt_einsum", "numpy", "yaml", "pytest", "_pytest", "pluggy", "iniconfig", "packaging", "pygments",
    "exceptiongroup", "tomli", "colorama", "hypothesis",
    "tests", "test", "conftest", "opgen",
})
TAKEN_PACKAGES = frozenset(sys.stdlib_module_names) | _REMOVED_STDLIB | _TEST_IMPORTS


def package_problem(package: str) -> tuple[str, str] | None:
    """(why, hint) when `package` cannot name the generated Python package."""
    hint = f"set `package:` to another name, e.g. {package.strip('_') + '_ops'!r}"
    if keyword.iskeyword(package):
        return f"{package!r} is a Python keyword and cannot name the generated package", hint
    if package in TAKEN_PACKAGES:
        what = "Python's standard library" if package in sys.stdlib_module_names or package in _REMOVED_STDLIB \
            else "a module the generated tests import (directly or through torch and pytest)"
        return (f"{package!r} cannot name the generated package: it is {what}, which the package would replace "
                "on the tests' import path"), hint
    if len(package) > MAX_OP_NAME:
        return f"the package name has {len(package)} characters; opgen allows {MAX_OP_NAME} (a directory name)", \
            "choose a shorter name"
    return None


def op_name_problem(name: str, stem: str) -> tuple[str, str] | None:
    """(why, hint) when an op name (`stem`: with its overload) cannot name the op's Python functions and files."""
    if keyword.iskeyword(name):
        return (f"op name {name!r} is a Python keyword: the generated package cannot define or call a function of "
                "that name (torch accepts it, Python does not)"), f"rename the op, e.g. {name + '_'!r}"
    if len(stem) > MAX_OP_NAME:
        return (f"the op's name has {len(stem)} characters; opgen allows {MAX_OP_NAME} (its files are named after "
                "it, and a file name has at most 255 bytes)"), "choose a shorter name"
    return None


def argument_problem(name: str) -> tuple[str, str] | None:
    """(why, hint) when an argument name cannot be a parameter of the generated functions."""
    if keyword.iskeyword(name) or name in BOUND_NAMES or name.startswith("_"):
        return (f"argument name {name!r} cannot be used in generated Python code",
                (f"rename it (Python keywords, {', '.join(map(repr, sorted(BOUND_NAMES)))} and names starting "
                "with '_' are taken)"))
    return None


# --- after rendering ----------------------------------------------------------------------------------------

_BUILTINS = frozenset(name for name in dir(builtins) if not name.startswith("_"))


def shadowed_builtins(files) -> list[tuple[str, str, int, str]]:
    """(name, path, line, how) for each builtin a generated Python module uses where a name opgen gave it (an
    op's function at module level, an argument inside a function) replaces the builtin: the module would
    call the op, or an argument, instead. `files`: the rendered PlannedFiles."""
    found = []
    for planned in files:
        if not planned.path.endswith(".py"):
            continue
        try:
            tree = ast.parse(planned.content)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue  # not for this check to say
        found += [(name, planned.path, line, how) for name, line, how in _module_shadows(tree)]
    return found


def _module_shadows(tree: ast.Module) -> list[tuple[str, int, str]]:
    """Loads of a builtin's name that get a module-level binding of that name instead, in Python's order:
    module code (decorators and defaults included) after the binding's statement, and function bodies wherever
    they are (they run once the module is imported), unless the name is local there."""
    first: dict[str, int] = {}  # builtin name -> the top-level statement that binds it first
    for index, statement in enumerate(tree.body):
        for name in _bound_by(statement) & _BUILTINS:
            first.setdefault(name, index)
    found = []
    for index, statement in enumerate(tree.body):
        if first:  # else no load can meet a module-level binding of a builtin's name (most modules: skipped)
            now = frozenset(name for name, at in first.items() if at < index)
            found += _shadowed_loads(statement, now, frozenset(first))
        for node in ast.walk(statement):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found += _parameter_shadows(node)
    return found


def _bound_by(statement: ast.stmt) -> set[str]:
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {statement.name}
    if isinstance(statement, (ast.Import, ast.ImportFrom)):
        return {alias.asname or alias.name.split(".")[0] for alias in statement.names}
    if isinstance(statement, (ast.Assign, ast.AnnAssign)):
        targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
        return {target.id for target in targets if isinstance(target, ast.Name)}
    return set()


def _shadowed_loads(statement: ast.stmt, now: frozenset, later: frozenset) -> list:
    """(name, line, "function") for each load in `statement` of a name in `now` (module code run at once) or,
    inside a function, in `later` less the function's own names."""
    found = []
    pending: list[tuple[ast.AST, frozenset, bool]] = [(statement, now, False)]
    while pending:
        node, active, deferred = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            arguments = node.args
            every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs,
                     *[a for a in (arguments.vararg, arguments.kwarg) if a]]
            # annotations are left out: nothing the generated code runs reads them (schemas are explicit)
            at_once = [*getattr(node, "decorator_list", []), *arguments.defaults,
                       *[d for d in arguments.kw_defaults if d]]
            body = node.body if isinstance(node.body, list) else [node.body]
            local = {a.arg for a in every} | {n.id for b in body for n in ast.walk(b)
                                              if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
            pending += [(child, active, deferred) for child in at_once]
            pending += [(child, (active if deferred else later) - local, True) for child in body]
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in active:
            found.append((node.id, node.lineno, "function"))
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            continue  # `op.register_fake`: the op's function used as itself (a builtin has no such attributes)
        pending += [(child, active, deferred) for child in ast.iter_child_nodes(node)]
    return found


def _parameter_shadows(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[tuple[str, int, str]]:
    """A parameter named like a builtin that the body calls, or uses as a type in isinstance(): a spec's
    arguments are tensors, numbers, lists or dtypes, never callables or classes."""
    arguments = function.args
    params = {a.arg for a in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]} & _BUILTINS
    if not params:
        return []
    found = []
    for statement in function.body:
        for node in ast.walk(statement):
            if not isinstance(node, ast.Call):
                continue
            if isinstance(node.func, ast.Name) and node.func.id in params:
                found.append((node.func.id, node.lineno, "argument"))
            if isinstance(node.func, ast.Name) and node.func.id in ("isinstance", "issubclass") and \
                    len(node.args) == 2:
                found += [(n.id, n.lineno, "argument") for n in ast.walk(node.args[1])
                          if isinstance(n, ast.Name) and n.id in params]
    return found


def shadow_error(text: str, path: str, spec, shadows: list[tuple[str, str, int, str]]):
    """The first shadowed builtin as a SpecError at the op name or argument of the spec (`text`, as the user
    wrote it) that gave the name; None when no op of `spec` gave it (then it is no spec's doing)."""
    from ..layout import op_stem
    from ..schema.parser import span_column
    from .nodes import _Source, compose

    source = _Source(text, path)
    root = compose(source)
    ops_node = next(value for key, value in root.value if key.value == "ops")
    for name, generated, line, how in shadows:
        for op in spec.ops:
            if how == "function" and name in (op.schema.name, op_stem(op.schema)):
                part, what = "name", f"op name {name!r}"
                hint = f"rename the op, e.g. {name + '_'!r} (an op named like a builtin is fine where the code does " \
                       "not call that builtin)"
            elif how == "argument" and op.schema.argument(name) is not None:
                part, what = ("arg", name), f"argument name {name!r}"
                hint = f"rename the argument, e.g. {name + '_'!r}"
            else:
                continue
            schema_node = next(value for key, value in ops_node.value[op.index].value if key.value == "schema")
            instead = "the op's function" if how == "function" else "the argument"
            error = OpgenError(f"{what} replaces Python's builtin {name}, which the generated {generated} uses "
                               f"(line {line}): it would get {instead} instead", hint=hint)
            return source.inner(schema_node, span_column(op.schema, part) or 1, error, f"ops[{op.index}].schema")
    return None

