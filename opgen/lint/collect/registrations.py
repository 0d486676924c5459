"""Registrations and the forms they take: a call (`lib.impl("f", fn, "CPU")`, `torch.library.impl("ns::f",
"cpu", func=fn)`, `register_fake("ns::f", fn)`, `register_kernel`, `register_autograd`), a decorator
(`@torch.library.register_fake("ns::f")`, `@op.register_fake` on a CustomOpDef), a decorator applied by a
call (`register_fake("ns::f")(fn)`), a wrapper's use, and `has_side_effect`. Which op each names (`op_ref`)
is read here too."""

from __future__ import annotations

import ast

from ..records import UNKNOWN, Definition, Registration, UnknownName
from .context import FileContext
from .definitions import (
    custom_op,
    custom_op_function,
    define,
    device_keys,
    direct_register,
    read_assignment,
    tags,
    torch_library_define,
)
from .functions import decorated_or, function_arg, function_node
from .legacy import legacy_api, legacy_method, read_legacy
from .libraries import dispatch_key, library_at
from .names import LIB, pattern_of
from .syntax import arguments, keyword
from .walk import Gathered
from .wrappers import Wrapper, bind, wrapper_at

LIBRARY_METHODS = frozenset({"define", "impl", "_register_fake", "fallback"})


def read(ctx: FileContext, gathered: Gathered) -> None:
    """Libraries, then decorated functions, then calls, in source order."""
    for call in gathered.calls:  # a decorator applied by a call: `torch.library.impl(lib, "f", "CPU")(kernel)`
        if isinstance(call.func, ast.Call) and len(call.args) == 1 and isinstance(call.args[0],
                                                                                 (ast.Name, ast.Lambda)):
            ctx.applied[id(call.func)] = call.args[0]
    for node in sorted(gathered.assigns, key=lambda n: n.lineno):
        read_assignment(ctx, node)
    for node in sorted(gathered.defs, key=lambda n: n.lineno):
        for decorator in node.decorator_list:
            wrapper = wrapper_at(ctx, decorator)
            if wrapper is not None:
                _expand(ctx, wrapper, decorator, node)
            else:
                _decorator(ctx, decorator, node)
    for call in sorted(gathered.calls, key=lambda n: (n.lineno, n.col_offset)):
        if id(call) in ctx.decorator_ids or id(call) in ctx.templates:
            continue
        wrapper = wrapper_at(ctx, call)
        if wrapper is not None and wrapper.kind == "call":
            _expand(ctx, wrapper, call, None)
        else:
            _call(ctx, call)


def _expand(ctx: FileContext, wrapper: Wrapper, site: ast.Call, decorated: ast.AST | None) -> None:
    """Read the wrapper's registration as if written at `site` with its parameters bound."""
    bindings = bind(wrapper, site, decorated)
    if bindings is None:
        return
    ctx.names.bindings, ctx.site = bindings, site
    try:
        if wrapper.kind == "decorator":
            _decorator(ctx, wrapper.call, decorated)
        else:
            _call(ctx, wrapper.call)
    finally:
        ctx.names.bindings, ctx.site = {}, None


def _call(ctx: FileContext, call: ast.Call) -> None:
    func = call.func
    if isinstance(func, ast.Attribute):
        # Only a Library method name makes it worth opening the module an object was imported from.
        library = library_at(ctx, func.value, call.lineno, imported=func.attr in LIBRARY_METHODS)
        if library is not None:
            _library_method(ctx, call, func.attr, library)
            return
        if isinstance(func.value, ast.Name) and func.value.id in ctx.custom_ops:
            _custom_op_method(ctx, call, ctx.custom_ops[func.value.id], func.attr, None)
            return
    qual = ctx.qualname(func)
    if qual is None:
        return
    legacy = legacy_api(ctx, func)
    if legacy is not None:
        read_legacy(ctx, call, legacy, None)
    elif qual.startswith(LIB):
        _torch_library_call(ctx, call, qual[len(LIB):])
    elif qual.endswith("direct_register_custom_op"):
        direct_register(ctx, call)
    elif qual == "has_side_effect" or qual.endswith(".has_side_effect"):  # torch.fx(.node).has_side_effect
        _side_effect(ctx, call)


