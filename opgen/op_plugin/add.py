"""`opgen add --op-plugin-root ROOT SPEC`: insert a spec's contribution into an op-plugin checkout.

Every file an op-add pull request of op-plugin touches (target.py finds them in the checkout):
op_plugin_functions.yaml (`custom:`) and derivatives.yaml (`backward:`) entries, the Meta function, the
docstring call, the compatibility test's JSON keys, the public-API allowlist (public ops), the fake-tensor
test class, the kernel and test files, and for an exposed op its doc page with the menu and API-list entries.

Each is a piece (pieces.py) edited where it stands, every other byte kept (CRLF files stay CRLF). A second
run changes nothing; after a spec change the pieces opgen wrote are updated in place (record.py says which
ones it wrote), and those the spec no longer asks for are removed. A piece of the same name that opgen did
not write is refused with where it is; one opgen wrote and someone edited since is kept, and the change the
spec would have made is printed. Everything is computed and checked before the first write.
"""

from __future__ import annotations

import difflib
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import click

from ..errors import OpgenError, os_error
from .clangformat import executable
from .pieces import EditError, FileEditor, Piece, line_of
from .target import FUNCTIONS_YAML, META_PY, Target, TargetError

FORMAT_HINT = ("clang-format is not installed: the kernels keep opgen's own layout, not formatted with the checkout's "
               ".clang-format (pip install 'opgen[op_plugin]', or pip install clang-format)")
FRAGMENT_ONLY = ("opgen_checks/",)  # files of `opgen new` that are opgen's own, not part of the contribution


class AddError(OpgenError):
    """The contribution cannot be inserted; nothing was written."""


@dataclass
class Change:
    path: str  # relative to ROOT
    old: str | None  # None: a new file
    new: str | None  # None: the file goes


@dataclass
class Plan:
    changes: list[Change] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    record: dict[str, dict] = field(default_factory=dict)
    record_changed: bool = False
    pending: list[str] = field(default_factory=list)  # pieces edited by hand that the spec's change waits on
    warnings: list[str] = field(default_factory=list)  # what a reviewer would ask for (located in the spec)
    read: dict[str, str | None] = field(default_factory=dict)  # path -> the text the plan was made from (None: absent)
    recorded: dict[str, dict] = field(default_factory=dict)  # the record the plan was made from


def _editors() -> dict:
    from . import faketest
    from .json_edit import AllowlistEditor, MemberEditor
    from .md_edit import MenuEditor, RowEditor
    from .py_edit import ClassEditor, DocstrEditor, MetaEditor
    from .yaml_edit import SectionEditor

    return {"yaml": SectionEditor(), "json": MemberEditor(), "allow": AllowlistEditor(), "meta": MetaEditor(),
            "docstr": DocstrEditor(), "fake": ClassEditor(faketest.IMPORTS), "menu": MenuEditor(),
            "row": RowEditor(), "file": FileEditor()}


# --- what the spec asks for ---------------------------------------------------------------------------


