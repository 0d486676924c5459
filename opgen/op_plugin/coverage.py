"""`opgen meta-coverage`: which op-plugin `custom:` ops have no Meta/fake function registered.

Registrations are found with `ast` (nothing is imported): `@impl(m, "npu_x")`, `m.impl("npu_x", fn, "Meta")`,
`@register_fake("npu::npu_x")`, `register_meta_if_necessary("npu", "npu_x", ...)` and the like: any call
of a function named impl / register_fake / register_meta* / impl_abstract with the op's name as a string
argument. An op `name.overload` is covered by a registration of `name.overload` (or of `name` when it
has no overload), as the dispatcher resolves them.

`--emit` turns simple `gen_opapi` size/dtype C++ back into the semantics language (an input name, a
`{a, b.size(1)}` list, `x.sizes()`, `x.size(i)`, `x.dim()`, integer arithmetic; `at::kFloat`, an input
name, `x.scalar_type()`) and prints Meta functions from it; anything else stays a TODO with the reason.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import click

from ..errors import OpgenError
from ..files import read_input

REGISTRATION_FUNCTIONS = re.compile(r"(impl|register_fake|register_meta\w*|impl_abstract|_register_fake)\Z")
YAML_IN_ROOT = "op_plugin/config/op_plugin_functions.yaml"
META_IN_ROOT = ("op_plugin/python/meta/_meta_registrations.py", "op_plugin/python/meta/_fake_registrations.py")
CPP_DTYPES = {"at::kFloat": "float32", "at::kHalf": "float16", "at::kBFloat16": "bfloat16", "at::kDouble": "float64",
              "at::kLong": "int64", "at::kInt": "int32", "at::kShort": "int16", "at::kChar": "int8",
              "at::kByte": "uint8", "at::kBool": "bool"}


@dataclass(frozen=True)
class Entry:
    func: str
    name: str  # name.overload
    gen_opapi: dict | None


def load_entries(path: Path) -> list[Entry]:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    text = read_input(str(path), "YAML file")
    try:
        data = yaml.load(text, Loader=loader)
    except yaml.YAMLError as error:
        raise OpgenError(f"{path} is not valid YAML: {error}") from None
    if not isinstance(data, dict) or not isinstance(data.get("custom"), list):
        raise OpgenError(f"{path} has no `custom:` list", hint="give op-plugin's op_plugin_functions.yaml (or a "
                         "merged npu_native_functions*.yaml)")
    entries = []
    for item in data["custom"]:
        if isinstance(item, dict) and isinstance(item.get("func"), str):
            head = item["func"].split("(", 1)[0].strip()
            gen = item.get("gen_opapi") if isinstance(item.get("gen_opapi"), dict) else None
            entries.append(Entry(item["func"], head, gen))
    return entries


def registered_names(path: Path) -> set[str]:
    """Op names (`name` or `name.overload`, namespace dropped) with a Meta/fake registration in `path`."""
    text = read_input(str(path), "Meta file")
    try:
        tree = ast.parse(text, filename=str(path))
    except SyntaxError as error:
        raise OpgenError(f"{path}:{error.lineno}: not valid Python: {error.msg}") from None
    except (RecursionError, MemoryError):
        raise OpgenError(f"{path}: nested too deeply for Python's parser", hint="is this the right file?") from None
    names = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        callee = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if not REGISTRATION_FUNCTIONS.match(callee):
            continue
        for arg in node.args[:3]:
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value not in ("Meta", "npu"):
                names.add(arg.value.split("::", 1)[-1])
    return names


def covered(entry: Entry, names: set[str]) -> bool:
    return entry.name in names or ("." not in entry.name and f"{entry.name}.default" in names)


# --- gen_opapi C++ -> semantics ---------------------------------------------------------------------

_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_]\w*(?:::\w+)*)|(\.sizes\(\)|\.size\(|\.dim\(\)|[{}(),+\-*]))")


def cpp_size_to_rule(text: str, tensors: set[str], ints: set[str]) -> str:
    """A gen_opapi `size:` in the semantics language, or raise ValueError with the reason."""
    text = str(text).strip()
    if text in tensors:
        return f"{text}.shape"
    out, position = [], 0
    while position < len(text):
        match = _TOKEN.match(text, position)
        if not match or match.end() == position:
            raise ValueError(f"cannot read {text[position:]!r}")
        number, name, symbol = match.groups()
        position = match.end()
        if number:
            out.append(number)
        elif name:
            if name not in tensors and name not in ints:
                raise ValueError(f"{name!r} is not an input tensor or int argument (a helper function?)")
            out.append(name)
        else:
            out.append({"{": "[", "}": "]", ".sizes()": ".shape", ",": ", ", "+": " + ", "-": " - ",
                        "*": " * "}.get(symbol, symbol))
    rule = "".join(out)
    if not rule.startswith("[") and not rule.endswith(".shape"):
        raise ValueError("not a list of sizes")
    return rule


def cpp_dtype_to_rule(text: str, tensors: set[str]) -> str:
    text = str(text).strip()
    if text in tensors:
        return f"{text}.dtype"
    if text in CPP_DTYPES:
        return CPP_DTYPES[text]
    match = re.fullmatch(r"([A-Za-z_]\w*)\.scalar_type\(\)", text)
    if match and match.group(1) in tensors:
        return f"{match.group(1)}.dtype"
    raise ValueError(f"cannot read dtype {text!r}")


def emit_meta(entry: Entry) -> tuple[str | None, str]:
    """(Meta function source, "") for a simple gen_opapi entry, else (None, reason)."""
    from ..schema.model import BaseType, strip_alias
    from ..schema.parser import parse_schema
    from ..spec.model import OpSpec, OutputSpec
    from ..spec.semantics import SemanticsError, parse_dtype, parse_shape
    from .render import meta_source

    if entry.gen_opapi is None:
        return None, "no gen_opapi block: the output sizes live in a hand-written kernel"
    try:
        schema = parse_schema(entry.func)
    except OpgenError as error:
        return None, f"schema: {error.message}"
    if schema.is_mutable or not schema.returns:
        return None, "mutating or returns nothing"
    if any(strip_alias(r.type) != BaseType("Tensor") for r in schema.returns):
        return None, "returns something other than Tensors"
    tensors = {a.name for a in schema.arguments if strip_alias(a.type) == BaseType("Tensor")}
    ints = {a.name for a in schema.arguments if strip_alias(a.type) in (BaseType("int"), BaseType("SymInt"))}
    results = [key for key in entry.gen_opapi if key not in ("exec", "new_params", "structured_inherit",
                                                               "integral_identity_tensor", "cpu_scalar_h2d",
                                                               "cpu_scalar_op")]
    if len(results) != len(schema.returns):
        return None, f"{len(results)} gen_opapi results for {len(schema.returns)} returns"
    outputs = []
    for index, key in enumerate(results):
        info = entry.gen_opapi[key]
        if not isinstance(info, dict) or "size" not in info or "dtype" not in info:
            return None, f"gen_opapi.{key} has no size and dtype"
        try:
            shape = parse_shape(cpp_size_to_rule(info["size"], tensors, ints), schema)
            dtype = parse_dtype(cpp_dtype_to_rule(info["dtype"], tensors), schema)
        except (ValueError, SemanticsError) as error:
            return None, f"gen_opapi.{key}: {getattr(error, 'message', error)}"
        outputs.append(OutputSpec(f"out{index}", index, shape, dtype))
    op = OpSpec(0, schema, "", tuple(outputs), None, ())
    return meta_source(schema, op), ""


# --- command ---------------------------------------------------------------------------------------


@click.command("meta-coverage")
@click.argument("source", metavar="ROOT|YAML", type=click.Path(exists=True))
@click.option("--meta", "meta_files", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="A Python file with Meta/fake registrations (repeatable; default: op-plugin's meta files "
              "under ROOT).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object: total, covered, missing, emittable.")
@click.option("--emit", is_flag=True, help="Print Meta functions for the missing gen_opapi ops whose size/dtype "
              "C++ is simple; the rest as TODO comments with the reason.")
def meta_coverage(source: str, meta_files: tuple[str, ...], as_json: bool, emit: bool) -> None:
    """Which `custom:` ops of op_plugin_functions.yaml have no Meta/fake registered in the given files.

    \b
    opgen meta-coverage ~/op-plugin
    opgen meta-coverage op_plugin_functions.yaml --meta _meta_registrations.py --meta _fake_registrations.py --json
    Exit codes: 0 every op is covered, 1 some are missing, 2 bad input, 3 the machine refused.
    """
    from ..console import handle_errors

    sys.exit(handle_errors(run_meta_coverage)(source, meta_files, as_json, emit))


def run_meta_coverage(source: str, meta_files: tuple[str, ...], as_json: bool, emit: bool) -> int:
    yaml_path, metas = _inputs(Path(source), meta_files)
    entries = load_entries(yaml_path)
    names: set[str] = set()
    for path in metas:
        names |= registered_names(path)
    missing_entries = [e for e in entries if not covered(e, names)]
    emitted = {e.name: emit_meta(e) for e in missing_entries}
    if emit:
        click.echo(emitted_module(emitted))
    elif as_json:
        click.echo(json.dumps({"total": len({e.name for e in entries}),
                               "covered": sorted({e.name for e in entries if covered(e, names)}),
                               "missing": sorted(emitted), "emittable": _emittable(emitted)}))
    else:
        click.echo(_report(emitted, len({e.name for e in entries}), len(metas)))
    return 1 if missing_entries else 0


def _inputs(root: Path, meta_files: tuple[str, ...]) -> tuple[Path, list[Path]]:
    """The YAML to read and the Meta files to look in (op-plugin's own under a checkout)."""
    yaml_path = root / YAML_IN_ROOT if root.is_dir() else root
    if root.is_dir() and not yaml_path.is_file():
        raise OpgenError(f"{root} has no {YAML_IN_ROOT}", hint="give an op-plugin checkout or the YAML file itself")
    metas = [Path(m) for m in meta_files] or ([root / m for m in META_IN_ROOT if (root / m).is_file()]
                                              if root.is_dir() else [])
    if not metas:
        raise OpgenError("no Meta files to look in", hint="pass --meta FILE (repeatable)")
    return yaml_path, metas


def _emittable(emitted: dict[str, tuple[str | None, str]]) -> list[str]:
    return sorted(name for name, (code, _) in emitted.items() if code is not None)


def _report(emitted: dict[str, tuple[str | None, str]], total: int, meta_count: int) -> str:
    lines = [f"{'op':<56} status"]
    for name in sorted(emitted):
        code, reason = emitted[name]
        lines.append(f"{name:<56} missing ({'emittable' if code else reason})")
    lines.append(f"{len(emitted)} of {total} custom ops have no Meta/fake registration "
                 f"({len(_emittable(emitted))} emittable with --emit); {meta_count} Meta file(s) read")
    return "\n".join(lines)


def emitted_module(emitted: dict[str, tuple[str | None, str]]) -> str:
    lines = ['"""Meta functions emitted by `opgen meta-coverage --emit` from gen_opapi size/dtype C++."""', "",
             "import torch", "from torch.library import Library, impl", "", 'm = Library("npu", "IMPL", "Meta")']
    for name in sorted(emitted):
        code, reason = emitted[name]
        lines += ["", ""]
        lines += [code] if code else [f"# TODO {name}: {reason}"]
    return "\n".join(lines) + "\n"
