"""One op of the package, described for its spec: torch's schema, tags and kernel devices, examples the fake
accepts, each output's shape and dtype rule derived from the fake (or why not), and where the rules and the
package's fake and kernel disagree on the tests' input variants."""

from __future__ import annotations

import re

import torch

from ..check.worker import _full_name
from ..errors import OpgenError
from ..schema import parse_schema
from ..schema.model import BaseType, EnumWord, ListType, strip_alias
from ..spec.model import TAGS, TensorValue
from . import dtypes, examples, generalize, symbolic
from .fakes import raised, returns, run_fake
from .sources import OpSource

REGISTRY_DEVICES = (("PrivateUse1", "npu"), ("CUDA", "cuda"), ("CPU", "cpu"))
MOST_DERIVED = 4  # examples the shape rules are derived on (each at its own ranks)
NO_INPUTS = "no inputs the fake accepts: give them with --inputs FILE (opgen check's format)"


def describe(overload, given, source: OpSource) -> dict:
    name = _full_name(overload)
    text = torch_schema_text(overload)
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
        refused: list[str] = []
        tried = examples.candidates(schema)
        found = examples.telling(tried, lambda e: _accepts(overload, e, refused))
        if not found:
            found = examples.telling(examples.retyped(tried), lambda e: _accepts(overload, e, []))
        if not found and refused:
            record["problems"].append({"kind": "fake-raised", "message": refused[0]})
        record["examples_from"] = "derived" if found else ""
    record["examples"] = [_example_json(example) for example in found]
    outputs = _describable(schema, record["tags"])
    if not found:
        record["outputs"] = [{"name": n, "todo": {"shape": NO_INPUTS, "dtype": NO_INPUTS}} for n in outputs]
        return record
    calls = [examples.make_call(example) for example in found[:MOST_DERIVED]]
    record["outputs"] = _derive(overload, schema, outputs, calls, record["problems"])
    from .compare import disagreements

    try:
        record["disagreements"] = disagreements(overload, record, found)
    except Exception as error:  # noqa: BLE001  (the comparison is a report: its failure costs the report only)
        record["problems"].append({"kind": "compare", "message": raised("comparing the derived rules with the "
                                                                         "fake and the kernel failed", error)})
    return record


def torch_schema_text(overload) -> str:
    """torch's own schema text, in a form torch parses again: an unnamed write (`Tensor! out`, which torch prints
    `Tensor($0! -> )`) gets a letter of its own."""
    text = str(overload._schema)
    taken = set(re.findall(r"\(([a-z])[!|)]", text))
    letters = iter(letter for letter in "abcdefghijklmnopqrstuvwxyz" if letter not in taken)
    return re.sub(r"\(\$\d+!\s*->\s*\)", lambda _match: f"({next(letters)}!)", text)


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


def _accepts(overload, example, refused: list[str]) -> bool:
    try:
        run_fake(overload, examples.make_call(example))
        return True
    except Exception as error:  # noqa: BLE001  (the fake refuses it: try the next)
        if not refused:
            refused.append(raised("the fake raises on every input opgen tried, first", error))
        return False


def _derive(overload, schema, outputs: dict[str, str], calls: list[dict], problems: list) -> list[dict]:
    call = calls[0]
    found = [{"name": name, "todo": {"shape": reason, "dtype": reason} if reason else {}}
             for name, reason in outputs.items()]
    try:
        static, fake_inputs = run_fake(overload, call)
    except Exception as error:  # noqa: BLE001
        reason = raised("the fake raises on the example", error)
        problems.append({"kind": "fake-raised", "message": reason})
        for out in found:
            out["todo"] = {"shape": reason, "dtype": reason}
        return found
    for index, value in enumerate(static):
        aliased = schema.returns[index].alias is not None  # a Tag.inplace/out op returns its argument
        if not aliased and any(value is tensor for tensor in _tensors(fake_inputs)):
            problems.append({"kind": "fake-returns-input", "message": f"the fake returns an input tensor itself as "
                             f"{schema.return_names[index]}: a fake must return new tensors (likely a fake bug)"})
    shapes = _shapes(overload, calls, schema.return_names[:len(static)])
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


def _shapes(overload, calls: list[dict], names_out: tuple) -> list[tuple[str | None, str]]:
    """Per output, (its shape rule, or None and why): derived on each call, then one rule for all of them."""
    per_call, failure = [], ""
    for call in calls:
        found = _symbolic_sizes(overload, call, names_out)
        if isinstance(found, str):
            failure = failure or found
        else:
            per_call.append(found)
    if not per_call:
        return [(None, failure)] * len(names_out)
    rules = []
    for index in range(len(names_out)):
        sizes = [found[index] for found in per_call]
        problem = next((s for s in sizes if isinstance(s, str)), None)
        if problem is not None:
            rules.append((None, problem))
            continue
        rule = generalize.shape_rule(sizes)
        rules.append((rule, "") if rule else (None, "the sizes on the examples fit no one rule opgen can write: "
                                              + "; ".join(f"[{', '.join(s.dims)}]" for s in sizes)))
    return rules


def _symbolic_sizes(overload, call: dict, names_out: tuple):
    """Per output its generalize.Sizes on `call` (or why not, a string); a string alone when the fake raises."""
    try:
        static = [tuple(v.shape) if isinstance(v, torch.Tensor) else None for v in run_fake(overload, call)[0]]
    except Exception as error:  # noqa: BLE001
        return raised("the fake raises on the example", error)
    mode, env = symbolic.fake_mode()
    try:
        with mode:
            fake, names = symbolic.symbolic_call(mode, call)
            outputs = returns(overload, overload(**fake))
    except Exception as error:  # noqa: BLE001
        return raised("the fake raises under symbolic sizes", error)
    ranks, lengths, shapes = {}, {}, {}
    for name, value in call.items():
        if isinstance(value, torch.Tensor):
            ranks[name] = value.dim()
            shapes[name] = tuple(value.shape)
        elif isinstance(value, (list, tuple)) and value and all(isinstance(v, torch.Tensor) for v in value):
            lengths[name] = len(value)
            ranks.update({f"{name}[{i}]": v.dim() for i, v in enumerate(value)})
    found = []
    for index, (out_name, value) in enumerate(zip(names_out, outputs, strict=False)):
        if not isinstance(value, torch.Tensor):
            found.append("not a tensor")
            continue
        out = static[index] if index < len(static) and static[index] is not None and all(
            isinstance(size, int) for size in static[index]) else None
        try:
            found.append(generalize.Sizes(symbolic.sizes_text(value.shape, env, names), ranks, lengths, shapes, out))
        except symbolic.Unexpressible as limit:
            found.append(str(limit))
        symbolic.name_data_dependent(value.shape, names, out_name)  # a later output reads `rows.shape[0]`
    return found


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
