"""Writing a generated project so that nothing a user owns is ever lost.

`plan_changes` reads the disk and decides, file by file, what to do; it writes nothing and refuses
the whole plan (listing every problem) when any file would be lost. `apply_plan` then performs it:
every new text staged in a temp file beside its target and fsynced, then renamed into place (backups
of replaced edits first), stale files removed, and the manifest - opgen's record of what it wrote,
by owner and sha256 - replaced last, so a run that dies halfway leaves complete files and a manifest
that is still true for the next run.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath, PureWindowsPath

from .. import __version__
from ..errors import OpgenError, os_error
from ..files import exclusive_lock
from .staging import Batch, fsync_dirs, is_staged, left_by_dead_run, leftovers, with_executable

MANIFEST = ".opgen/manifest.json"
BACKUP_DIR = ".opgen/backup"
MANIFEST_FORMAT = 1
OWNERS = ("generated", "user")
# Display order of Plan.render() and Plan.summary: what writes first, then what only reports.
KINDS = ("create", "update", "overwrite", "remove", "unchanged", "keep", "orphan")
WRITING_KINDS = frozenset({"create", "update", "overwrite", "remove"})
_RESERVED = PurePosixPath(MANIFEST).parts[0]
MAX_NAME_BYTES = 255  # one file or directory name (ext4, APFS, NTFS...)
_YOURS = "yours; never overwritten"
_SPEC_CHANGED = ("yours, kept; the spec now gives this file other code (a changed reference or schema): "
                 "move it away and re-run to get that")
_WINDOWS_DEVICES = frozenset({"CON", "PRN", "AUX", "NUL", *(f"COM{n}" for n in range(1, 10)),
                              *(f"LPT{n}" for n in range(1, 10))})


@dataclass(frozen=True)
class PlannedFile:
    """One file of the project. `owner`: "generated" (opgen may regenerate it) or "user" (created once)."""

    path: str
    content: str
    owner: str
    executable: bool = False

    def __post_init__(self) -> None:
        if self.owner not in OWNERS:
            raise ValueError(f"PlannedFile.owner must be one of {OWNERS}, not {self.owner!r}")
        if not isinstance(self.path, str) or not isinstance(self.content, str):
            raise TypeError("PlannedFile.path and PlannedFile.content must be str")

    @property
    def data(self) -> bytes:
        return self.content.encode("utf-8")

    @property
    def sha256(self) -> str:
        return _sha256(self.data)


@dataclass(frozen=True)
class Action:
    """What happens to one path. `file` is the planned file (None for remove/orphan); `backup` is where
    the text being replaced is saved (relative to the project); `expected_sha256` is what the disk held
    when the plan was made (None: no file), re-checked before anything is written."""

    path: str
    kind: str
    reason: str = ""
    file: PlannedFile | None = None
    backup: str | None = None
    expected_sha256: str | None = None


@dataclass(frozen=True)
class Problem:
    """Why a plan was refused. `kind`: "path" (a planned path is malformed or leaves the project), "disk"
    (a symlink, directory or unreadable file in the way), "manifest", "foreign" (a directory opgen did not
    create), "edited" (a generated file holds hand edits) or "unknown" (a file opgen did not write).
    Only "foreign", "edited", "unknown" and a damaged manifest are resolved by --force."""

    path: str
    message: str
    kind: str
    forceable: bool = False

    def __str__(self) -> str:
        if not self.path:
            return self.message
        shown = self.path if self.path.isprintable() else repr(self.path)
        return f"{shown}: {self.message}"


class WriteRefused(OpgenError):
    """The plan would lose user text or escape the project; nothing was written."""

    def __init__(self, out_dir: Path, problems: list[Problem]) -> None:
        self.problems = problems
        count = f"{len(problems)} problem{'s' if len(problems) != 1 else ''}"
        lines = [f"refusing to write {out_dir}, nothing was written: {count}"]
        lines += [f"  - {problem}" for problem in problems]
        super().__init__("\n".join(lines), hint=_refusal_hint(problems))


def _refusal_hint(problems: list[Problem]) -> str:
    kinds = {problem.kind for problem in problems}
    if not all(problem.forceable for problem in problems):
        hint = "fix the problems above first (file names come from the spec): --force cannot override them"
        if any(problem.forceable for problem in problems):
            hint += "; --force then resolves the ones about edited or unknown files"
        return hint
    hint = "re-run with --force to go ahead: every file it replaces is first saved under " + BACKUP_DIR + "/"
    if "edited" in kinds:
        hint += "; or move your edits into a file you own (a kernel, a TODO fake) and re-run"
    if "foreign" in kinds:
        hint += "; or choose a new or empty directory"
    return hint


@dataclass(frozen=True)
class Plan:
    """What `apply_plan` will do: `actions` sorted by path, the new manifest's text, and where the
    replaced texts go (`backup_dir`, None when nothing is replaced)."""

    out_dir: Path
    actions: list[Action]
    manifest_text: str
    old_manifest_text: str | None = None
    backup_dir: str | None = None
    force: bool = False

    @property
    def summary(self) -> dict[str, int]:
        """Number of actions of each kind, every kind present, in KINDS order."""
        counts = dict.fromkeys(KINDS, 0)
        for action in self.actions:
            counts[action.kind] += 1
        return counts

    @property
    def manifest_changed(self) -> bool:
        return self.manifest_text != self.old_manifest_text

    @property
    def changed(self) -> bool:
        """True when applying the plan would change anything on disk."""
        return self.manifest_changed or any(action.kind in WRITING_KINDS for action in self.actions)

    def render(self, *, include_unchanged: bool = True) -> str:
        """One line per action ("create     pkg/_ops.py"), sorted by path, then a count line.
        `include_unchanged=False` leaves out the files nothing happens to: unchanged ones, and your files
        kept as they were (ownership changes are still shown)."""
        width = max(len(kind) for kind in KINDS)
        lines = []
        for action in self.actions:
            if not include_unchanged and action.kind in ("unchanged", "keep") and action.reason in ("", _YOURS):
                continue
            line = f"{action.kind:<{width}}  {action.path}"
            if action.reason:
                line += f"  ({action.reason})"
            lines.append(line)
        counts = ", ".join(f"{count} {kind}" for kind, count in self.summary.items() if count)
        lines.append(f"{self.out_dir}: {counts or 'no files'}" + ("" if self.changed else " (nothing to write)"))
        return "\n".join(lines)


def plan_changes(out_dir: str | Path, files: list[PlannedFile], *, force: bool = False) -> Plan:
    """Decide what writing `files` into `out_dir` does, without writing; raise WriteRefused if unsafe. What an
    interrupted run left is part of the plan: its staged files are removed, and the files it renamed into place
    count as opgen's (as its staged manifest records them)."""
    root = Path(out_dir)
    try:
        return _plan(root, sorted(files, key=lambda planned: planned.path), force)
    except OSError as error:
        raise os_error(error, "read", outcome="nothing was written") from None
    except RuntimeError as error:  # pathlib's resolve() before Python 3.13: "Symlink loop from '...'"
        if "Symlink loop" not in str(error):
            raise
        where = str(error).split("from", 1)[-1].strip().strip("'\"")
        raise OpgenError(f"cannot use {where}: a symbolic link on the way points back to itself (nothing was "
                         "written)", hint="remove the loop, or choose another -o directory") from None