def _torch_library_call(ctx: FileContext, call: ast.Call, api: str) -> None:
    if api == "define":
        torch_library_define(ctx, call)
    elif api in ("impl", "_impl"):
        _torch_library_impl(ctx, call, None)
    elif api in ("register_fake", "impl_abstract", "_register_fake"):
        _register_fake(ctx, call, None)
    elif api == "register_kernel":
        _register_kernel(ctx, call, None)
    elif api == "register_autograd":
        _register_autograd(ctx, call.args[0] if call.args else keyword(call, "op"))
    elif api in ("custom_op", "triton_op") and (len(call.args) >= 2 or id(call) in ctx.applied
                                                or keyword(call, "fn") is not None):
        # `custom_op("ns::f", fn, ...)`, or the call form `custom_op("ns::f", ...)(fn)`
        custom_op(ctx, call, custom_op_function(ctx, call), triton=api == "triton_op")


def _library_method(ctx: FileContext, call: ast.Call, method: str, library) -> None:
    if library.namespace is UNKNOWN:
        return
    if method == "define":
        args = arguments(call, ("schema", "alias_analysis"))
        define(ctx, call, args.get("schema"), library.namespace, tags(ctx, call), "library", library)
    elif method == "impl":
        args = arguments(call, ("op_name", "fn", "dispatch_key"))
        key_node = args.get("dispatch_key")
        if key_node is not None:
            dispatch_key(ctx, key_node)
            key = ctx.value(key_node)
        else:
            key = library.key or "CompositeImplicitAutograd"
        _registration(ctx, args.get("op_name"), library.namespace, key, call,
                      function_arg(ctx, args.get("fn"), call.lineno), "Library.impl")
    elif method == "_register_fake":
        args = arguments(call, ("op_name", "fn"))
        _registration(ctx, args.get("op_name"), library.namespace, "fake", call,
                      function_arg(ctx, args.get("fn"), call.lineno), "Library._register_fake")
    elif method == "fallback":
        args = arguments(call, ("fn", "dispatch_key"))
        if args.get("dispatch_key") is not None:
            dispatch_key(ctx, args["dispatch_key"])


def _registration(ctx: FileContext, op_node, default_ns, key, call, function, api) -> None:
    ref = op_ref(ctx, op_node, default_ns) if op_node is not None else None
    role = "fake" if key in ("fake", "Meta") else "kernel"
    if ref is None:
        if role == "fake" or key in ("CompositeExplicitAutograd", "CompositeImplicitAutograd"):
            ctx.record.unknown_names.append(unknown_name(ctx, "fake", op_node, default_ns, call))
        return
    if not isinstance(key, str):
        key = UNKNOWN  # a kernel at a key we cannot read: this op's fake needs are unknown
    namespace, name, overload = ref
    ctx.record.registrations.append(Registration(role, namespace, name, overload, key,
                                                 ctx.where(ctx.site or call), api, function, False))


def unknown_name(ctx: FileContext, what: str, node: ast.AST | None, default_ns: str | None, at: ast.AST
                 ) -> UnknownName:
    """What an op name lint cannot read in full may name: the readable parts of an f-string or `+` (`f"ns::{n}"`
    is any op of ns), the namespace of `getattr(torch.ops.ns, name)` or of the Library, else any op of the
    file's own package."""
    parts = ctx.names.template(node) if node is not None else None
    if parts is None:
        head = ctx.qualname(node.args[0]) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
            and node.func.id == "getattr" and node.args else None
        namespace = head[len("torch.ops."):] if head and head.count(".") == 2 and head.startswith("torch.ops.") \
            else default_ns
        parts = [f"{namespace}::" if namespace else None, None]
    elif not any(part is not None and "::" in part for part in parts) and default_ns is not None:
        parts = [f"{default_ns}::", *parts]  # a Library method's name is in the Library's namespace
    pattern = pattern_of(parts)
    first = parts[0]
    namespace = first.split("::", 1)[0] if first is not None and "::" in first else None
    return UnknownName(what, pattern, namespace, ctx.where(ctx.site or at).path)


