"""`opgen add --op-plugin-root ROOT SPEC`: insert a spec's contribution into an op-plugin checkout.

What `opgen new --target op_plugin` writes as fragments goes into the existing files in place:
- op_plugin_functions.yaml (and derivatives.yaml): ruamel.yaml's round-trip loader reads the file
  (comments kept) to find the `custom:` (`backward:`) list, where its last entry ends, its indentation
  and every op already there; the new entries are inserted as text after that entry, so not one other
  byte changes, and the result is read again by ruamel to check it holds exactly the old entries plus
  the new ones.
- _meta_registrations.py: libcst inserts the Meta functions after the last `@impl(m, ...)` function
  and adds `import torch` / `from torch.library import Library, impl` only when missing.
- _op_plugin_docs.py gets the `_add_torch_npu_docstr` calls appended; kernels and tests are new files.
Everything is computed and checked before the first write; an op that already exists (in the YAML or
with a Meta registration) is refused with where it is, unless the very same contribution is already
there, in which case nothing changes (a second run is a no-op).
"""

from __future__ import annotations

import difflib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import click

from ..errors import OpgenError, os_error
from ..files import read_input

FUNCTIONS_YAML = "op_plugin/config/op_plugin_functions.yaml"
DERIVATIVES_YAML = "op_plugin/config/derivatives.yaml"
META_PY = "op_plugin/python/meta/_meta_registrations.py"
DOCS_PY = "codegen/templates/_op_plugin_docs.py"
EXTRA_HINT = "install the op_plugin extra: pip install 'opgen[op_plugin]' (ruamel.yaml and libcst)"


class AddError(OpgenError):
    """The contribution cannot be inserted; nothing was written."""


@dataclass
class Change:
    path: str  # relative to ROOT
    old: str | None  # None: a new file
    new: str


def _require_extra():
    try:
        import libcst
        from ruamel.yaml import YAML
    except ImportError as error:
        raise AddError(f"opgen add needs {error.name}, which is not installed", hint=EXTRA_HINT) from None
    return YAML, libcst


# --- YAML: find with ruamel, insert as text ----------------------------------------------------------


def _load_rt(text: str, path: str):
    YAML, _ = _require_extra()
    from ruamel.yaml.error import YAMLError

    from ..spec.nodes import TooDeep, bounded_composer

    yaml = YAML(typ="rt")
    yaml.Composer = bounded_composer(yaml.Composer)
    yaml.Scanner = bounded_composer(yaml.Scanner)
    try:
        return yaml.load(text)
    except TooDeep as error:
        mark = error.problem_mark
        raise AddError(f"{path}:{mark.line + 1}:{mark.column + 1}: {error.problem}",
                       hint="an op-plugin YAML file nests a few levels; is this the right file?") from None
    except YAMLError as error:
        raise AddError(f"{path}: cannot read it as YAML: {error}") from None


def _section(data, path: str, section: str, entry: str):
    """The top-level list `section` of a loaded file, refused (at its line) when it is not a list of mappings."""
    if not hasattr(data, "get") or section not in data:
        raise AddError(f"{path} has no top-level `{section}:`", hint="is ROOT an op-plugin checkout?")
    seq = data[section]
    line = data.lc.key(section)[0] + 1
    if seq is not None and not isinstance(seq, list):
        raise AddError(f"{path}:{line}: `{section}:` must be a list of entries, not {type(seq).__name__} {seq!r:.40}",
                       hint=f"each entry is a `- {entry}: ...` line")
    for index, item in enumerate(seq or []):
        if not hasattr(item, "get"):
            raise AddError(f"{path}:{seq.lc.item(index)[0] + 1}: entry {index} of `{section}:` is not a mapping "
                           f"({item!r:.40})", hint=f"each entry is a `- {entry}: ...` line")
    return seq


