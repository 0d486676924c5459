"""The ops of an op-plugin contribution: each spec op, plus the functional twin torchgen pairs with it.

torchgen's functionalization pairs an in-place `foo_` (mutates only `self`, returns it) with the
functional `foo`, and a mutable `foo` (Tensor(a!) arguments, no trailing `_`) with `foo_functional`,
whose returns are foo's non-aliased returns followed by fresh copies of the mutated arguments. The
rule torchgen asserts: #mutated args + #non-aliased returns of foo == #returns of foo_functional.
opgen writes the twin itself and refuses a spec whose ops would break that pairing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from ..errors import OpgenError
from ..schema.model import Argument, BaseType, OptionalType, Return, Schema, base_name, strip_alias
from ..schema.parser import parse_schema
from ..spec.model import RANDOM_TAG, OpSpec, OutputSpec, ProjectSpec
from ..spec.op_plugin import OpPluginSpec, gen_opapi_problem
from .convert import Conversion, ConversionError, conversions
from .sizes import repo_size

NAMESPACE = "npu"


@dataclass(frozen=True)
class PluginOp:
    """One `custom:` entry with its kernel, Meta and test."""

    schema: Schema  # as written in op_plugin_functions.yaml (no namespace)
    kind: str  # "functional", "inplace" (foo_) or "mutable" (foo with Tensor(a!) arguments)
    source: OpSpec  # the spec op this entry comes from (its examples, reference, doc)
    outputs: tuple[OutputSpec, ...]  # semantics of the freshly allocated returns, in order
    config: OpPluginSpec
    aclnn: str
    exec_args: tuple[str, ...]  # aclnn arguments in order: argument and output names (outputs as in `outputs`)
    kernel: str  # "gen_opapi" or "opapi"
    twin_of: str | None = None  # the mutating op this functional twin copies (its arguments are cloned)
    cloned: tuple[str, ...] = ()  # twin: the arguments cloned and returned after the outputs
    conversions: tuple[Conversion, ...] = ()  # the non-tensor arguments converted before the aclnn call

    @property
    def name(self) -> str:
        return self.schema.op_name

    @property
    def func(self) -> str:
        return self.schema.signature(with_namespace=False)


def camel(name: str) -> str:
    """`npu_add_rms_norm_` -> `AddRmsNorm` (op-plugin's file and aclnn naming)."""
    stem = name.removeprefix("npu_").strip("_")
    return "".join(part[:1].upper() + part[1:] for part in stem.split("_") if part)


class _Locator:
    """Places target-level errors in the spec file (file:line:col), as the loader places its own."""

    def __init__(self, spec: ProjectSpec) -> None:
        import yaml

        from ..spec.nodes import _Source

        # the file as written: spec.text may hold CLI overrides (an added `target:` line shifts the lines)
        text = spec.text
        if spec.path and os.path.isfile(spec.path):
            with open(spec.path, encoding="utf-8") as handle:
                text = handle.read()
        self.source = _Source(text, spec.path or "<spec>")
        try:
            self.root = yaml.compose(text, Loader=yaml.SafeLoader) if text else None
        except yaml.YAMLError:
            self.root = None

    def _node(self, *path):
        node = self.root
        for key in path:
            if node is None:
                return None
            if isinstance(key, int):
                node = node.value[key] if hasattr(node, "value") and isinstance(node.value, list) and key < len(
                    node.value) else None
            else:
                node = next((v for k, v in getattr(node, "value", []) if getattr(k, "value", None) == key), None)
        return node

    def formula_error(self, op_index: int, number: int, offset: int, error: OpgenError) -> OpgenError:
        """`error` at the (0-based) `offset` inside the `number`-th formula of ops[op_index].op_plugin.backward."""
        field = f"ops[{op_index}].op_plugin.backward"
        node = self._node("ops", op_index, "op_plugin", "backward")
        pairs = getattr(node, "value", None)
        if not isinstance(pairs, list) or number >= len(pairs):
            return OpgenError(f"{self.source.path}: {field}: {error.message}", hint=error.hint)
        return self.source.inner(pairs[number][1], offset + 1, error, field)

    def place(self, *path) -> str:
        """`file:line:col` of the spec node at `path` (the file alone where it has none)."""
        node = self._node(*path)
        if node is None:
            return self.source.path
        return f"{self.source.path}:{node.start_mark.line + 1}:{node.start_mark.column + 1}"

    def error(self, message: str, hint: str, *path) -> OpgenError:
        node = self._node(*path)
        if node is None or self.root is None:
            return OpgenError(f"{self.source.path}: {message}", hint=hint)
        return self.source.error(node, message, hint)


def foreign_dtype_codes(spec: ProjectSpec) -> list[str]:
    """Warnings, located at `dtype_codes:`, for codes torch_npu reads as another dtype: the kernels pass a code to
    aclnn through c10_npu::GetAclDataType (torch_npu's table), so a code of the spec's own means one dtype in the
    Meta and another on the device."""
    from .sizes import TORCH_NPU_MAP

    if not spec.dtype_codes or not any(_dtype_code_arguments(op.outputs) for op in spec.ops):
        return []
    wrong = [f"{code}: {name} (torch_npu: {TORCH_NPU_MAP.get(code, 'no such code')})"
             for code, name in spec.dtype_codes if TORCH_NPU_MAP.get(code) != name]
    if not wrong:
        return []
    message = (f"{_Locator(spec).place('dtype_codes')}: dtype_codes {', '.join(wrong)}: the kernels pass the code to "
               "aclnn through c10_npu::GetAclDataType, which reads torch_npu's codes (TORCH_DTYPE_ENUM_VALUE_TO_SCALAR_"
               "TYPE_MAP: 1 int8, 3 int32, 5 float16, 6 float32, 15 bfloat16, ...): use torch_npu's code of each dtype")
    return [message]


def english_docs(spec: ProjectSpec) -> list[str]:
    """Warnings, located at `doc:`, for ops whose docs would be English text under op-plugin's Chinese headings: no
    `op_plugin.docs.description` and a `doc:` without a Chinese character (op-plugin's reviewers ask for the docs in
    the repo's language)."""
    locate = _Locator(spec)
    found = []
    for op in spec.ops:
        docs = dict((op.op_plugin or OpPluginSpec()).docs)
        if docs.get("description") or _chinese(op.doc or ""):
            continue
        where = locate.place("ops", op.index, "doc") if op.doc else locate.place("ops", op.index, "schema")
        found.append(f"{where}: {op.schema.op_name}'s docs would be English text under op-plugin's Chinese headings "
                     f"(功能描述, 参数说明, ...): give ops[{op.index}].op_plugin.docs a `description:` in Chinese, and one "
                     "per argument and output")
    return found


def _chinese(text: str) -> bool:
    return any("\u4e00" <= character <= "\u9fff" for character in text)


def plugin_ops(spec: ProjectSpec) -> list[PluginOp]:
    """The entries to write for `spec`, twins included, after checking what the op_plugin target needs."""
    locate = _Locator(spec)
    if spec.namespace != NAMESPACE:
        raise locate.error(f"op-plugin's custom ops live in the 'npu' namespace, not {spec.namespace!r}",
                           "set `namespace: npu` for --target op_plugin", "namespace")
    by_name = {op.schema.op_name: op for op in spec.ops}
    result: list[PluginOp] = []
    for op in spec.ops:
        where = f"ops[{op.index}]"
        config = op.op_plugin or OpPluginSpec()
        try:
            _check_semantics(op, where)
            _check_random(op, where)
            kind = _kind(op, where)
            entry = _entry(op, kind, config, where)
        except _Refusal as refusal:
            raise locate.error(refusal.message, refusal.hint, "ops", op.index, *refusal.keys) from None
        result.append(entry)
        if kind == "functional":
            continue
        twin_schema = _twin_schema(op.schema, kind)
        twin_name = twin_schema.op_name
        given = by_name.get(twin_name)
        if given is not None:  # the user wrote the twin: it must pair as torchgen pairs it
            try:
                _check_pairing(op, given, twin_schema)
            except _Refusal as refusal:
                raise locate.error(refusal.message, refusal.hint, "ops", given.index, "schema") from None
            continue
        result.append(_twin(entry, twin_schema))
    return result


class _Refusal(Exception):
    """A target-level problem with one op; `keys` lead from `ops[i]` to the spec node to blame."""

    def __init__(self, message: str, hint: str, *keys) -> None:
        super().__init__(message)
        self.message, self.hint, self.keys = message, hint, keys


def _check_semantics(op: OpSpec, where: str) -> None:
    optional = [f"{name} ('{ret.type}')" for name, ret in zip(op.schema.return_names, op.schema.returns)
                if isinstance(strip_alias(ret.type), OptionalType)]
    if optional:  # before the semantics: a TODO fake is no way out here, the Meta and kernel need every output
        raise _Refusal(f"{where}: returns {', '.join(optional)}: an op-plugin kernel allocates every output before "
                       "the aclnn call and its Meta function must say when one is None, which opgen's semantics "
                       "cannot (op-plugin has no op returning Tensor?; torch and torchgen take one)",
                       "return a Tensor that is always there (empty, shape [0], where there is nothing) and say so in "
                       "the docs, or write this op's kernel and Meta by hand", "schema")
    missing = op.missing_semantics
    if missing:
        raise _Refusal(f"{where}: the op_plugin target needs every output's shape and dtype (for the kernel's "
                       f"allocation and the Meta function): fill {', '.join(missing)}",
                       "see docs/spec.md, Semantics language", "schema")
    for out in op.outputs:
        if out.returns_argument is not None:
            continue
        if out.shape_rule.is_dynamic:
            raise _Refusal(f"{where}.outputs.{out.name}.shape is data-dependent (`dynamic`): an op-plugin kernel "
                           "allocates its outputs before the aclnn call", "give a size known from the inputs "
                           "(an upper bound) and narrow the result in a wrapper", "outputs", out.name, "shape")
        if out.shape_rule.uses_outputs or out.dtype_rule.uses_outputs:
            raise _Refusal(f"{where}.outputs.{out.name} reads another output: op-plugin allocates every output "
                           "from the inputs", "write the rule over the op's arguments", "outputs", out.name)


def _check_random(op: OpSpec, where: str) -> None:
    """torchgen refuses an op that may draw random numbers (a Generator argument, 'rand' in its name, 'dropout'
    in its name or an argument's, backwards aside) without the nondeterministic_seeded tag."""
    schema = op.schema
    dropout = "dropout" in schema.name or any("dropout" in a.name for a in schema.arguments)
    generator = any(base_name(a.type) == "Generator" for a in schema.arguments)
    if op.random or not (generator or "rand" in schema.op_name or (dropout and "backward" not in schema.op_name)):
        return
    why = "a Generator argument" if generator else "'rand' in its name" if "rand" in schema.op_name else "'dropout'"
    raise _Refusal(f"{where}: torchgen requires the nondeterministic_seeded tag of an op with {why} "
                   "(\"nondeterministic_seeded tag missing\")", f"add it: `tags: [{RANDOM_TAG}]`", "schema")


def _kind(op: OpSpec, where: str) -> str:
    schema = op.schema
    mutated = schema.mutated_args
    if "out" in op.tags:
        raise _Refusal(f"{where}.tags: out= variants are not generated for op-plugin",
                       "remove `tags: [out]`; write a functional or in-place op", "tags")
    if schema.name.endswith("_"):
        first = schema.arguments[0] if schema.arguments else None
        returns_self = (len(schema.returns) == 1 and schema.returns[0].alias is not None
                        and schema.returns[0].alias.is_write)
        if (first is None or not first.is_write or len(mutated) != 1 or not returns_self
                or schema.arguments[0].name != "self"):
            raise _Refusal(
                f"{where}.schema: '{schema.op_name}' ends in '_', so torchgen pairs it as an in-place op with "
                f"'{schema.name[:-1]}'; an in-place op mutates only its first argument `self` and returns it",
                f"write '{schema.name}(Tensor(a!) self, ...) -> Tensor(a!)' with `tags: [inplace]`, or drop the "
                f"trailing '_' to make it a mutable op paired with '{schema.name.rstrip('_')}_functional'", "schema")
        return "inplace"
    if "inplace" in op.tags:
        raise _Refusal(f"{where}.tags: torchgen recognises in-place ops by a trailing '_' in the name",
                       f"rename the op to '{schema.name}_'", "tags")
    if schema.name.endswith("_functional") and mutated:
        raise _Refusal(f"{where}.schema: '{schema.op_name}' is named as a functional twin but mutates "
                       f"{', '.join(a.name for a in mutated)}", "drop the `(a!)` annotations or rename the op", "schema")
    return "mutable" if mutated else "functional"


def _entry(op: OpSpec, kind: str, config: OpPluginSpec, where: str) -> PluginOp:
    schema = replace(op.schema, namespace=None, spans=op.schema.spans)
    outputs = tuple(out for out in op.outputs if out.returns_argument is None)
    kernel = config.kernel or _default_kernel(op.schema, outputs)  # an explicit gen_opapi was checked at load
    aclnn = config.aclnn or ("aclnnInplace" if kind == "inplace" else "aclnn") + camel(op.schema.name)
    exec_args = config.exec_args or (tuple(a.name for a in op.schema.arguments) + tuple(o.name for o in outputs))
    if kernel == "opapi" and config.new_params:
        raise _Refusal(f"{where}.op_plugin.new_params is a gen_opapi key",
                       "with `kernel: opapi` write the locals in the kernel file", "op_plugin", "new_params")
    taken = {a.name for a in schema.arguments} | {o.name for o in outputs} | {n for n, _ in config.new_params}
    try:
        converted = conversions(schema, exec_args, config.none_values, taken, _dtype_code_arguments(op.outputs))
    except ConversionError as error:
        keys = ("op_plugin", "exec", config.exec_args.index(error.argument)) if config.exec_args else ("schema",)
        raise _Refusal(f"{where}: {error.message}", error.hint, *keys) from None
    return PluginOp(schema, kind, op, outputs, config, aclnn, exec_args, kernel, conversions=converted)


def _dtype_code_arguments(outputs) -> frozenset[str]:
    """The arguments the output rules read as dtype codes (`from_code(dst_type)`)."""
    from ..spec.semantics_ir import FromCode, Name

    return frozenset(node.code.name for out in outputs for rule in out.rules for node in rule.node.walk()
                     if isinstance(node, FromCode) and isinstance(node.code, Name) and not node.code.output)


def _default_kernel(schema: Schema, outputs) -> str:
    """gen_opapi when torchnpugen can write the kernel and every size reads as op-plugin writes sizes (an
    input, a brace list, an op_infer helper); else a kernel file."""
    if gen_opapi_problem(schema) is not None:
        return "opapi"
    tensors = [a.name for a in schema.arguments if strip_alias(a.type) == BaseType("Tensor")]
    return "gen_opapi" if all(repo_size(out.shape_rule, tensors) for out in outputs) else "opapi"


def _twin_schema(schema: Schema, kind: str) -> Schema:
    """foo_ -> foo (returns a fresh self); mutable foo -> foo_functional (outputs, then the mutated args)."""
    plain = tuple(Argument(strip_alias(a.type), a.name, a.default, a.has_default, a.kwarg_only)
                  for a in schema.arguments)
    if kind == "inplace":
        text = replace(schema, name=schema.name[:-1], arguments=plain, returns=(Return(BaseType("Tensor")),),
                       namespace=None, returns_tuple=False, spans={}).signature()
    else:
        returns = tuple(Return(strip_alias(r.type)) for r in schema.returns if r.alias is None)
        returns += tuple(Return(BaseType("Tensor")) for _ in schema.mutated_args)
        text = replace(schema, name=schema.name + "_functional", arguments=plain, returns=returns, namespace=None,
                       returns_tuple=len(returns) > 1, spans={}).signature()
    return parse_schema(text)  # canonical form, with spans of its own


def _twin(entry: PluginOp, schema: Schema) -> PluginOp:
    from ..spec.semantics import parse_dtype, parse_shape

    cloned = tuple(a.name for a in entry.schema.mutated_args)
    outputs = [] if entry.kind == "inplace" else list(entry.outputs)
    for name in cloned:
        # the copy of a mutated argument has its shape and dtype
        outputs.append(OutputSpec(f"{name}_out", len(outputs), parse_shape(f"{name}.shape", schema),
                                  parse_dtype(f"{name}.dtype", schema)))
    return PluginOp(schema, "functional", entry.source, tuple(outputs), entry.config, entry.aclnn, entry.exec_args,
                    "opapi", twin_of=entry.name, cloned=cloned, conversions=entry.conversions)


def _check_pairing(op: OpSpec, given: OpSpec, expected: Schema) -> None:
    """A twin written in the spec must be the one torchgen pairs: same arguments, and returns counted by
    the rule #mutated + #non-aliased returns of the mutating op."""
    mutating = op.schema
    want = len(expected.returns)
    got = len(given.schema.returns)
    same_args = [(str(strip_alias(a.type)), a.name, a.kwarg_only) for a in given.schema.arguments] == [
        (str(a.type), a.name, a.kwarg_only) for a in expected.arguments]
    if got != want or not same_args:
        rule = (f"{len(mutating.mutated_args)} mutated argument(s) + "
                f"{sum(1 for r in mutating.returns if r.alias is None)} non-aliased return(s) of {mutating.op_name}")
        raise _Refusal(
            f"ops[{given.index}] '{given.schema.op_name}' does not pair with ops[{op.index}] "
            f"'{mutating.op_name}' as torchgen's functionalization requires: it must take the same arguments "
            f"without (a!) and return {rule} = {want} tensor(s); it takes "
            f"({', '.join(str(a) for a in given.schema.arguments)}) and returns {got}",
            f"write it as '{expected.signature()}', or remove ops[{given.index}] and let opgen write the twin")

