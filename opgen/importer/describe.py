"""One op of the package, described for its spec: torch's schema, tags and kernel devices, examples the fake
accepts, each output's shape and dtype rule derived from the fake (or why not), and where the rules and the
package's fake and kernel disagree on the tests' input variants."""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from ..check.worker import _error_info, _full_name
from ..errors import OpgenError
from ..schema import parse_schema
from ..schema.model import BaseType, EnumWord, ListType, strip_alias
from ..spec.model import TAGS, TensorValue
from . import dtypes, examples, symbolic
from .sources import OpSource

REGISTRY_DEVICES = (("PrivateUse1", "npu"), ("CUDA", "cuda"), ("CPU", "cpu"))
NO_INPUTS = "no inputs the fake accepts: give them with --inputs FILE (opgen check's format)"


def describe(overload, given, source: OpSource) -> dict:
    name = _full_name(overload)
    text = str(overload._schema)
    record = {"name": name, "namespace": name.split("::")[0], "schema": text.split("::", 1)[1],
              "where": source.where, "style": source.style, "devices": sorted(_devices(name, source)),
              "tags": [t.name for t in overload.tags if t.name in TAGS], "outputs": [], "examples": [],
              "examples_from": "", "problems": [], "disagreements": []}
    try:
        schema = parse_schema(text)
    except OpgenError as error:
        record["problems"].append({"kind": "schema", "message": f"opgen cannot express its schema `{text}`: "
                                   f"{error.message}" + (f" ({error.hint})" if error.hint else "")})
        return record
    found = list(given or ())
    record["examples_from"] = "inputs" if found else ""
    if not found:
        accepted = examples.accepted(examples.candidates(schema), lambda e: _accepts(overload, e))
        found = [accepted] if accepted is not None else []
        record["examples_from"] = "derived" if found else ""
    record["examples"] = [_example_json(example) for example in found]
    outputs = _describable(schema, record["tags"])
    if not found:
        record["outputs"] = [{"name": n, "todo": {"shape": NO_INPUTS, "dtype": NO_INPUTS}} for n in outputs]
        return record
    record["outputs"] = _derive(overload, schema, outputs, examples.make_call(found[0]), record["problems"])
    from .compare import disagreements

    record["disagreements"] = disagreements(overload, record, found)
    return record


def _devices(name: str, source: OpSource) -> set:
    found = set(source.devices)
    for key, device in REGISTRY_DEVICES:
        try:
            if torch._C._dispatch_has_kernel_for_dispatch_key(name, key):
                found.add(device)
        except RuntimeError:
            continue
    return found


def _describable(schema, tags: list[str]) -> dict[str, str]:
    """{output name: "" (a Tensor: derive it) or the reason it is left to a hand-written fake}; an aliased return of
    a Tag.inplace/out op is the argument itself, nothing to describe."""
    found = {}
    for name, ret in zip(schema.return_names, schema.returns, strict=True):
        if ret.alias is not None and any(t in ("inplace", "out") for t in tags):
            continue
        base = strip_alias(ret.type)
        found[name] = "" if base == BaseType("Tensor") else (
            "a Tensor[] return: write its `length:` and element rules by hand" if base == ListType(BaseType("Tensor"))
            else f"a {ret.type} return: the semantics language describes tensors; opgen new writes a TODO fake")
    return found


def run_fake(overload, call: dict) -> list:
    """The fake's outputs on `call` (static sizes), one entry per return."""
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        fake = {name: _map(mode.from_tensor, value) for name, value in call.items()}
        return _returns(overload, overload(**fake)), fake


def _accepts(overload, example) -> bool:
    try:
        run_fake(overload, examples.make_call(example))
        return True
    except Exception:  # noqa: BLE001  (the fake refuses it: try the next)
        return False


def _derive(overload, schema, outputs: dict[str, str], call: dict, problems: list) -> list[dict]:
    found = [{"name": name, "todo": {"shape": reason, "dtype": reason} if reason else {}}
             for name, reason in outputs.items()]
    try:
        static, fake_inputs = run_fake(overload, call)
    except Exception as error:  # noqa: BLE001
        reason = _raised("the fake raises on the example", error)
        problems.append({"kind": "fake-raised", "message": reason})
        for out in found:
            out["todo"] = {"shape": reason, "dtype": reason}
        return found
    for index, value in enumerate(static):
        if any(value is tensor for tensor in _tensors(fake_inputs)):
            problems.append({"kind": "fake-returns-input", "message": f"the fake returns an input tensor itself as "
                             f"{schema.return_names[index]}: a fake must return new tensors (likely a fake bug)"})
    shapes = _shapes(overload, call, len(static))
    rules = dtypes.dtype_rules(lambda trial: run_fake(overload, trial)[0], call, len(static))
    index_of = {name: i for i, name in enumerate(schema.return_names)}
    for out in found:
        if out["todo"]:
            continue
        shape, dtype = shapes[index_of[out["name"]]], rules[index_of[out["name"]]]
        for key, (rule, reason) in (("shape", shape), ("dtype", dtype)):
            if rule:
                out[key] = rule
            else:
                out["todo"][key] = reason
    return found


def _shapes(overload, call: dict, count: int) -> list[tuple[str | None, str]]:
    mode, env = symbolic.fake_mode()
    try:
        with mode:
            fake, names = symbolic.symbolic_call(mode, call)
            outputs = _returns(overload, overload(**fake))
    except Exception as error:  # noqa: BLE001
        return [(None, _raised("the fake raises under symbolic sizes", error))] * count
    ranks = {name: value.dim() for name, value in call.items() if isinstance(value, torch.Tensor)}
    found = []
    for value in outputs:
        if not isinstance(value, torch.Tensor):
            found.append((None, "not a tensor"))
            continue
        try:
            found.append((symbolic.shape_text(value.shape, env, names, ranks), ""))
        except symbolic.Unexpressible as limit:
            found.append((None, str(limit)))
    return found


def _raised(what: str, error: BaseException) -> str:
    info = _error_info(error)
    message = info["message"].strip().splitlines()[0] if info["message"].strip() else ""
    return f"{what}: {info['type']}: {message[:200]}" + (f" ({info['where']})" if info.get("where") else "")


def _returns(overload, result) -> list:
    if len(overload._schema.returns) == 1:
        return [result]
    return list(result) if isinstance(result, (tuple, list)) else []


def _map(fn, value):
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, (list, tuple)):
        return [_map(fn, v) for v in value]
    return value


def _tensors(call: dict) -> list:
    found = []
    for value in call.values():
        found += [v for v in (value if isinstance(value, list) else [value]) if isinstance(v, torch.Tensor)]
    return found


def _example_json(example) -> dict:
    return {name: _value_json(value) for name, value in example.values.items()}


def _value_json(value):
    if isinstance(value, TensorValue):
        if value.values is not None:
            return {"values": _value_json(value.values), "dtype": value.dtype}
        return {"shape": list(value.shape), "dtype": value.dtype}
    if isinstance(value, EnumWord):
        return value.word
    if isinstance(value, tuple):
        return [_value_json(v) for v in value]
    return value