def _entry_names(seq, key: str) -> dict[str, int]:
    """Op name -> 1-based line of each entry of a ruamel sequence of mappings with a schema under `key`."""
    names = {}
    for index, item in enumerate(seq or []):
        if hasattr(item, "get") and isinstance(item.get(key), str):
            names[item[key].split("(", 1)[0].strip()] = seq.lc.item(index)[0] + 1
    return names


def insert_entries(text: str, path: str, section: str, entry_lines: list[str], key: str) -> str | None:
    """`text` with `entry_lines` (written for `  - key: ...`) appended to the top-level list `section`;
    None when exactly these entries are there already. Refuses an op of the same name."""
    data = _load_rt(text, path)
    seq = _section(data, path, section, key)
    block = "\n".join(entry_lines)
    lines = text.split("\n")  # a CRLF file keeps its "\r" on every line, and the new lines get one too
    carriage = "\r" if "\r\n" in text else ""
    dash = _indent(lines[seq.lc.item(0)[0]]) if seq else 2  # the column of the entries' `-`
    ours = [line + carriage for line in _reindent(entry_lines, dash)]
    ours_text = "\n".join(ours)
    existing = _entry_names(seq, key)
    new_names = [line.split(f"- {key}:", 1)[1].strip().strip('"').split("(", 1)[0].strip()
                 for line in entry_lines if line.lstrip().startswith(f"- {key}:")]
    if ours_text in text:
        return None
    clashes = [f"{name} ({path}:{existing[name]})" for name in new_names if name in existing]
    if clashes:
        raise AddError(f"already in op-plugin: {', '.join(clashes)}", hint="remove the op from the spec (or from "
                       "the file) first; opgen add never replaces an existing entry")
    if seq:
        last = len(seq) - 1
        start = seq.lc.item(last)[0]
        end = start
        for number in range(start + 1, len(lines)):
            stripped = lines[number].strip()
            if not stripped or stripped.startswith("#"):
                continue
            if _indent(lines[number]) <= dash:
                break
            end = number
        new_lines = lines[:end + 1] + ours + lines[end + 1:]
    else:
        header = data.lc.key(section)[0]
        head = lines[header].split("#", 1)[0].rstrip()
        if head.endswith("[]"):
            lines[header] = lines[header].replace("[]", "", 1).rstrip() + carriage
        new_lines = lines[:header + 1] + ours + lines[header + 1:]
    result = "\n".join(new_lines)
    check = _load_rt(result, path)
    got = [str(item.get(key)) for item in (check[section] or [])]
    want = [str(item.get(key)) for item in (seq or [])] + [
        str(item.get(key)) for item in _load_rt(f"{section}:\n" + block, path)[section]]
    if got != want:  # cannot happen for a file ruamel read: belt and braces before anything is written
        raise AddError(f"{path}: inserting the entries would not give the expected `{section}` list",
                       hint="please report this file's layout to opgen")
    return result


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _reindent(lines: list[str], dash: int) -> list[str]:
    shift = dash - 2
    if shift >= 0:
        return [" " * shift + line for line in lines]
    return [line[-shift:] if line.startswith(" " * -shift) else line.lstrip(" ") for line in lines]


# --- Python files: libcst ----------------------------------------------------------------------------