def desired_pieces(spec, target: Target, entries) -> list[Piece]:
    from . import compat, docs, faketest
    from .model import camel
    from .render import (
        by_spec_op,
        derivatives_entry,
        meta_function,
        module_dtype_codes,
        public,
        render_files,
        yaml_entry,
    )

    pieces: list[Piece] = []
    paths = target.paths
    forms = target.op_api_forms()
    allow_sections = _allowlist_sections(target)

    documented: set[str] = set()
    module_codes = module_dtype_codes(target.read_text(paths["meta"]) if "meta" in paths else None)

    def add(role: str, kind: str, key: str, text: str, op: str, section: str = "") -> None:
        if role in paths and not any(p.ident == Piece(paths[role], kind, key, text, op, section).ident for p in pieces):
            pieces.append(Piece(paths[role], kind, key, text, op, section))

    for entry in entries:
        op = entry.source.schema.op_name
        add("functions", "yaml", entry.name, "\n".join(yaml_entry(entry)), op, "custom")
        if derivatives_entry(entry):
            add("derivatives", "yaml", entry.name, "\n".join(derivatives_entry(entry)), op, "backward")
        add("meta", "meta", entry.name, meta_function(entry, module_codes), op)
        if entry.twin_of is None and docs.public_name(entry) not in documented:  # one docstring per torch_npu.<name>
            documented.add(docs.public_name(entry))
            add("docs", "docstr", docs.public_name(entry), docs.doc_call(entry), op)
        members = [compat.func_entry(entry)] + (compat.op_api_entries(entry, forms) if public(entry) else [])
        for key, value in members:
            add("schema_json", "json", key, compat.member_text(key, value), op)
        for section in compat.allowlist_keys(entry, allow_sections) if public(entry) else ():
            add("allowlist", "allow", docs.public_name(entry), f'"{docs.public_name(entry)}"', op, section)
        if entry.config.exposed and entry.twin_of is None:
            add("menu", "menu", docs.public_name(entry), docs.menu_line(entry), op)
            add("api_list", "row", docs.public_name(entry), docs.list_row(entry), op)
    for group in by_spec_op(entries).values():
        name = faketest.class_name(camel(group[0].source.schema.name))
        text = faketest.fake_test_class(name, group, group[0].config.devices)
        if text:
            add("fake_test", "fake", name, text, group[0].source.schema.op_name)
    for planned in render_files(spec, style=target.clang_format):
        if planned.owner == "user" and not planned.path.startswith(FRAGMENT_ONLY):
            pieces.append(Piece(planned.path, "file", planned.path, planned.content, _file_owner(planned.path, spec)))
    return pieces


def _file_owner(path: str, spec) -> str:
    """The spec op a kernel, test or doc page file belongs to."""
    from . import cpp, docs
    from .model import camel

    for op in spec.ops:
        if path in (f"op_plugin/ops/opapi/{camel(op.schema.name)}KernelNpuOpApi.cpp",
                    f"test/test_custom_ops/test_{cpp.stem(op.schema)}.py",
                    f"{docs.PAGES_DIR}/torch_npu-{op.schema.name}.md"):
            return op.schema.op_name
    return ""


def _allowlist_sections(target: Target) -> list[str]:
    from .json_edit import AllowlistEditor

    relative = target.path("allowlist")
    text = target.read_text(relative) if relative else None
    try:
        return AllowlistEditor().sections(text.replace("\r\n", "\n")) if text else []
    except (EditError, ValueError):
        return []


# --- resolving the pieces against the checkout ----------------------------------------------------------