def _plan(root: Path, files: list[PlannedFile], force: bool) -> Plan:
    problems = _check_plan_paths(files)
    blocker = _check_root(root)
    if blocker is not None:
        raise WriteRefused(root, [*problems, blocker])  # nothing on disk can be checked below a file
    bad_paths = {problem.path for problem in problems}
    disk: dict[str, bytes | None] = {}
    for path in [planned.path for planned in files if planned.path not in bad_paths] + [MANIFEST]:
        problem = _check_on_disk(root, path)
        if problem is not None:
            problems.append(problem)
        elif path != MANIFEST:
            try:
                disk[path] = _read(root / path)
            except OSError as error:
                problems.append(Problem(path, f"cannot be read ({error.strerror or error})", "disk"))
    old_manifest_text, old_entries, manifest_problem = _load_manifest(root, force)
    if manifest_problem is not None:
        problems.append(manifest_problem)
    finished = _journal(root, old_entries)
    old_entries = {**old_entries, **finished}
    if old_manifest_text is None and not force and _is_foreign(root, files, set(finished)):
        problems.insert(0, Problem("", f"opgen did not create {root} (it is not empty and has no {MANIFEST})",
                                   "foreign", forceable=True))

    backup_dir = _backup_dir_name(root)
    actions: list[Action] = []
    entries: dict[str, dict] = {}
    for planned in files:
        if planned.path not in disk:
            continue  # its path problem is already reported
        action, entry, problem = _decide(planned, disk[planned.path], old_entries.get(planned.path), force,
                                         backup_dir, root)
        if problem is not None:
            problems.append(problem)
            continue
        actions.append(action)
        entries[planned.path] = entry
    for path in sorted(set(old_entries) - {planned.path for planned in files}):
        action = _decide_stale(root, path, old_entries[path])
        if action is not None:
            actions.append(action)
    if problems:
        raise WriteRefused(root, problems)
    actions += _leftover_actions(root, [planned.path for planned in files] + list(old_entries))
    actions.sort(key=lambda action: action.path)
    uses_backup = any(action.backup for action in actions)
    return Plan(root, actions, _manifest_text(entries), old_manifest_text, backup_dir if uses_backup else None, force)


