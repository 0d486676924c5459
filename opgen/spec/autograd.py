"""The Python functions opgen writes for an op's `autograd:` bodies, built in ONE place.

`opgen.spec.load` parses exactly the text that `opgen.render.context` pastes into the generated
module, so a body that passed validation cannot end up anywhere but inside its own function: the
check and the output are the same string. Only the `def` line and the unpacking of `inputs` /
`output` are opgen's; the rest is the user's code, indented.
"""

from __future__ import annotations

import ast
import textwrap

from ..schema.model import Schema, is_tensor_like

# The names torch passes setup_context by keyword (`_library/autograd.py`), and the gradients' prefix.
CONTEXT_PARAMETERS = ("ctx", "inputs", "keyword_only_inputs", "output")
# Line breaks that Python (and str.splitlines) honour but "\n"-based indentation would not.
FOREIGN_LINE_BREAKS = "\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"


def output_names(schema: Schema) -> list[str]:
    """Names of the returns as the spec calls them: the return name, or out0, out1, ..."""
    return list(schema.return_names)


def grad_names(schema: Schema) -> list[str]:
    """backward's parameters after `ctx`: `grad_<output>`, or `grad_output` for one unnamed return."""
    if len(schema.returns) == 1 and not schema.returns[0].name:
        return ["grad_output"]
    return [f"grad_{name}" for name in output_names(schema)]


def setup_context_header(schema: Schema, function: str, body: str) -> list[str]:
    """The `def` line and the lines binding the inputs and outputs the body reads by name (opgen's part;
    the others are bound to `_`, so that the generated code has no unused names)."""
    read = names_read(body)
    kwarg_only = schema.kwarg_only
    params = "ctx, inputs, keyword_only_inputs, output" if kwarg_only else "ctx, inputs, output"
    lines = [f"def {function}({params}):"]
    lines += _unpack([a.name for a in schema.positional], "inputs", read)
    lines += [f'    {a.name} = keyword_only_inputs["{a.name}"]' for a in kwarg_only if read is None or a.name in read]
    names = output_names(schema)
    if len(names) == 1:  # an op with one return gives the tensor itself
        lines += [f"    {names[0]} = output"] if schema.returns[0].name and (read is None or names[0] in read) else []
    else:
        lines += _unpack(names, "output", read)
    return lines


def _unpack(names: list[str], source: str, read: set[str] | None) -> list[str]:
    targets = [name if read is None or name in read else "_" for name in names]
    if not names or all(target == "_" for target in targets):
        return []
    if len(targets) == 1:
        return [f"    ({targets[0]},) = {source}"]
    return [f"    {', '.join(targets)} = {source}"]


def names_read(body: str) -> set[str] | None:
    """Every name the body mentions; None (bind them all) when it does not parse: that error is reported
    when the whole function is parsed."""
    try:
        tree = ast.parse("def _body():\n" + "\n".join(body_lines(body)))
    except (SyntaxError, ValueError):
        return None
    return {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}


def backward_header(schema: Schema, function: str) -> list[str]:
    return [f"def {function}(ctx, {', '.join(grad_names(schema))}):"]


def body_lines(body: str) -> list[str]:
    """The user's body, dedented and indented one level (blank lines left empty)."""
    lines = textwrap.dedent(body).strip("\n").split("\n")
    return [("    " + line) if line.strip() else "" for line in lines]


def function_source(header: list[str], body: str) -> str:
    """The complete generated function: opgen's header lines, then the user's body."""
    return "\n".join(header + body_lines(body))


def _bound_names(function: ast.AST) -> set[str]:
    """Every name the function (or anything nested in it) binds: parameters, assignments, imports, defs."""
    bound: set[str] = set()
    for node in ast.walk(function):
        if isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            bound.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) or (
                isinstance(node, ast.ExceptHandler) and node.name):
            bound.add(node.name)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            bound |= set(node.names)
    return bound


def backward_name_problems(function: ast.AST, schema: Schema) -> list[tuple[ast.Name, str, str]]:
    """Names the backward body reads that backward cannot have: a gradient under another name
    (`grad_out0` where torch passes `grad_output`), or an input/output of the op that only setup_context
    sees. Each as (the name's node, message, hint); torch would raise NameError at the first backward."""
    grads = grad_names(schema)
    bound = _bound_names(function)
    op_names = {a.name for a in schema.arguments} | set(output_names(schema))
    problems = []
    for node in ast.walk(function):
        if not isinstance(node, ast.Name) or not isinstance(node.ctx, ast.Load) or node.id in bound:
            continue
        if node.id.startswith("grad_"):
            hint = f"use {' / '.join(grads)}: one gradient per return, `grad_output` for one unnamed return"
            problems.append((node, f"backward reads {node.id!r}, but its gradients are {', '.join(grads)}", hint))
        elif node.id in op_names:
            argument = schema.argument(node.id)
            tensor = argument is None or is_tensor_like(argument.type)  # an output, or a tensor input
            save = f"ctx.save_for_backward({node.id})" if tensor else f"ctx.{node.id} = {node.id}"
            problems.append((node, f"backward reads {node.id!r}, which only setup_context sees",
                             f"save it in setup_context (`{save}`) and read it from ctx in backward"))
    return problems