class _Files:
    """The checkout's files as "\n" text, read once; what changed, with each file's line ends restored."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.original: dict[str, str | None] = {}
        self.text: dict[str, str | None] = {}

    def get(self, path: str) -> str | None:
        if path not in self.text:
            raw = self.target.read_text(path)
            self.original[path] = raw
            self.text[path] = None if raw is None else raw.replace("\r\n", "\n")
        return self.text[path]

    def changes(self) -> list[Change]:
        found = []
        for path, text in self.text.items():
            old = self.original[path]
            new = text if text is None or old is None or "\r\n" not in old else text.replace("\n", "\r\n")
            if new != old:
                found.append(Change(path, old, new))
        return found


def plan_add(root: Path, spec) -> Plan:
    from . import record
    from .backward import check_formulas, yaml_ops
    from .model import english_docs, foreign_dtype_codes, plugin_ops

    try:
        target = Target.read(root)
    except TargetError as error:
        raise AddError(str(error), hint=f"--op-plugin-root must be an op-plugin checkout (with {FUNCTIONS_YAML} "
                       f"and {META_PY})") from None
    entries = plugin_ops(spec)
    files = _Files(target)
    check_formulas(spec, entries, yaml_ops(files.get(target.paths["functions"]) or ""))
    plan = Plan(notes=[f"this checkout has no {role_path(role)}: its part of the contribution is left out"
                       for role in target.missing if _needed(role, entries)],
                warnings=foreign_dtype_codes(spec) + (english_docs(spec) if "docs" in target.paths else []))
    if any(entry.kernel == "opapi" for entry in entries) and executable() is None:
        plan.notes.append(FORMAT_HINT)
    recorded = record.load(root)
    plan.record = dict(recorded)
    editors = _editors()
    pieces = desired_pieces(spec, target, entries)
    clashes = []
    for piece in pieces:
        try:
            clash = _resolve(piece, files, editors[piece.kind], recorded.get(piece.ident), plan)
        except EditError as error:
            if error.line is not None:  # the file is wrong there
                raise AddError(f"{piece.path}:{error.line}: {error}") from None
            raise AddError(f"{piece.path}: {error}", hint="opgen add edits op-plugin's own file formats; please "
                           "report this file's layout") from None
        if clash:
            clashes.append(clash)
    if clashes:
        raise AddError(f"already in op-plugin: {', '.join(clashes)}", hint="remove the op from the spec (or from "
                       "the file) first; opgen add replaces only what it wrote itself")
    _drop_unwanted(pieces, {op.schema.op_name for op in spec.ops}, recorded, files, editors, plan)
    plan.changes = files.changes()
    _check_python(plan.changes)
    plan.record_changed = plan.record != recorded
    plan.read, plan.recorded = dict(files.original), recorded
    return plan


def _check_python(changes: list[Change]) -> None:
    """Every Python file still parses (belt and braces: nothing broken is ever written)."""
    import ast

    for change in changes:
        if change.path.endswith(".py") and change.new is not None:
            try:
                ast.parse(change.new)
            except SyntaxError as error:
                raise AddError(f"{change.path}: the edit would leave invalid Python (line {error.lineno}: "
                               f"{error.msg})", hint="please report this spec and file to opgen") from None


def role_path(role: str) -> str:
    from .target import FILES

    return FILES[role]


def _needed(role: str, entries) -> bool:
    from .render import public

    if role in ("allowlist",):
        return any(public(e) for e in entries)
    if role in ("menu", "api_list"):
        return any(e.config.exposed for e in entries)
    if role == "derivatives":
        return any(e.config.backward for e in entries)
    return True


def _resolve(piece: Piece, files: _Files, editor, old: dict | None, plan: Plan) -> str | None:
    """Bring one piece into its file; a clash (a piece of that name opgen did not write) is returned."""
    text = files.get(piece.path)
    if piece.kind != "file" and text is None:
        return None
    span = editor.find(text, piece)
    wanted = editor.fit(text, piece) if hasattr(editor, "fit") else piece.text
    if span is None:
        clash = _registered_elsewhere(piece, text)
        if clash:
            return clash
        files.text[piece.path] = editor.insert(text, piece)
    else:
        current = text[span[0]:span[1]]
        if current != wanted:
            if old is None:
                return (f"{piece.path} already exists" if piece.kind == "file"
                        else f"{piece.key} ({piece.path}:{line_of(text, span[0])})")
            if current in written_texts(old):  # opgen's own text, of this or an earlier spec (a revert, a branch)
                files.text[piece.path] = text[:span[0]] + wanted + text[span[1]:]
            elif not _merged(current, old["text"], wanted):
                plan.notes.append(_kept_note(piece, old["text"], wanted))
                plan.pending.append(piece.ident)
                plan.record[piece.ident] = old  # reported again at every run until the change is merged
                return None
    plan.record[piece.ident] = remember(old, piece.op, wanted)
    return None


HISTORY = 16  # earlier texts of a piece kept in the record: what a revert or another branch may still hold


def written_texts(old: dict) -> list[str]:
    """Every text opgen wrote for a piece: the last, then earlier ones."""
    return [old["text"], *(t for t in old.get("history", ()) if isinstance(t, str))]


def remember(old: dict | None, op: str, text: str) -> dict:
    """The record of a piece now `text`, keeping the texts written before it."""
    earlier = [t for t in written_texts(old) if t != text][:HISTORY] if old else []
    return {"op": op, "text": text, **({"history": earlier} if earlier else {})}


def _merged(current: str, old: str, wanted: str) -> bool:
    """A hand-edited piece holds the spec's change once every line the change adds to opgen's last text is in it."""
    added = [line[2:] for line in difflib.ndiff(old.splitlines(), wanted.splitlines()) if line.startswith("+ ")]
    lines = set(current.splitlines())
    return all(line in lines for line in added)


def _registered_elsewhere(piece: Piece, text: str) -> str | None:
    """A Meta registration of the op in another form (register_fake, m.impl, ...)."""
    if piece.kind != "meta" or (f'"{piece.key}"' not in text and f"'{piece.key}'" not in text
                                and f'::{piece.key}"' not in text):
        return None
    from .coverage import registered_names

    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False, encoding="utf-8") as handle:
        handle.write(text)
    try:
        registered = registered_names(Path(handle.name))
    finally:
        os.unlink(handle.name)
    if piece.key not in registered:
        return None
    line = next((n for n, line in enumerate(text.splitlines(), 1) if f'"{piece.key}"' in line
                 or f"'{piece.key}'" in line or f'::{piece.key}"' in line), 0)
    return f"{piece.key} ({piece.path}:{line})"


def _kept_note(piece: Piece, old: str, new: str) -> str:
    what = piece.path if piece.kind == "file" else f"{piece.key} in {piece.path}"
    patch = "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                         "written by opgen", "the spec now", n=1))
    return f"{what} was edited since opgen add wrote it and is kept; the spec now changes it so:\n{patch}"


def _drop_unwanted(pieces, ops: set[str], recorded, files: _Files, editors, plan: Plan) -> None:
    """Pieces opgen wrote for these ops that the spec no longer asks for: removed where nobody edited them."""
    wanted = {piece.ident for piece in pieces}
    for ident, old in recorded.items():
        if old.get("op") not in ops or ident in wanted:
            continue
        path, kind, section, key = ident.split("::", 3)
        piece, text = Piece(path, kind, key, old["text"], old["op"], section), files.get(path)
        span = editors[kind].find(text, piece) if text is not None else None
        if span is not None and text[span[0]:span[1]] in written_texts(old):
            files.text[path] = editors[kind].remove(text, span)
        elif span is not None and not old.get("retired"):
            plan.notes.append(f"{key} in {path} is no longer part of the spec, but was edited since opgen add "
                              "wrote it: left as it is")
        # kept as retired: a revert or another branch may bring it back, and the next run removes it again
        plan.record[ident] = {**old, "retired": True}


# --- output -------------------------------------------------------------------------------------------------


def diff(changes: list[Change]) -> str:
    out = []
    for change in changes:
        old = [] if change.old is None else change.old.splitlines(keepends=True)
        new = [] if change.new is None else change.new.splitlines(keepends=True)
        out.extend(difflib.unified_diff(old, new, "/dev/null" if change.old is None else f"a/{change.path}",
                                        "/dev/null" if change.new is None else f"b/{change.path}"))
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in out)


def apply(root: Path, changes: list[Change]) -> None:
    """Stage every file beside its target first (a file replaced keeps its mode), then rename them all into place
    and remove the gone; a failure while staging writes nothing."""
    from ..render.staging import Batch

    batch = Batch()
    try:
        try:
            for change in changes:
                if change.new is not None:
                    target = root / change.path
                    batch.add(target, change.new.encode("utf-8"), executable=None,
                              like=target if target.exists() else None)
            batch.sync()
        except OSError as error:
            raise os_error(error, "write", outcome="nothing was written") from None
        try:
            batch.commit()
            for change in changes:
                if change.new is None:
                    (root / change.path).unlink()
        except OSError as error:
            raise os_error(error, "write", outcome="the files written so far are complete; the others are as "
                           "they were") from None
    finally:
        batch.discard()


MAX_PLANS = 8  # plans made under the lock before a checkout that keeps changing is refused


def write_locked(root: Path, spec, plan: Plan) -> Plan:
    """Apply `plan` and save the record under the checkout's lock (record.locked), which another `opgen add` waits
    for: two runs take turns. A plan whose files changed since they were read (another opgen add wrote them before
    this run took the lock, an editor saved one, `opgen new` wrote there) would overwrite that change with text made
    from the old bytes: the checkout is planned again from what it holds now, saying so. The plan applied is
    returned."""
    from . import record

    with record.locked(root):
        for _ in range(MAX_PLANS):
            changed = _changed_since_read(root, plan)
            if not changed:
                break
            click.echo(f"note: {', '.join(changed)} changed since opgen add read it (another opgen add, an editor): "
                       "planning again from what is there now", err=True)
            plan = plan_add(root, spec)
        else:
            raise AddError(f"{', '.join(changed)} changed {MAX_PLANS} times while opgen add was planning",
                           hint="nothing was written; another program keeps writing the checkout: run opgen add "
                           "again when it is done")
        if plan.changes:
            apply(root, plan.changes)
        if plan.changes or plan.record_changed:
            record.save(root, plan.record)
    return plan


def _changed_since_read(root: Path, plan: Plan) -> list[str]:
    """The files (and the record) the plan was made from that no longer hold what it read."""
    from . import record

    target = Target(root)
    changed = [path for path, text in plan.read.items() if target.read_text(path) != text]
    if record.load(root) != plan.recorded:
        changed.append(str(record.record_path(root)))
    return changed


@click.command("add")
@click.argument("spec_path", metavar="SPEC", type=click.Path(dir_okay=False))
@click.option("--op-plugin-root", "root", required=True, type=click.Path(file_okay=False),
              help="The op-plugin checkout to add the ops to.")
@click.option("--dry-run", is_flag=True, help="Print the changes as a unified diff; write nothing.")
def add(spec_path: str, root: str, dry_run: bool) -> None:
    """Add SPEC's ops to an op-plugin checkout: every file an op-add pull request touches.

    \b
    opgen add --op-plugin-root ~/op-plugin examples/op_plugin/rms_norm.yaml --dry-run
    Comments, order and style of the existing files are kept; running it twice changes nothing; after a
    spec change it updates what it wrote, in place.
    """
    from ..console import handle_errors

    handle_errors(run_add)(spec_path, root, dry_run)


def run_add(spec_path: str, root: str, dry_run: bool) -> None:
    from ..spec.load import load_spec

    root_path = Path(root)
    if not root_path.is_dir():
        raise AddError(f"--op-plugin-root {root} is not a directory")
    spec = load_spec(spec_path)
    plan = plan_add(root_path, spec)
    if not dry_run and (plan.changes or plan.record_changed):
        plan = write_locked(root_path, spec, plan)
    for warning in plan.warnings:
        click.echo(f"warning: {warning}", err=True)
    for note in plan.notes:
        click.echo(f"note: {note}", err=True)
    if not plan.changes:
        if plan.pending:
            click.echo(f"{len(plan.pending)} piece(s) edited by hand wait for the spec's change (the notes above "
                       "show it): merge it by hand; opgen add says so at every run until it is merged")
        else:
            click.echo(f"nothing to do: {spec_path}'s ops are already in {root}")
        return
    if dry_run:
        click.echo(diff(plan.changes), nl=False)
        click.echo("dry run: nothing was written", err=True)
        return
    for change in plan.changes:
        verb = "create" if change.old is None else "delete" if change.new is None else "update"
        click.echo(f"{verb:<10} {change.path}")
    if plan.pending:
        click.echo(f"merge by hand: {len(plan.pending)} piece(s) edited by hand (the notes above show the change)")
