"""`ops[i].op_plugin`: the keys only the op_plugin target reads (aclnn call, fallback, versions, ...).

Checked by `opgen.spec.load` like every other key (file:line:col errors); the op_plugin target
(`opgen.op_plugin`) turns them, with the op's schema and semantics, into op-plugin's files.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

OP_PLUGIN_KEYS = ("aclnn", "exec", "kernel", "acl_op", "versions", "exposed", "public_api", "internal_format_opapi",
                  "new_params", "none_values", "backward", "output_differentiability", "devices", "docs")
KERNELS = ("gen_opapi", "opapi")
# op-plugin's `all_version` list: every version spec must name members of it.
ALL_VERSIONS = tuple(f"v2.{minor}" for minor in range(1, 16))
_VERSION = re.compile(r"v\d+\.\d+\Z")
# op-plugin's test files name the SoCs a test runs on (`@SupportedDevices(['Ascend910B'])`, the most common).
DEFAULT_DEVICES = ("Ascend910B",)
_DEVICE = re.compile(r"Ascend[0-9A-Za-z_]+\Z")
_ACLNN = re.compile(r"aclnn[A-Z][A-Za-z0-9]*\Z")
# A C++ expression pasted into a kernel: one line, no statement or comment breaking out of it.
_CPP_FORBIDDEN = (";", "//", "/*", "*/", "#", "\n", "\r", "{", "}")


@dataclass(frozen=True)
class OpPluginSpec:
    """The checked `op_plugin:` mapping of one op (defaults filled by the op_plugin target)."""

    aclnn: str | None = None
    exec_args: tuple[str, ...] | None = None  # aclnn argument order; None: schema arguments, then outputs
    kernel: str | None = None  # "gen_opapi" (torchnpugen writes the kernel) or "opapi" (a kernel file); None: choose
    acl_op: bool = False  # an acl_op fallback exists: `acl_op:` versions and DO_COMPATIBILITY
    versions: object = "all_version"  # "all_version", ["v2.1", "newest"] or "v2.1, v2.2"
    exposed: bool = False  # `exposed:` in the YAML: in torch_npu.__all__, a public API (implies public_api)
    public_api: bool = False  # in test/allowlist_for_publicAPI.json; the compatibility test tracks its signature
    internal_format_opapi: bool = False
    new_params: tuple[tuple[str, str], ...] = ()  # (C++ local name, C++ expression)
    none_values: tuple[tuple[str, str], ...] = ()  # (optional argument, the C++ value aclnn gets for None)
    devices: tuple[str, ...] = DEFAULT_DEVICES  # the tests' @SupportedDevices
    backward: tuple[tuple[str, str], ...] = ()  # ("self, gamma", formula) for derivatives.yaml
    output_differentiability: tuple[bool, ...] | None = None
    # the docs in op-plugin's language: (argument or output name, or "description", text)
    docs: tuple[tuple[str, str], ...] = ()


def gen_opapi_problem(schema) -> str | None:
    """Why torchnpugen's gen_opapi (allocate fresh outputs like the first input, one aclnn call) cannot
    describe an op, or None when it can."""
    from ..schema.model import BaseType, strip_alias

    if schema.is_mutable:
        return "it mutates its arguments (gen_opapi allocates fresh outputs only)"
    if not schema.returns:
        return "it returns nothing"
    if any(strip_alias(r.type) != BaseType("Tensor") for r in schema.returns):
        return "it returns something other than plain Tensors"
    if next((strip_alias(a.type) for a in schema.arguments if a.is_tensor), None) != BaseType("Tensor"):
        return "its first tensor argument must be a plain Tensor (the outputs take its options)"
    return None


def parse_op_plugin(source, node, schema, where: str) -> OpPluginSpec:
    """Check `ops[i].op_plugin` (a YAML node) against the op's schema; errors placed by `source`."""
    from .nodes import _mapping

    field = f"{where}.op_plugin"
    entries = _mapping(source, node, field, OP_PLUGIN_KEYS)
    values: dict = {}
    for key in ("acl_op", "exposed", "public_api", "internal_format_opapi"):
        if key in entries:
            values[key] = _flag(source, entries[key][1], f"{field}.{key}")
    if "aclnn" in entries:
        values["aclnn"] = _aclnn(source, entries["aclnn"][1], f"{field}.aclnn")
    if "kernel" in entries:
        values["kernel"] = _kernel(source, entries["kernel"][1], f"{field}.kernel", schema)
    if "versions" in entries:
        values["versions"] = _versions(source, entries["versions"][1], f"{field}.versions")
    arg_names = [a.name for a in schema.arguments]
    if "new_params" in entries:
        values["new_params"] = _new_params(source, entries["new_params"][1], f"{field}.new_params", arg_names)
    if "none_values" in entries:
        values["none_values"] = _none_values(source, entries["none_values"][1], f"{field}.none_values", schema)
    if "devices" in entries:
        values["devices"] = _devices(source, entries["devices"][1], f"{field}.devices")
    if "exec" in entries:
        known = arg_names + list(schema.return_names) + [
            name for name, _ in values.get("new_params", ())]
        values["exec_args"] = _exec(source, entries["exec"][1], f"{field}.exec", known, schema)
    if "docs" in entries:
        values["docs"] = _docs(source, entries["docs"][1], f"{field}.docs",
                               ["description", *arg_names, *schema.return_names])
    if "backward" in entries:
        values["backward"] = _backward(source, entries["backward"][1], f"{field}.backward", arg_names)
    if "output_differentiability" in entries:
        if "backward" not in entries:
            raise source.error(entries["output_differentiability"][1], f"{field}.output_differentiability without "
                               f"{field}.backward", "add `backward:` or remove it")
        values["output_differentiability"] = _differentiability(
            source, entries["output_differentiability"][1], f"{field}.output_differentiability", schema)
    return OpPluginSpec(**values)