def _leftover_actions(root: Path, paths: list[str]) -> list[Action]:
    """Removing the temp files an interrupted run staged beside `paths` and in .opgen/ (they are opgen's own)."""
    if not root.is_dir():
        return []
    directories = {"", *(str(PurePosixPath(path).parent) for path in paths)} - {"."}
    reserved = root / _RESERVED
    if reserved.is_dir():
        directories |= {Path(walked).relative_to(root).as_posix() for walked, _, _ in os.walk(reserved)}
    actions = []
    for path in leftovers(root, directories):
        data = _read(root / path)
        if data is not None:
            actions.append(Action(path, "remove", "staged by an interrupted opgen run",
                                  expected_sha256=_sha256(data)))
    return actions


def write_files(out_dir: str | Path, files: list[PlannedFile], *, force: bool = False,
                dry_run: bool = False) -> Plan:
    """Plan, then apply unless `dry_run`; the plan says what happened (or would)."""
    plan = plan_changes(out_dir, files, force=force)
    if not dry_run:
        apply_plan(plan)
    return plan


def apply_plan(plan: Plan) -> None:
    """Perform `plan`. Every new text (backups first, the new manifest last) is written to a temp file beside
    its target and made durable before the first rename, so a failure while writing changes nothing; the
    renames follow (backups before the files they save), then removals, and the manifest is renamed last, so
    a failure midway leaves complete files and an old manifest that is still true, and a run killed midway
    leaves its staged manifest for the next run to learn what it wrote (`_journal`). Writes nothing when the
    disk no longer looks the way it did when the plan was made. An OSError ends as an OpgenError that names
    the file and says what was written (an EnvironmentFault for a full disk, a read-only file system...)."""
    if not plan.changed:
        _verify_unchanged_since_plan(plan)
        return
    created = _make_lock_dir(plan.out_dir)
    try:
        with _project_lock(plan.out_dir):
            _verify_unchanged_since_plan(plan)
            _apply(plan)
    except BaseException:
        for directory in reversed(created):  # made only to hold the lock: gone again if nothing was written
            with contextlib.suppress(OSError):
                directory.rmdir()
        raise


def _make_lock_dir(root: Path) -> list[Path]:
    """Make `root`/.opgen (the project's lock, and where its manifest goes); the directories made, outermost
    first."""
    missing, directory = [], root / _RESERVED
    while not directory.is_dir() and directory.parent != directory:
        missing.append(directory)
        directory = directory.parent
    made = []
    try:
        for directory in reversed(missing):
            with contextlib.suppress(FileExistsError):  # another opgen made it first
                directory.mkdir()
                made.append(directory)
    except OSError as error:
        for directory in reversed(made):
            with contextlib.suppress(OSError):
                directory.rmdir()
        raise os_error(error, "write", outcome="nothing was written") from None
    return made


