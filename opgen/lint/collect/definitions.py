"""Op definitions: `Library.define` / `torch.library.define` schema strings, `custom_op` / `triton_op` (as
decorators or calls, their schema given or inferred from the type hints), vLLM's
`direct_register_custom_op`; and the assignments that bind a name to a Library or to a CustomOpDef."""

from __future__ import annotations

import ast

from ..dispatch_keys import key_of_device_type
from ..records import UNKNOWN, Definition, Function, LibraryDecl, Registration, UnknownName, Where
from .context import FileContext
from .functions import applied, function_arg
from .libraries import dispatch_key, library_assignment, library_at, scoped_libraries
from .names import pattern_of
from .syntax import arguments, assigned_names, keyword


def read_assignment(ctx: FileContext, node: ast.AST) -> None:
    """`with _scoped_library(...) as lib`, `lib = Library(...)`, `op = custom_op("ns::f", fn, ...)`."""
    if isinstance(node, ast.With):
        scoped_libraries(ctx, node)
        return
    value = node.value
    if not isinstance(value, ast.Call):
        return
    # `op = custom_op("ns::f", fn, ...)` or `fn = custom_op("ns::f", ...)(fn)`, then `@op.register_fake`:
    # the name is the op
    call = value.func if isinstance(value.func, ast.Call) and len(value.args) == 1 else value
    api = ctx.is_api(call.func, "custom_op", "triton_op")
    if api is not None and (call is not value or len(call.args) >= 2 or keyword(call, "fn") is not None):
        definition = custom_op(ctx, call, custom_op_function(ctx, call), triton=api == "triton_op")
        ctx.decorator_ids.add(id(call))  # read here, not again as a plain call
        for target in assigned_names(node):
            if definition is not None and isinstance(target, ast.Name):
                ctx.custom_ops[target.id] = definition
        return
    library_assignment(ctx, node, value)


def custom_op_function(ctx: FileContext, call: ast.Call) -> Function | None:
    """The function a custom_op / triton_op call defines the op with: `custom_op("ns::f", fn, ...)`,
    `custom_op("ns::f", fn=fn, ...)`, or the call form `custom_op("ns::f", ...)(fn)`."""
    given = call.args[1] if len(call.args) >= 2 else keyword(call, "fn")
    if given is not None:
        return function_arg(ctx, given, call.lineno)
    return applied(ctx, call)


def tags(ctx: FileContext, call: ast.Call) -> tuple[str, ...] | None:
    """The `tags=` of a define or custom_op as torch.Tag names; None when they cannot be read."""
    node = keyword(call, "tags")
    if node is None:
        return ()
    items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    found = []
    for item in items:
        qual = ctx.qualname(item)
        if qual is None or not qual.startswith("torch.Tag."):
            return None
        found.append(qual.rsplit(".", 1)[1])
    return tuple(found)


def define(ctx: FileContext, call, schema_node, namespace, tags_, style, library: LibraryDecl | None, *,
           name_prefix: str = "") -> None:
    """A schema string defined in `namespace` (the Library's; the string may carry its own)."""
    schema = ctx.value(schema_node)
    if not isinstance(schema, str):
        ctx.record.unknown_names.append(_unread_definition(ctx, schema_node, namespace, name_prefix))
        return
    text = name_prefix + schema
    literal = ctx.literal(schema_node)
    head = text.split("(", 1)[0].strip()
    own_ns = None
    if "::" in head:
        own_ns, head = head.split("::", 1)
    name, _, overload = head.partition(".")
    definition = Definition(own_ns or namespace, name.strip(), overload.strip(), ctx.where(call), style, text,
                            tags=tags_, library_namespace=namespace if own_ns else None,
                            unconditional=id(call) in ctx.unconditional)
    if literal is not None:
        definition.schema_literal = literal
        definition.schema_column = literal.offset + 1 - len(name_prefix)
        definition.name_offset = len(name_prefix)
        definition.where = Where(ctx.path, literal.line, literal.offset + 1)
    elif schema_node is not None:
        definition.where = ctx.where(schema_node)
    ctx.record.definitions.append(definition)


def _unread_definition(ctx: FileContext, schema_node, namespace: str, name_prefix: str) -> UnknownName:
    """A define whose schema is built at run time defines the op its readable head names (`torch.library.define(
    "ns::f", schema)`, `lib.define(f"f_{kind}(Tensor x) -> Tensor")`), else some op of its namespace."""
    head: list[str | None] = [name_prefix] if name_prefix else []
    for part in [] if name_prefix else ctx.names.template(schema_node) or [None]:
        if part is not None and "(" in part:
            head.append(part.split("(", 1)[0])
            break
        head.append(part)
    else:
        if not name_prefix:
            head.append(None)  # nothing readable ends the name: anything may follow
    if head[0] is None or "::" not in head[0]:
        head.insert(0, f"{namespace}::")
    pattern = pattern_of(head)
    return UnknownName("definition", pattern, namespace, ctx.path)