def _flag(source, node, field: str) -> bool:
    from .nodes import _kind, _scalar

    value = _scalar(node)
    if not isinstance(value, bool):
        raise source.error(node, f"{field} must be true or false, not {_kind(node)}")
    return value


def _aclnn(source, node, field: str) -> str:
    from .nodes import _string

    name = _string(source, node, field)
    if not _ACLNN.match(name):
        raise source.error(node, f"{field} {name!r} is not an aclnn function name",
                           "write the C API name without GetWorkspaceSize, e.g. aclnnAddRmsNorm")
    return name


def _kernel(source, node, field: str, schema) -> str:
    from .nodes import _string

    kernel = _string(source, node, field)
    if kernel not in KERNELS:
        raise source.error(node, f"{field}: unknown kernel kind {kernel!r}",
                           "gen_opapi (torchnpugen writes the kernel from `gen_opapi:`) or opapi (opgen writes "
                           "op_plugin/ops/opapi/<Name>KernelNpuOpApi.cpp)")
    problem = gen_opapi_problem(schema) if kernel == "gen_opapi" else None
    if problem:
        raise source.error(node, f"{field}: gen_opapi cannot describe this op: {problem}",
                           "set `kernel: opapi`: opgen writes the kernel file instead")
    return kernel


def _new_params(source, node, field: str, arg_names: list[str]) -> tuple[tuple[str, str], ...]:
    from .nodes import _string

    found = []
    for key_node, value_node in _pairs(source, node, field, "map C++ local names to C++ expressions",
                                       "e.g. new_params: {cache_mode: '\"Norm\"'}"):
        name = _string(source, key_node, f"{field} key")
        if not re.match(r"[A-Za-z_][A-Za-z0-9_]*\Z", name) or name in arg_names:
            raise source.error(key_node, f"{field}: {name!r} is not a new C++ local name",
                               "use an identifier that is not an argument name")
        found.append((name, _cpp_expression(source, value_node, f"{field}.{name}")))
    return tuple(found)


def _none_values(source, node, field: str, schema) -> tuple[tuple[str, str], ...]:
    """What aclnn gets for an optional non-tensor argument left None: the C++ `value_or` operand."""
    from ..schema.model import OptionalType, strip_alias
    from .nodes import _string

    optional = [a.name for a in schema.arguments
                if isinstance(strip_alias(a.type), OptionalType) and not a.is_tensor]
    found = []
    for key_node, value_node in _pairs(source, node, field, "map optional arguments to C++ values",
                                       "e.g. none_values: {dst_type: 'static_cast<int64_t>(at::kChar)'}"):
        name = _string(source, key_node, f"{field} key")
        if name not in optional:
            raise source.error(key_node, f"{field}: {name!r} is not an optional non-tensor argument of "
                               f"{schema.op_name}", f"optional ones: {', '.join(optional) or 'none'}")
        found.append((name, _cpp_expression(source, value_node, f"{field}.{name}")))
    return tuple(found)


def _docs(source, node, field: str, names: list[str]) -> tuple[tuple[str, str], ...]:
    """`docs: {description: ..., x: ..., out0: ...}`: the op's and each argument's and output's description in
    op-plugin's docs (the repo writes them in Chinese), in place of `doc:` and of a bare type."""
    from .nodes import _string

    found = []
    for key_node, value_node in _pairs(source, node, field, "map `description`, argument and output names to text",
                                       "e.g. docs: {description: 对x做RMS归一化。, x: 输入张量。}"):
        name = _string(source, key_node, f"{field} key")
        if name not in names:
            raise source.error(key_node, f"{field}: {name!r} is neither `description` nor an argument or output",
                               f"write one of: {', '.join(names)}")
        found.append((name, " ".join(_string(source, value_node, f"{field}.{name}").split())))
    return tuple(found)