def insert_meta(text: str, path: str, functions: list[str], names: list[str]) -> str | None:
    """`text` with the Meta `functions` after the last `@impl(m, ...)` function (imports added when missing);
    None when they are all there already. Refuses an op that has a registration."""
    from .coverage import registered_names

    _, libcst = _require_extra()
    newline = "\r\n" if "\r\n" in text else "\n"
    if all(function.replace("\n", newline) in text for function in functions):
        return None
    try:
        module = libcst.parse_module(text)
    except libcst.ParserSyntaxError as error:
        raise AddError(f"{path}:{error.raw_line}: not valid Python: {error.message}") from None
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False, encoding="utf-8") as handle:
        handle.write(text)
    try:
        registered = registered_names(Path(handle.name))
    finally:
        os.unlink(handle.name)
    clashes = [name for name in names if name in registered]
    if clashes:
        lines = {name: _line_of(text, name) for name in clashes}
        raise AddError("already registered: " + ", ".join(f"{n} ({path}:{lines[n]})" for n in clashes),
                       hint="remove the op from the spec; opgen add never replaces a Meta function")
    body = list(module.body)
    last = None
    for index, statement in enumerate(body):
        if isinstance(statement, libcst.FunctionDef) and any(_is_impl_m(d.decorator) for d in statement.decorators):
            last = index
    new_statements = [libcst.parse_statement(f + "\n") for f in functions]
    new_statements = [s.with_changes(leading_lines=[libcst.EmptyLine(), libcst.EmptyLine()]) for s in new_statements]
    position = (last + 1) if last is not None else len(body)
    body[position:position] = new_statements
    module = module.with_changes(body=body)
    imports = _missing_imports(module, libcst)
    if imports:
        statements = [libcst.parse_statement(line + "\n") for line in imports]
        body = list(module.body)
        after = max((i for i, s in enumerate(body) if _is_import(s, libcst)), default=-1) + 1
        body[after:after] = statements
        module = module.with_changes(body=body)
    return module.code


def _line_of(text: str, name: str) -> int:
    for number, line in enumerate(text.splitlines(), 1):
        if f'"{name}"' in line or f"'{name}'" in line or f'::{name}"' in line:
            return number
    return 0


def _is_impl_m(decorator) -> bool:
    import libcst

    return (isinstance(decorator, libcst.Call) and isinstance(decorator.func, libcst.Name)
            and decorator.func.value == "impl" and decorator.args and isinstance(decorator.args[0].value, libcst.Name)
            and decorator.args[0].value.value == "m")


def _is_import(statement, libcst) -> bool:
    return isinstance(statement, libcst.SimpleStatementLine) and all(
        isinstance(s, (libcst.Import, libcst.ImportFrom)) for s in statement.body)


def _missing_imports(module, libcst) -> list[str]:
    code = "\n".join(module.code_for_node(s) for s in module.body if _is_import(s, libcst))
    missing = []
    if "import torch\n" not in code + "\n":
        missing.append("import torch")
    names = [n for n in ("Library", "impl")
             if not any("from torch.library import" in line and n in line for line in code.splitlines())]
    if names:
        missing.append(f"from torch.library import {', '.join(names)}")
    return missing


def append_calls(text: str, path: str, calls: list[str]) -> str | None:
    _, libcst = _require_extra()
    if all(call.replace("\n", "\r\n" if "\r\n" in text else "\n") in text for call in calls):
        return None
    try:
        libcst.parse_module(text)
    except libcst.ParserSyntaxError as error:
        raise AddError(f"{path}:{error.raw_line}: not valid Python: {error.message}") from None
    newline = "\r\n" if "\r\n" in text else "\n"
    added = "".join(f"\n\n{call}\n" for call in calls).replace("\n", newline)
    return text.rstrip("\r\n") + newline + added


# --- the command ------------------------------------------------------------------------------------