@contextlib.contextmanager
def _project_lock(root: Path) -> Iterator[None]:
    """Hold the project's lock (an flock on its .opgen directory) while checking and writing it: two opgen runs
    writing one project take turns, and the second sees what the first wrote (`PlanOutdated`), never a mix."""
    lock = root / _RESERVED
    for _ in range(100):
        with exclusive_lock(lock) as held:
            if held or lock.is_dir():  # not held on a file system without locks: the compare is the guard
                yield
                return
        _make_lock_dir(root)  # removed while this run waited, by a run that wrote nothing: make it again
    raise OpgenError(f"cannot lock {lock}: it keeps disappearing", hint="nothing was written; re-run opgen")


def _apply(plan: Plan) -> None:
    root = plan.out_dir
    files, manifest = Batch(), Batch()
    try:
        try:
            mode_only = _stage(plan, files)
            if plan.manifest_changed:
                manifest.add(root / MANIFEST, plan.manifest_text.encode("utf-8"))
            files.sync()
            manifest.sync()
        except OSError as error:
            raise os_error(error, "write", outcome="nothing was written") from None
        try:
            files.commit()
            _finish(plan, set(files.directories), mode_only)
            manifest.commit()
            fsync_dirs([(root / MANIFEST).parent])
        except OSError as error:
            raise os_error(error, "write", outcome="the files written so far are complete: run opgen again "
                           "to finish") from None
    finally:
        files.discard()
        manifest.discard()


def _stage(plan: Plan, batch: Batch) -> list[Action]:
    """Stage the backups and every new text of `plan`; the actions whose text is already on disk (only the
    executable bit changes) are returned instead."""
    root = plan.out_dir
    mode_only: list[Action] = []
    if plan.backup_dir:
        ignore = root / _RESERVED / ".gitignore"
        if not ignore.exists():  # backups stay on disk but out of version control; the manifest is committed
            batch.add(ignore, b"backup/\n")
    for action in plan.actions:
        if action.backup:
            _ensure_inside(root, root / action.path)
            batch.add(root / action.backup, (root / action.path).read_bytes())
    for action in plan.actions:
        if action.kind not in ("create", "update", "overwrite"):
            continue
        assert action.file is not None
        target = root / action.path
        _ensure_inside(root, target)
        current = _read(target)
        if current == action.file.data:
            mode_only.append(action)
        else:
            batch.add(target, action.file.data, executable=action.file.executable,
                      like=target if current is not None else None)
    return mode_only


def _finish(plan: Plan, touched: set[Path], mode_only: list[Action]) -> None:
    """After the renames: executable bits, removals (stale files, what an interrupted run left), durable dirs."""
    root = plan.out_dir
    for action in mode_only:
        _set_executable(root / action.path, action.file.executable)
    for action in plan.actions:
        if action.kind == "remove":
            target = root / action.path
            _ensure_inside(root, target)
            target.unlink()
            touched.add(target.parent)
            _remove_empty_parents(root, target.parent)
    fsync_dirs(sorted(directory for directory in touched if directory.exists()))


# --- deciding -------------------------------------------------------------------------------------