def torch_library_define(ctx: FileContext, call: ast.Call) -> None:
    """`torch.library.define("ns::f", "(Tensor x) -> Tensor", lib=...)`."""
    args = arguments(call, ("qualname", "schema"))
    qual = ctx.value(args.get("qualname"))
    if not isinstance(qual, str) or "::" not in qual:
        return
    lib = keyword(call, "lib")
    library = library_at(ctx, lib, call.lineno) if lib is not None else None
    define(ctx, call, args.get("schema"), qual.split("::", 1)[0], tags(ctx, call), "library", library,
           name_prefix=qual.split("::", 1)[1])


def custom_op(ctx: FileContext, call: ast.Call, function: Function | None, triton: bool = False
              ) -> Definition | None:
    """A `custom_op("ns::f", ..., mutates_args=..., device_types=..., schema=...)` defining `function`; its
    kernel is registered at each device type (CompositeExplicitAutograd without device_types)."""
    name_value = ctx.value(call.args[0]) if call.args else ctx.value(keyword(call, "name"))
    if not isinstance(name_value, str) or "::" not in name_value:
        return None
    namespace, qualified = name_value.split("::", 1)
    name, _, overload = qualified.partition(".")  # `custom_op("ns::conv2d.padding")` defines that overload
    schema_node = keyword(call, "schema")
    schema_text = None
    literal = None
    if schema_node is not None:
        schema = ctx.value(schema_node)
        if not isinstance(schema, str):
            return None
        schema_text = qualified + schema
        literal = ctx.literal(schema_node)
    mutates_node = keyword(call, "mutates_args")
    mutates = ctx.value(mutates_node) if mutates_node is not None else UNKNOWN
    device_types = ctx.value(keyword(call, "device_types"))
    definition = Definition(namespace, name, overload, ctx.where(call), "custom_op", schema_text,
                            tags=tags(ctx, call), mutates_args=mutates,
                            mutates_where=ctx.where(mutates_node) if mutates_node is not None else None,
                            kernel=function,
                            device_types=device_keys(device_types) if device_types is not UNKNOWN else None,
                            fake_from_kernel=triton)
    if literal is not None:
        definition.schema_literal = literal
        definition.schema_column = literal.offset + 1 - len(qualified)
        definition.name_offset = len(qualified)
    ctx.record.definitions.append(definition)
    if function is not None:
        for key in definition.device_types or ("CompositeExplicitAutograd",):
            ctx.record.registrations.append(Registration("kernel", namespace, name, overload, key, ctx.where(call),
                                                         "custom_op", function, True, origin=definition))
    return definition


def direct_register(ctx: FileContext, call: ast.Call) -> None:
    """vLLM's `direct_register_custom_op(op_name, op_func, mutates_args, fake_impl, target_lib, ...)`: a
    Library define with the schema inferred as custom_op does, its kernel and its fake."""
    args = arguments(call, ("op_name", "op_func", "mutates_args", "fake_impl", "target_lib", "dispatch_key",
                            "tags"))
    name = ctx.value(args.get("op_name"))
    if not isinstance(name, str):
        return
    library = library_at(ctx, args["target_lib"], call.lineno) if args.get("target_lib") is not None else None
    namespace = library.namespace if library else None
    function = function_arg(ctx, args.get("op_func"), call.lineno)
    mutates_node = args.get("mutates_args")
    mutates = ctx.value(mutates_node) if mutates_node is not None else ()
    key_node = args.get("dispatch_key")
    key = "CUDA"
    if key_node is not None:
        dispatch_key(ctx, key_node)
        key = ctx.value(key_node)
    definition = Definition(namespace, name, "", ctx.where(call), "custom_op", None, tags=tags(ctx, call),
                            mutates_args=mutates,
                            mutates_where=ctx.where(mutates_node) if mutates_node is not None else None,
                            kernel=function, api="direct_register_custom_op")
    ctx.record.definitions.append(definition)
    if function is not None and isinstance(key, str):
        ctx.record.registrations.append(Registration("kernel", namespace, name, "", key, ctx.where(call),
                                                     "direct_register_custom_op", function, origin=definition))
    fake_node = args.get("fake_impl")
    if fake_node is not None and not (isinstance(fake_node, ast.Constant) and fake_node.value is None):
        ctx.record.registrations.append(Registration("fake", namespace, name, "", "fake", ctx.where(call),
                                                     "direct_register_custom_op",
                                                     function_arg(ctx, fake_node, call.lineno),
                                                     origin=definition))


def device_keys(types) -> tuple[str, ...]:
    """Dispatch keys for `types`/`device_types` ("cpu" -> CPU, "default" -> CompositeExplicitAutograd, a
    renamed PrivateUse1 backend's "npu" or "tpu" -> PrivateUse1)."""
    if types is None:
        return ("CompositeExplicitAutograd",)
    if isinstance(types, str):
        types = (types,)
    if not isinstance(types, tuple):
        return (UNKNOWN,)
    return tuple(key_of_device_type(typ) if isinstance(typ, str) else UNKNOWN for typ in types)