def _pairs(source, node, field: str, what: str, hint: str):
    from yaml.nodes import MappingNode

    if not isinstance(node, MappingNode):
        raise source.error(node, f"{field} must {what}", hint)
    return node.value


def _cpp_expression(source, node, field: str) -> str:
    from .nodes import _scalar

    text = _scalar(node)
    text = str(text).lower() if isinstance(text, bool) else text
    text = str(text) if isinstance(text, (int, float)) else text
    if not isinstance(text, str) or not text.strip() or any(bad in text for bad in _CPP_FORBIDDEN):
        raise source.error(node, f"{field} must be one C++ expression on one line",
                           "no ';', braces, '#' or comments, e.g. '\"Norm\"' or 'x.size(0) * 2'")
    return text


def _devices(source, node, field: str) -> tuple[str, ...]:
    from yaml.nodes import SequenceNode

    from .nodes import _string

    names = [_string(source, item, f"{field} entry") for item in node.value] if isinstance(node, SequenceNode) else []
    bad = next((name for name in names if not _DEVICE.match(name)), None)
    if not names or bad is not None:
        raise source.error(node, f"{field} must list SoC names as op-plugin's @SupportedDevices takes them"
                           + (f", not {bad!r}" if bad else ""), "e.g. devices: [Ascend910B, Ascend950]")
    return tuple(names)


def _exec(source, node, field: str, known: list[str], schema) -> tuple[str, ...]:
    import difflib

    from yaml.nodes import SequenceNode

    from .nodes import _string

    if not isinstance(node, SequenceNode) or not node.value:
        raise source.error(node, f"{field} must list the aclnn call's arguments in order",
                           f"names of arguments, outputs or new_params: {', '.join(known)}")
    order = []
    for item in node.value:
        name = _string(source, item, f"{field} entry")
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
            raise source.error(item, f"{field}: {name!r} is not an argument, output or new_params name of "
                               f"{schema.op_name}", (f"did you mean {close[0]!r}? " if close else "")
                               + f"known: {', '.join(known)}")
        order.append(name)
    return tuple(order)


def _differentiability(source, node, field: str, schema) -> tuple[bool, ...]:
    from yaml.nodes import SequenceNode

    from .nodes import _scalar

    flags = [_scalar(item) for item in node.value] if isinstance(node, SequenceNode) else None
    if flags is None or len(flags) != len(schema.returns) or not all(isinstance(f, bool) for f in flags):
        raise source.error(node, f"{field} must list true/false for each of the {len(schema.returns)} return(s)",
                           "e.g. [true, false]")
    return tuple(flags)


def _versions(source, node, field: str):
    from yaml.nodes import SequenceNode

    from .nodes import _kind, _scalar

    hint = "write all_version, [v2.1, newest] (a closed range) or 'v2.1, v2.2' (a list)"
    if isinstance(node, SequenceNode):
        items = [_scalar(item) for item in node.value]
        if (len(items) != 2 or items[0] not in ALL_VERSIONS or not (items[1] in ALL_VERSIONS or items[1] == "newest")
                or (items[1] != "newest" and ALL_VERSIONS.index(items[1]) < ALL_VERSIONS.index(items[0]))):
            raise source.error(node, f"{field} must be a range [first, last|newest] of {', '.join(ALL_VERSIONS)}",
                               hint)
        return [items[0], items[1]]
    value = _scalar(node)
    if value == "all_version":
        return value
    if isinstance(value, str):
        parts = [part.strip() for part in value.split(",")]
        if parts and all(part in ALL_VERSIONS for part in parts):
            return ", ".join(parts)
    raise source.error(node, f"{field}: {_kind(node)} is not a version spec of op-plugin", hint)


def _backward(source, node, field: str, arg_names: list[str]) -> tuple[tuple[str, str], ...]:
    from yaml.nodes import MappingNode

    from .nodes import _string

    if not isinstance(node, MappingNode) or not node.value:
        raise source.error(node, f"{field} must map input names to derivative formulas",
                           "e.g. backward: {\"self, gamma\": \"npu_rms_norm_backward(grad, self, gamma, result1)\"}")
    formulas = []
    for key_node, value_node in node.value:
        key = _string(source, key_node, f"{field} key")
        for name in (part.strip() for part in key.split(",")):
            if name not in arg_names:
                raise source.error(key_node, f"{field}: {name!r} is not an input of the op",
                                   f"inputs: {', '.join(arg_names)}")
        formula = _string(source, value_node, f"{field}.{key}")
        if "\n" in formula.strip():
            raise source.error(value_node, f"{field}.{key} must be one line", "derivatives.yaml formulas are one "
                               "C++ expression")
        formulas.append((", ".join(part.strip() for part in key.split(",")), formula.strip()))
    return tuple(formulas)