def _decide(planned: PlannedFile, current: bytes | None, old: dict | None, force: bool, backup_dir: str,
            root: Path) -> tuple[Action | None, dict, Problem | None]:
    """The action for one planned file, its new manifest entry, or the problem that blocks it."""
    entry = {"owner": planned.owner, "sha256": planned.sha256, "executable": planned.executable}
    if current is None:
        reason = "deleted since the last run; recreated" if old is not None else ""
        return Action(planned.path, "create", reason, planned), entry, None
    current_sha = _sha256(current)
    old_owner = None if old is None else old.get("owner")
    untouched = old is not None and old.get("sha256") == current_sha  # disk still holds what opgen wrote
    if planned.owner == "user":
        if old_owner == "generated" and untouched and current != planned.data:
            return (Action(planned.path, "update", "was generated and not edited; now yours", planned,
                           expected_sha256=current_sha), entry, None)
        # what opgen wrote there, if anything: a file it finds already there is the user's, even if identical
        entry["sha256"] = None if old is None else old.get("sha256")
        # what the spec gives the file now, when that is not what opgen wrote: a later change (a new
        # `reference:`, schema) is said once
        if planned.sha256 != entry["sha256"]:
            entry["planned_sha256"] = planned.sha256
        last_planned = None if old is None else old.get("planned_sha256", old.get("sha256"))
        if old_owner == "generated":
            reason = "now yours" if untouched else "now yours; your edits kept"
        elif last_planned not in (None, planned.sha256):
            reason = _SPEC_CHANGED
        else:
            reason = _YOURS
        return Action(planned.path, "keep", reason, planned), entry, None
    if current == planned.data:
        if os.name != "nt" and _is_executable(root / planned.path) != planned.executable:
            return (Action(planned.path, "update", "executable bit", planned, expected_sha256=current_sha),
                    entry, None)
        reason = "now generated" if old_owner == "user" else ""
        return Action(planned.path, "unchanged", reason, planned, expected_sha256=current_sha), entry, None
    if untouched:
        reason = "was yours and not edited; now generated" if old_owner == "user" else ""
        return Action(planned.path, "update", reason, planned, expected_sha256=current_sha), entry, None
    if old is None:
        why, kind = "exists, but opgen did not write it", "unknown"
    elif old_owner == "user":
        why, kind = "was yours and is now generated, but holds your edits", "edited"
    else:
        why, kind = "edited by hand since opgen generated it", "edited"
    if not force:
        return None, entry, Problem(planned.path, why, kind, forceable=True)
    backup = f"{backup_dir}/{planned.path}"
    return (Action(planned.path, "overwrite", f"{why}; your version saved to {backup}", planned, backup,
                   expected_sha256=current_sha), entry, None)


def _decide_stale(root: Path, path: str, old: dict) -> Action | None:
    """A file the last run wrote that this plan no longer has (generated or yours): removed if nobody edited
    it, otherwise an orphan left in place and forgotten."""
    target = root / path
    if not target.exists() and not target.is_symlink():
        return None  # already gone
    if _check_on_disk(root, path) is not None or not target.is_file():
        return Action(path, "orphan", "no longer planned and no longer a plain file; left in place")
    current_sha = _sha256(target.read_bytes())
    yours = old.get("owner") == "user"
    if old.get("sha256") == current_sha:  # still exactly what opgen wrote: removing it loses nothing
        reason = "yours but never edited; no longer planned" if yours else "no longer generated"
        return Action(path, "remove", reason, expected_sha256=current_sha)
    reason = "yours and no longer planned" if yours else "no longer generated, but edited by hand"
    return Action(path, "orphan", reason + "; left in place", expected_sha256=current_sha)


def _is_foreign(root: Path, files: list[PlannedFile], finished: set[str]) -> bool:
    """Whether `root` holds anything besides opgen's own files: what it plans, what an interrupted run of it
    wrote (`finished`) and staged, so that an interrupted first run is not foreign."""
    if not root.is_dir():
        return False
    planned = {planned.path: planned.data for planned in files}
    parents = {str(parent) for path in [*planned, *finished] for parent in PurePosixPath(path).parents
               if str(parent) != "."}

    def foreign(directory: Path, prefix: str) -> bool:
        with os.scandir(directory) as entries:
            for entry in entries:
                rel = f"{prefix}{entry.name}"
                if rel == _RESERVED or rel in finished or is_staged(entry.name):
                    continue
                if entry.is_dir(follow_symlinks=False) and rel in parents:
                    if foreign(Path(entry.path), rel + "/"):
                        return True
                elif not (entry.is_file(follow_symlinks=False) and rel in planned
                          and planned[rel] == _read(Path(entry.path))):
                    return True
        return False

    return foreign(root, "")


# --- paths ----------------------------------------------------------------------------------------


def _check_plan_paths(files: list[PlannedFile]) -> list[Problem]:
    problems = []
    seen: dict[str, str] = {}
    for planned in files:
        message = _path_error(planned.path)
        if message is not None:
            problems.append(Problem(planned.path, message, "path"))
            continue
        folded = planned.path.casefold()
        if folded in seen:
            same = seen[folded] == planned.path
            problems.append(Problem(planned.path, "planned twice" if same else
                                    f"differs from {seen[folded]} only in case (they collide on macOS/Windows)",
                                    "path"))
        seen[folded] = planned.path
    paths = set(seen.values())
    for path in sorted(paths):
        for parent in PurePosixPath(path).parents:
            if str(parent) in paths:
                problems.append(Problem(path, f"needs {parent} to be a directory, but it is also a planned file",
                                        "path"))
    return problems