def plan_add(root: Path, spec) -> list[Change]:
    from .model import plugin_ops
    from .render import derivatives_entry, doc_call, meta_function, render_files, yaml_entry

    entries = plugin_ops(spec)
    changes: list[Change] = []

    def read(relative: str) -> str:
        path = root / relative
        if not path.exists():
            raise AddError(f"{path} does not exist", hint="--op-plugin-root must be an op-plugin checkout "
                           f"(with {FUNCTIONS_YAML} and {META_PY})")
        return read_input(str(path), "op-plugin file")  # line endings as they are (CRLF stays CRLF)

    text = read(FUNCTIONS_YAML)
    new = insert_entries(text, FUNCTIONS_YAML, "custom", [line for e in entries for line in yaml_entry(e)], "func")
    if new is not None:
        changes.append(Change(FUNCTIONS_YAML, text, new))
    derivatives = [line for e in entries for line in derivatives_entry(e)]
    if derivatives:
        text = read(DERIVATIVES_YAML)
        new = insert_entries(text, DERIVATIVES_YAML, "backward", derivatives, "name")
        if new is not None:
            changes.append(Change(DERIVATIVES_YAML, text, new))
    text = read(META_PY)
    new = insert_meta(text, META_PY, [meta_function(e) for e in entries], [e.name for e in entries])
    if new is not None:
        changes.append(Change(META_PY, text, new))
    if (root / DOCS_PY).is_file():
        text = read(DOCS_PY)
        new = append_calls(text, DOCS_PY, [doc_call(e) for e in entries if e.twin_of is None])
        if new is not None:
            changes.append(Change(DOCS_PY, text, new))
    for planned in render_files(spec):
        if planned.owner != "user":  # kernels and tests: whole new files
            continue
        target = root / planned.path
        if target.exists():
            if read_input(str(target), "file") == planned.content:
                continue
            raise AddError(f"{target} already exists", hint="opgen add creates kernel and test files only when "
                           "they are new; move it away or remove the op from the spec")
        changes.append(Change(planned.path, None, planned.content))
    return changes


def diff(changes: list[Change]) -> str:
    out = []
    for change in changes:
        old = [] if change.old is None else change.old.splitlines(keepends=True)
        out.extend(difflib.unified_diff(old, change.new.splitlines(keepends=True),
                                        "/dev/null" if change.old is None else f"a/{change.path}", f"b/{change.path}"))
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in out)


def apply(root: Path, changes: list[Change]) -> None:
    """Stage every file beside its target first (a file replaced keeps its mode), then rename them all into place;
    a failure while staging writes nothing."""
    from ..render.staging import Batch

    batch = Batch()
    try:
        try:
            for change in changes:
                target = root / change.path
                batch.add(target, change.new.encode("utf-8"), executable=None,
                          like=target if target.exists() else None)
            batch.sync()
        except OSError as error:
            raise os_error(error, "write", outcome="nothing was written") from None
        try:
            batch.commit()
        except OSError as error:
            raise os_error(error, "write", outcome="the files written so far are complete; the others are as "
                           "they were") from None
    finally:
        batch.discard()


@click.command("add")
@click.argument("spec_path", metavar="SPEC", type=click.Path(dir_okay=False))
@click.option("--op-plugin-root", "root", required=True, type=click.Path(file_okay=False),
              help="The op-plugin checkout to add the ops to.")
@click.option("--dry-run", is_flag=True, help="Print the changes as a unified diff; write nothing.")
def add(spec_path: str, root: str, dry_run: bool) -> None:
    """Add SPEC's ops to an op-plugin checkout: YAML entries, Meta, docs, kernels, tests.

    \b
    opgen add --op-plugin-root ~/op-plugin examples/op_plugin/rms_norm.yaml --dry-run
    Comments, order and style of the existing files are kept; running it twice changes nothing.
    """
    from ..console import handle_errors

    handle_errors(run_add)(spec_path, root, dry_run)


def run_add(spec_path: str, root: str, dry_run: bool) -> None:
    from ..spec.load import load_spec

    _require_extra()
    root_path = Path(root)
    if not root_path.is_dir():
        raise AddError(f"--op-plugin-root {root} is not a directory")
    spec = load_spec(spec_path)
    changes = plan_add(root_path, spec)
    if not changes:
        click.echo(f"nothing to do: {spec_path}'s ops are already in {root}")
        return
    if dry_run:
        click.echo(diff(changes), nl=False)
        click.echo("dry run: nothing was written", err=True)
        return
    apply(root_path, changes)
    for change in changes:
        click.echo(f"{'create' if change.old is None else 'update':<10} {change.path}")
