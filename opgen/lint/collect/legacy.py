"""The older registration APIs torch 2.13 still runs: `torch._custom_ops.custom_op(qualname)` (a prototype
function whose type hints give the schema, or a schema string) with `torch._custom_ops.impl` (kernels, at
"cpu" and "cuda" unless `device_types=` says otherwise) and `torch._custom_ops.impl_abstract` (the fake);
and `torch._custom_op.impl.custom_op(qualname, manual_schema=None)`, whose CustomOp object takes
`@op.impl(device_types)` and `@op.impl_abstract()`.

Both define the op through a Library with the schema `infer_schema(prototype, mutates_args=())` (the
prototype is no kernel: it raises NotImplementedError), so the op is judged as a Library define: a kernel
writing an input is an undeclared write (these APIs cannot declare one)."""

from __future__ import annotations

import ast

from ...schema.infer import infer_schema
from ..records import Definition, Function, Registration
from .context import FileContext
from .definitions import device_keys
from .functions import decorated_or, function_node
from .syntax import arguments, keyword

API = "torch._custom_ops"
_OLD_OBJECT = "torch._custom_op.impl.custom_op"  # returns a CustomOp with .impl() / .impl_abstract()


def legacy_api(ctx: FileContext, func: ast.AST) -> str | None:
    """"custom_op", "impl", "impl_abstract" (torch._custom_ops) or "custom_op_object" (torch._custom_op)."""
    qual = ctx.qualname(func)
    if qual == _OLD_OBJECT:
        return "custom_op_object"
    if qual is not None and qual.startswith(API + ".") and qual[len(API) + 1:] in ("custom_op", "impl",
                                                                                   "impl_abstract"):
        return qual[len(API) + 1:]
    return None


def read_legacy(ctx: FileContext, call: ast.Call, api: str, decorated: ast.AST | None) -> None:
    """One use of an older API, as a call or as the decorator of `decorated`."""
    if api in ("custom_op", "custom_op_object"):
        definition = _define(ctx, call, api, decorated)
        if definition is not None and decorated is not None and api == "custom_op_object":
            ctx.custom_ops[decorated.name] = definition
        return
    args = arguments(call, ("qualname",))
    qual = ctx.value(args.get("qualname"))
    if not isinstance(qual, str) or "::" not in qual:
        return
    namespace, rest = qual.split("::", 1)
    name, _, overload = rest.partition(".")
    function = decorated_or(ctx, decorated, call, keyword(call, "func"))
    if api == "impl_abstract":
        keys: tuple = ("fake",)
    else:
        types_node = keyword(call, "device_types")
        keys = device_keys(ctx.value(types_node) if types_node is not None else ("cpu", "cuda"))
    for key in keys:
        ctx.record.registrations.append(Registration("fake" if key == "fake" else "kernel", namespace, name,
                                                     overload, key, ctx.where(call), f"{API}.{api}", function))


def legacy_method(ctx: FileContext, call: ast.Call, definition: Definition, method: str, decorated) -> bool:
    """`@op.impl("cpu")` / `@op.impl_abstract()` on a torch._custom_op CustomOp; False for another method."""
    if method not in ("impl", "impl_abstract") or definition.api != _OLD_OBJECT:
        return False
    function = function_node(ctx, decorated) if decorated is not None else None
    if method == "impl_abstract":
        keys: tuple = ("fake",)
    else:
        types = call.args[0] if call.args else keyword(call, "device_types")
        keys = device_keys(ctx.value(types))
    for key in keys:
        ctx.record.registrations.append(Registration("fake" if key == "fake" else "kernel", definition.namespace,
                                                     definition.name, definition.overload, key, ctx.where(call),
                                                     f"CustomOp.{method}", function, True, origin=definition))
    return True


def _define(ctx: FileContext, call: ast.Call, api: str, decorated: ast.AST | None) -> Definition | None:
    qual = ctx.value(call.args[0]) if call.args else ctx.value(keyword(call, "qualname"))
    if not isinstance(qual, str) or "::" not in qual:
        return None
    namespace, name = qual.split("::", 1)
    given = call.args[1] if len(call.args) > 1 else keyword(call, "manual_schema" if api == "custom_op_object"
                                                              else "func_or_schema")
    if decorated is None and given is None and id(call) not in ctx.applied:
        return None  # the decorator factory alone defines nothing
    schema = ctx.value(given) if given is not None else None
    prototype: Function | None = None
    if isinstance(schema, str):
        text = name + schema
    else:
        prototype = decorated_or(ctx, decorated, call, given)
        inferred = None
        if prototype is not None and prototype.imported_from is None:
            inferred = infer_schema(name, prototype.params, prototype.returns_annotation, ())
        text = str(inferred) if inferred is not None else None
    definition = Definition(namespace, name, "", ctx.where(call), "library", text,
                            api=_OLD_OBJECT if api == "custom_op_object" else API + ".custom_op",
                            unconditional=id(call) in ctx.unconditional)
    ctx.record.definitions.append(definition)
    return definition