def _path_error(path: str) -> str | None:
    """Why `path` cannot name a file inside the project, or None. Names come from user specs."""
    if not path:
        return "empty path"
    if any(ord(char) < 32 or char == "\x7f" for char in path):
        return "contains a control character"
    if "\\" in path:
        return "contains a backslash; use / to separate directories"
    if path.startswith("/") or PureWindowsPath(path).drive or PureWindowsPath(path).root:
        return "is absolute; paths must be relative to the project directory"
    parts = path.split("/")
    if ".." in parts:
        return "contains '..'; paths must stay inside the project directory"
    if any(part in ("", ".") for part in parts):
        return "has an empty or '.' component"
    if parts[0] == _RESERVED:
        return f"is inside {_RESERVED}/, which opgen keeps for itself"
    for part in parts:  # the project must also check out on Windows and macOS
        if len(part.encode("utf-8")) > MAX_NAME_BYTES:
            return f"has a name of {len(part.encode('utf-8'))} bytes; file systems allow {MAX_NAME_BYTES}"
        if set(part) & set('<>:"|?*'):
            return f"{part!r} contains one of < > : \" | ? *, which Windows does not allow in file names"
        if part[-1] in ". ":
            return f"{part!r} ends with a dot or a space, which Windows drops"
        if part.split(".")[0].upper() in _WINDOWS_DEVICES:
            return f"{part!r} is a device name on Windows"
    return None


def _check_root(root: Path) -> Problem | None:
    """The project directory, or the nearest existing directory above it, must be a directory."""
    existing = root
    while not existing.exists() and existing.parent != existing:
        existing = existing.parent
    if existing.exists() and not existing.is_dir():
        return Problem("", f"{existing} exists and is not a directory", "disk")
    return None


def _check_on_disk(root: Path, path: str) -> Problem | None:
    """What on disk stops `path` from being a plain file inside `root`: a symlink, a directory, a file
    where a directory is needed."""
    real_root = root.resolve()
    current = root
    parts = PurePosixPath(path).parts
    for depth, part in enumerate(parts):
        current = current / part
        last = depth == len(parts) - 1
        shown = "/".join(parts[: depth + 1])
        if current.is_symlink():
            if last:
                return Problem(path, "is a symbolic link; opgen only writes plain files", "disk")
            if not _inside(real_root, current.resolve()):
                return Problem(path, f"{shown} is a symbolic link to {os.readlink(current)}, outside {root}", "disk")
        if not current.exists():
            return None
        if last and current.is_dir():
            return Problem(path, "is a directory, but opgen needs to write a file there", "disk")
        if last and not current.is_file():
            return Problem(path, "is not a regular file (a device, socket or pipe)", "disk")
        if not last and not current.is_dir():
            return Problem(path, f"{shown} is a file, but opgen needs it to be a directory", "disk")
    return None


def _inside(root: Path, candidate: Path) -> bool:
    return candidate == root or root in candidate.parents


def _ensure_inside(root: Path, target: Path) -> None:
    if not _inside(root.resolve(), target.parent.resolve()):
        raise OpgenError(f"{target} is outside {root}: a symbolic link changed while opgen was writing",
                         hint="nothing after this file was written; check the directory and re-run")


# --- manifest -------------------------------------------------------------------------------------


def _load_manifest(root: Path, force: bool) -> tuple[str | None, dict[str, dict], Problem | None]:
    """The previous manifest's text and entries; a damaged one is a problem (--force ignores it)."""
    manifest = root / MANIFEST
    if not manifest.is_file():
        return None, {}, None
    text = manifest.read_text(encoding="utf-8", errors="replace")
    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise TypeError("not a JSON object")
        if data.get("format") != MANIFEST_FORMAT:
            return text, {}, Problem(MANIFEST, f"has format {data.get('format')!r}; this opgen "
                                               f"({__version__}) reads format {MANIFEST_FORMAT}: upgrade opgen",
                                     "manifest")
        entries = data["files"]
        for path, entry in entries.items():
            if _path_error(path) is not None or not _valid_entry(entry):
                raise ValueError(f"bad entry {path!r}")
    except (ValueError, KeyError, AttributeError, TypeError, RecursionError) as error:
        if isinstance(error, RecursionError):
            error = ValueError("nested too deeply to be opgen's")
        if force:
            return text, {}, None
        return text, {}, Problem(MANIFEST, f"is damaged ({error}); with --force opgen ignores it and treats every "
                                           "existing file as unknown", "manifest", forceable=True)
    return text, entries, None