def op_ref(ctx: FileContext, node: ast.AST, default_ns: str | None) -> tuple[str | None, str, str | None] | None:
    """(namespace, name, overload or None) named by a string, `torch.ops.ns.op[.ovl]` or a custom_op."""
    value = ctx.value(node)
    if isinstance(value, str):
        ns = default_ns
        text = value
        if "::" in text:
            ns, text = text.split("::", 1)
        name, _, overload = text.partition(".")
        if not name:
            return None
        return ns, name, (overload if _ else None)
    qual = ctx.qualname(node) or _getattr_path(ctx, node)
    if qual and qual.startswith("torch.ops."):
        parts = qual.split(".")[2:]
        if len(parts) == 2:
            return parts[0], parts[1], None
        if len(parts) == 3:
            return parts[0], parts[1], "" if parts[2] == "default" else parts[2]
    if isinstance(node, ast.Name) and node.id in ctx.custom_ops:
        definition = ctx.custom_ops[node.id]
        return definition.namespace, definition.name, definition.overload
    return None


def _getattr_path(ctx: FileContext, node: ast.AST) -> str | None:
    """`torch.ops.ns.f` for `getattr(getattr(torch.ops.ns, name), overload)` with readable names."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
            and len(node.args) == 2):
        return None
    head = ctx.qualname(node.args[0]) or _getattr_path(ctx, node.args[0])
    attr = ctx.value(node.args[1])
    return f"{head}.{attr}" if head and isinstance(attr, str) else None


def _torch_library_impl(ctx: FileContext, call: ast.Call, decorated: ast.AST | None) -> None:
    first = call.args[0] if call.args else keyword(call, "qualname")
    library = library_at(ctx, first, call.lineno) if first is not None else None
    if library is not None:  # the deprecated impl(lib, name, dispatch_key) form: keys only
        args = arguments(call, ("lib", "name", "dispatch_key"))
        key_node = args.get("dispatch_key")
        if key_node is not None:
            dispatch_key(ctx, key_node)
        key = ctx.value(key_node) if key_node is not None else (library.key or "CompositeImplicitAutograd")
        _registration(ctx, args.get("name"), library.namespace, key, call,
                      decorated_or(ctx, decorated, call, None), "torch.library.impl")
        return
    args = arguments(call, ("qualname", "types", "func"))
    types = ctx.value(args.get("types"))
    function = decorated_or(ctx, decorated, call, args.get("func"))
    for key in device_keys(types):
        _registration(ctx, args.get("qualname"), None, key, call, function, "torch.library.impl")


def _register_fake(ctx: FileContext, call: ast.Call, decorated: ast.AST | None) -> None:
    op_node = call.args[0] if call.args else keyword(call, "qualname")
    # `impl_abstract(qualname, func=None, *, lib=None)` also takes its function by keyword
    function = decorated_or(ctx, decorated, call, call.args[1] if len(call.args) > 1 else keyword(call, "func"))
    _registration(ctx, op_node, None, "fake", call, function, "register_fake")


def _register_kernel(ctx: FileContext, call: ast.Call, decorated: ast.AST | None) -> None:
    op_node = call.args[0] if call.args else None
    types = ctx.value(call.args[1]) if len(call.args) > 1 else ctx.value(keyword(call, "device_types"))
    function = decorated_or(ctx, decorated, call, call.args[2] if len(call.args) > 2 else None)
    for key in device_keys(types):
        _registration(ctx, op_node, None, key, call, function, "register_kernel")


def _custom_op_method(ctx: FileContext, call: ast.Call, definition: Definition, method: str, decorated) -> None:
    """`op.register_fake`, `op.register_kernel`, `op.register_autograd` on a CustomOpDef (`op.impl`,
    `op.impl_abstract` on an older CustomOp)."""
    if legacy_method(ctx, call, definition, method, decorated):
        return
    if method == "register_fake":
        function = function_node(ctx, decorated) if decorated else (
            function_arg(ctx, call.args[0], call.lineno) if call.args else None)
        ctx.record.registrations.append(Registration("fake", definition.namespace, definition.name,
                                                     definition.overload, "fake", ctx.where(call),
                                                     "CustomOpDef.register_fake", function, True, origin=definition))
    elif method == "register_autograd":
        ctx.record.autograd_ops.add((definition.namespace, definition.name, definition.overload or ""))
    elif method == "register_kernel":
        types = ctx.value(call.args[0]) if call.args else ctx.value(keyword(call, "device_types"))
        function = function_node(ctx, decorated) if decorated else (
            function_arg(ctx, call.args[1], call.lineno) if len(call.args) > 1 else None)
        for key in device_keys(types):
            ctx.record.registrations.append(Registration("kernel", definition.namespace, definition.name,
                                                         definition.overload, key, ctx.where(call),
                                                         "CustomOpDef.register_kernel", function, True,
                                                         origin=definition))


def _register_autograd(ctx: FileContext, op_node) -> None:
    ref = op_ref(ctx, op_node, None) if op_node is not None else None
    if ref is not None and ref[0] is not None:
        ctx.record.autograd_ops.add((ref[0], ref[1], ref[2] or ""))


def _side_effect(ctx: FileContext, call: ast.Call) -> None:
    if not call.args:
        return
    ref = op_ref(ctx, call.args[0], None)
    if ref is None or ref[0] is None:
        ctx.record.unknown_names.append(unknown_name(ctx, "side_effect", call.args[0], None, call))
    else:
        ctx.record.side_effect_ops.add((ref[0], ref[1]))


def _decorator(ctx: FileContext, decorator: ast.AST, function: ast.AST) -> None:
    if isinstance(decorator, ast.Attribute) and isinstance(decorator.value, ast.Name) \
            and decorator.value.id in ctx.custom_ops:
        _custom_op_method(ctx, ast.Call(decorator, [], [], lineno=decorator.lineno, col_offset=decorator.col_offset),
                          ctx.custom_ops[decorator.value.id], decorator.attr, function)
        return
    qual = ctx.qualname(decorator)
    if qual in (LIB + "register_fake", LIB + "impl_abstract"):  # bare `@register_fake` is not valid; skip
        return
    if not isinstance(decorator, ast.Call):
        return
    func = decorator.func
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in ctx.custom_ops:
        _custom_op_method(ctx, decorator, ctx.custom_ops[func.value.id], func.attr, function)
        return
    legacy = legacy_api(ctx, func)
    if legacy is not None:
        read_legacy(ctx, decorator, legacy, function)
        return
    api = ctx.is_api(func, "custom_op", "register_fake", "impl_abstract", "_register_fake", "impl", "_impl",
                     "register_kernel", "triton_op")
    if api in ("custom_op", "triton_op"):
        definition = custom_op(ctx, decorator, function_node(ctx, function), triton=api == "triton_op")
        if definition is not None:
            ctx.custom_ops[function.name] = definition
    elif api in ("register_fake", "impl_abstract", "_register_fake"):
        _register_fake(ctx, decorator, function)
    elif api in ("impl", "_impl"):
        _torch_library_impl(ctx, decorator, function)
    elif api == "register_kernel":
        _register_kernel(ctx, decorator, function)