def _journal(root: Path, old_entries: dict[str, dict]) -> dict[str, dict]:
    """What an interrupted run had finished: the entries of the manifest it staged (complete and fsynced before
    its first rename) whose file holds exactly what it wrote. The next run takes them as its old entries, so
    that it ends as the interrupted one would have (a kernel it created stays opgen's to remove later)."""
    reserved = root / _RESERVED
    if not reserved.is_dir():
        return {}
    prefix = "." + PurePosixPath(MANIFEST).name + "."
    candidates = sorted((path for path in reserved.iterdir() if path.name.startswith(prefix) and left_by_dead_run(path.name)),
                        key=lambda path: path.stat().st_mtime, reverse=True)
    for candidate in candidates:
        try:
            data = json.loads(candidate.read_text(encoding="utf-8"))
            entries = data["files"] if data.get("format") == MANIFEST_FORMAT else None
        except (OSError, ValueError, AttributeError, KeyError, TypeError, RecursionError):
            continue
        if not isinstance(entries, dict):
            continue
        finished = {}
        for path, entry in entries.items():
            if _path_error(path) is not None or not _valid_entry(entry) or entry.get("sha256") is None:
                continue
            if old_entries.get(path) == entry or _check_on_disk(root, path) is not None:
                continue
            current = _read(root / path)
            if current is not None and _sha256(current) == entry["sha256"]:
                finished[path] = entry
        return finished
    return {}


def _valid_entry(entry: object) -> bool:
    return (isinstance(entry, dict) and entry.get("owner") in OWNERS
            and all(entry.get(key) is None or isinstance(entry.get(key), str) for key in ("sha256", "planned_sha256"))
            and isinstance(entry.get("executable", False), bool))


def _manifest_text(entries: dict[str, dict]) -> str:
    data = {"format": MANIFEST_FORMAT, "generator": "opgen", "opgen_version": __version__, "files": entries}
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def _backup_dir_name(root: Path) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    name, counter = f"{BACKUP_DIR}/{stamp}", 1
    while (root / name).exists():
        counter += 1
        name = f"{BACKUP_DIR}/{stamp}-{counter}"
    return name


# --- disk -----------------------------------------------------------------------------------------


def _verify_unchanged_since_plan(plan: Plan) -> None:
    stale = []
    for action in plan.actions:
        if action.kind not in WRITING_KINDS:
            continue
        current = _read(plan.out_dir / action.path)
        if (None if current is None else _sha256(current)) != action.expected_sha256:
            stale.append(action.path)
        if action.backup and (plan.out_dir / action.backup).exists():
            stale.append(action.backup)
    current_manifest = _read(plan.out_dir / MANIFEST)
    if (None if current_manifest is None else current_manifest.decode("utf-8", "replace")) != plan.old_manifest_text:
        stale.append(MANIFEST)
    if stale:
        raise PlanOutdated(f"{plan.out_dir} changed after opgen planned the write: {', '.join(stale)}",
                           hint="nothing was written; re-run opgen")


class PlanOutdated(OpgenError):
    """The project changed on disk between the plan and its write (another opgen, an editor): nothing was written;
    planning again sees what is there now."""


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _is_executable(path: Path) -> bool:
    return bool(path.stat().st_mode & stat.S_IXUSR)


def _set_executable(path: Path, executable: bool) -> None:
    os.chmod(path, with_executable(stat.S_IMODE(path.stat().st_mode), executable))


def _remove_empty_parents(root: Path, directory: Path) -> None:
    while directory != root and root in directory.parents:
        try:
            directory.rmdir()
        except OSError:
            return
        directory = directory.parent
