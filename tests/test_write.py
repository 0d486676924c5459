"""The file writer behind `opgen new`: nothing a user owns is ever lost (DESIGN.md, "Nothing is lost")."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from opgen.errors import OpgenError
from opgen.render import staging, write
from opgen.render.write import (
    BACKUP_DIR,
    MANIFEST,
    PlannedFile,
    WriteRefused,
    apply_plan,
    plan_changes,
)

POSIX = os.name == "posix"
needs_posix = pytest.mark.skipif(not POSIX, reason="file modes and symlinks are POSIX features")

OPS = PlannedFile("pkg/_ops.py", "import torch\n\nLIB = 1\n", "generated")
FAKE = PlannedFile("pkg/_fake.py", "def fake(x):\n    return x\n", "generated")
KERNEL = PlannedFile("pkg/kernel.py", "def kernel(x):\n    raise NotImplementedError('write your kernel here')\n",
                     "user")
SCRIPT = PlannedFile("scripts/run.sh", "#!/bin/sh\necho hi\n", "generated", executable=True)
PROJECT = [OPS, FAKE, KERNEL, SCRIPT]


def generate(root: Path, files: list[PlannedFile], *, force: bool = False) -> write.Plan:
    plan = plan_changes(root, files, force=force)
    apply_plan(plan)
    return plan


def kinds(plan: write.Plan) -> dict[str, str]:
    return {action.path: action.kind for action in plan.actions}


def edited(file: PlannedFile, content: str) -> PlannedFile:
    return PlannedFile(file.path, content, file.owner, file.executable)


def snapshot(root: Path) -> dict[str, tuple]:
    """Everything observable about a tree: kind, bytes, mode, mtime and inode of every entry."""
    state: dict[str, tuple] = {}
    if not root.exists():
        return state
    for directory, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(directory, name)
            info = path.lstat()
            if path.is_symlink():
                content: object = ("link", os.readlink(path))
            elif path.is_dir():
                content = "dir"
            elif not path.is_file():
                content = "special"
            else:
                content = path.read_bytes()
            state[path.relative_to(root).as_posix()] = (content, info.st_mode, info.st_mtime_ns, info.st_ino)
    return state


def manifest(root: Path) -> dict:
    return json.loads((root / MANIFEST).read_text(encoding="utf-8"))


def refusal(root: Path, files: list[PlannedFile], *, force: bool = False) -> WriteRefused:
    before = snapshot(root)
    with pytest.raises(WriteRefused) as caught:
        plan_changes(root, files, force=force)
    assert snapshot(root) == before
    return caught.value


# --- first run ------------------------------------------------------------------------------------


def test_missing_directory_gets_every_file_and_a_manifest(tmp_path):
    root = tmp_path / "deep" / "proj"
    plan = plan_changes(root, PROJECT)
    assert not root.exists(), "planning must not create the directory"
    assert kinds(plan) == dict.fromkeys(["pkg/_fake.py", "pkg/_ops.py", "pkg/kernel.py", "scripts/run.sh"], "create")
    assert plan.changed
    apply_plan(plan)
    for file in PROJECT:
        assert (root / file.path).read_bytes() == file.content.encode()
    entries = manifest(root)["files"]
    assert entries["pkg/_ops.py"] == {"owner": "generated", "sha256": OPS.sha256, "executable": False}
    assert entries["pkg/kernel.py"]["owner"] == "user"
    assert entries["scripts/run.sh"]["executable"] is True
    assert sorted(entries) == sorted(file.path for file in PROJECT)


def test_empty_existing_directory_is_filled(tmp_path):
    plan = generate(tmp_path, PROJECT)
    assert set(kinds(plan).values()) == {"create"}


def test_content_is_written_as_utf8_with_newlines_untranslated(tmp_path):
    text = "# naïve résumé – 算子\nx = 'µ'\n"
    generate(tmp_path, [PlannedFile("pkg/ü.py", text, "generated")])
    assert (tmp_path / "pkg/ü.py").read_bytes() == text.encode("utf-8")
    assert b"\r" not in (tmp_path / "pkg/ü.py").read_bytes()


def test_directory_opgen_did_not_create_is_refused(tmp_path):
    (tmp_path / "notes.txt").write_text("mine\n")
    error = refusal(tmp_path, PROJECT)
    assert f"opgen did not create {tmp_path}" in error.render()
    assert "--force" in error.render() and "move your edits" not in error.render()
    assert [(problem.kind, problem.forceable) for problem in error.problems] == [("foreign", True)]


def test_force_into_foreign_directory_backs_up_what_it_replaces_and_leaves_the_rest(tmp_path):
    (tmp_path / "notes.txt").write_text("mine\n")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg/_ops.py").write_text("my own ops\n")
    (tmp_path / "pkg/kernel.py").write_text("my kernel\n")
    plan = generate(tmp_path, PROJECT, force=True)
    assert kinds(plan) == {"pkg/_fake.py": "create", "pkg/_ops.py": "overwrite", "pkg/kernel.py": "keep",
                           "scripts/run.sh": "create"}
    assert (tmp_path / "notes.txt").read_text() == "mine\n"
    assert (tmp_path / "pkg/kernel.py").read_text() == "my kernel\n"
    assert (tmp_path / "pkg/_ops.py").read_text() == OPS.content
    backup = tmp_path / plan.backup_dir / "pkg/_ops.py"
    assert backup.read_text() == "my own ops\n"
    assert plan.backup_dir.startswith(BACKUP_DIR + "/")
    assert (tmp_path / ".opgen/.gitignore").read_text() == "backup/\n"
    # the kept kernel was never written by opgen, so a later owner change treats it as edited
    assert manifest(tmp_path)["files"]["pkg/kernel.py"]["sha256"] is None


def test_interrupted_first_run_is_resumed_without_force(tmp_path):
    """A first run that died before its manifest left only complete planned files: not a foreign directory."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg/_ops.py").write_text(OPS.content)
    plan = generate(tmp_path, PROJECT)
    assert kinds(plan)["pkg/_ops.py"] == "unchanged"
    assert kinds(plan)["pkg/_fake.py"] == "create"


def test_directory_with_a_stray_file_in_a_planned_folder_is_foreign(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg/_ops.py").write_text(OPS.content)
    (tmp_path / "pkg/extra.py").write_text("x\n")
    refusal(tmp_path, PROJECT)


# --- regeneration ---------------------------------------------------------------------------------


def test_second_identical_run_changes_nothing(tmp_path):
    generate(tmp_path, PROJECT)
    before = snapshot(tmp_path)
    plan = plan_changes(tmp_path, PROJECT)
    assert kinds(plan) == {"pkg/_fake.py": "unchanged", "pkg/_ops.py": "unchanged", "pkg/kernel.py": "keep",
                           "scripts/run.sh": "unchanged"}
    assert not plan.changed
    assert plan.summary == {"create": 0, "update": 0, "overwrite": 0, "remove": 0, "unchanged": 3, "keep": 1,
                            "orphan": 0}
    apply_plan(plan)
    assert snapshot(tmp_path) == before  # same bytes, modes, mtimes and inodes, manifest included


def test_new_generated_content_updates_unedited_files_only(tmp_path):
    generate(tmp_path, PROJECT)
    fake_before = snapshot(tmp_path)["pkg/_fake.py"]
    new_ops = edited(OPS, OPS.content + "LIB2 = 2\n")
    plan = generate(tmp_path, [new_ops, FAKE, KERNEL, SCRIPT])
    assert kinds(plan)["pkg/_ops.py"] == "update"
    assert (tmp_path / "pkg/_ops.py").read_text() == new_ops.content
    assert snapshot(tmp_path)["pkg/_fake.py"] == fake_before
    assert manifest(tmp_path)["files"]["pkg/_ops.py"]["sha256"] == new_ops.sha256


def test_user_files_are_never_overwritten_even_with_force(tmp_path):
    generate(tmp_path, PROJECT)
    (tmp_path / "pkg/kernel.py").write_text("def kernel(x):\n    return x * 2\n")
    new_template = edited(KERNEL, "def kernel(x):\n    raise RuntimeError('new stub')\n")
    for force in (False, True):
        plan = generate(tmp_path, [OPS, FAKE, new_template, SCRIPT], force=force)
        assert kinds(plan)["pkg/kernel.py"] == "keep"
        assert (tmp_path / "pkg/kernel.py").read_text() == "def kernel(x):\n    return x * 2\n"
    # an untouched user file is also kept when its template changes: created once, never overwritten
    assert manifest(tmp_path)["files"]["pkg/kernel.py"]["sha256"] == KERNEL.sha256


def test_a_user_file_whose_spec_code_changed_is_kept_and_said_once(tmp_path):
    """The spec now gives a user file other code (a new `reference:`): kept, edited or not, and the plan says
    so on the run that sees the change, not on every run after it."""
    reasons = {}
    for touched in (False, True):
        root = tmp_path / str(touched)
        generate(root, PROJECT)
        if touched:
            (root / "pkg/kernel.py").write_text("def kernel(x):\n    return x * 2\n")
        before = (root / "pkg/kernel.py").read_bytes()
        new_reference = edited(KERNEL, "def kernel(x):\n    return x + 1\n")
        plan = generate(root, [OPS, FAKE, new_reference, SCRIPT])
        action = next(a for a in plan.actions if a.path == "pkg/kernel.py")
        assert action.kind == "keep" and (root / "pkg/kernel.py").read_bytes() == before
        reasons[touched] = action.reason
        assert "kernel.py  (yours, kept; the spec now gives this file other code" in plan.render(include_unchanged=False)
        again = plan_changes(root, [OPS, FAKE, new_reference, SCRIPT])
        assert not again.changed and "kernel.py" not in again.render(include_unchanged=False)
        # the look-alike: the same spec code as last time says nothing
        assert next(a for a in again.actions if a.path == "pkg/kernel.py").reason == write._YOURS
    assert reasons[False] == reasons[True]


def test_deleted_files_are_recreated(tmp_path):
    generate(tmp_path, PROJECT)
    (tmp_path / "pkg/_ops.py").unlink()
    (tmp_path / "pkg/kernel.py").unlink()
    plan = generate(tmp_path, PROJECT)
    assert kinds(plan)["pkg/_ops.py"] == "create"
    assert kinds(plan)["pkg/kernel.py"] == "create"
    assert "recreated" in plan.render()
    assert (tmp_path / "pkg/_ops.py").read_text() == OPS.content
    assert (tmp_path / "pkg/kernel.py").read_text() == KERNEL.content


def test_hand_edited_generated_file_is_refused_naming_the_file(tmp_path):
    generate(tmp_path, PROJECT)
    (tmp_path / "pkg/_ops.py").write_text("# my tweak\n")
    error = refusal(tmp_path, [edited(OPS, "new\n"), FAKE, KERNEL, SCRIPT])
    text = error.render()
    assert "pkg/_ops.py: edited by hand" in text
    assert "--force" in text and "move your edits into a file you own" in text
    assert [(problem.path, problem.kind, problem.forceable) for problem in error.problems] == [
        ("pkg/_ops.py", "edited", True)]


def test_hand_edited_generated_file_is_refused_even_if_the_template_did_not_change(tmp_path):
    generate(tmp_path, PROJECT)
    (tmp_path / "pkg/_ops.py").write_text("# my tweak\n")
    refusal(tmp_path, PROJECT)


def test_force_overwrites_an_edit_after_saving_it(tmp_path):
    generate(tmp_path, PROJECT)
    (tmp_path / "pkg/_ops.py").write_text("# my tweak\n")
    plan = generate(tmp_path, PROJECT, force=True)
    (action,) = [action for action in plan.actions if action.kind == "overwrite"]
    assert action.path == "pkg/_ops.py" and action.backup == f"{plan.backup_dir}/pkg/_ops.py"
    assert (tmp_path / action.backup).read_text() == "# my tweak\n"
    assert action.backup in plan.render()
    assert (tmp_path / "pkg/_ops.py").read_text() == OPS.content
    # a second forced overwrite in the same second gets its own backup folder
    (tmp_path / "pkg/_ops.py").write_text("# tweak two\n")
    second = generate(tmp_path, PROJECT, force=True)
    assert second.backup_dir != plan.backup_dir
    assert (tmp_path / plan.backup_dir / "pkg/_ops.py").read_text() == "# my tweak\n"
    assert (tmp_path / second.backup_dir / "pkg/_ops.py").read_text() == "# tweak two\n"


def test_an_edit_that_equals_the_new_output_is_simply_unchanged(tmp_path):
    generate(tmp_path, PROJECT)
    new_ops = edited(OPS, "the same text the user typed\n")
    (tmp_path / "pkg/_ops.py").write_text(new_ops.content)
    plan = generate(tmp_path, [new_ops, FAKE, KERNEL, SCRIPT])
    assert kinds(plan)["pkg/_ops.py"] == "unchanged"
    assert manifest(tmp_path)["files"]["pkg/_ops.py"]["sha256"] == new_ops.sha256


def test_unknown_file_at_a_generated_path_is_refused(tmp_path):
    generate(tmp_path, PROJECT)
    extra = PlannedFile("pkg/_extra.py", "generated\n", "generated")
    (tmp_path / "pkg/_extra.py").write_text("user wrote this first\n")
    error = refusal(tmp_path, [*PROJECT, extra])
    assert "opgen did not write it" in error.render()
    plan = generate(tmp_path, [*PROJECT, extra], force=True)
    assert kinds(plan)["pkg/_extra.py"] == "overwrite"
    assert (tmp_path / plan.backup_dir / "pkg/_extra.py").read_text() == "user wrote this first\n"


def test_every_problem_is_listed_at_once(tmp_path):
    generate(tmp_path, PROJECT)
    (tmp_path / "pkg/_ops.py").write_text("edit 1\n")
    (tmp_path / "pkg/_fake.py").write_text("edit 2\n")
    error = refusal(tmp_path, [*PROJECT, PlannedFile("../escape.py", "", "generated"),
                               PlannedFile("/abs.py", "", "generated")])
    assert [problem.path for problem in error.problems] == ["../escape.py", "/abs.py", "pkg/_fake.py",
                                                            "pkg/_ops.py"]
    assert "4 problems" in error.render()
    assert "--force cannot override them; --force then resolves the ones about edited" in error.render()


# --- ownership changes ----------------------------------------------------------------------------


def test_untouched_user_file_that_becomes_generated_is_updated(tmp_path):
    todo_fake = PlannedFile("pkg/_fake.py", "raise NotImplementedError('TODO: outputs')\n", "user")
    generate(tmp_path, [OPS, todo_fake])
    plan = generate(tmp_path, [OPS, FAKE])
    assert kinds(plan)["pkg/_fake.py"] == "update"
    assert "now generated" in plan.render()
    assert (tmp_path / "pkg/_fake.py").read_text() == FAKE.content
    assert manifest(tmp_path)["files"]["pkg/_fake.py"]["owner"] == "generated"


def test_edited_user_file_that_becomes_generated_is_refused_then_saved_with_force(tmp_path):
    todo_fake = PlannedFile("pkg/_fake.py", "raise NotImplementedError('TODO: outputs')\n", "user")
    generate(tmp_path, [OPS, todo_fake])
    (tmp_path / "pkg/_fake.py").write_text("def fake(x):\n    return x.new_empty(x.shape)\n")
    error = refusal(tmp_path, [OPS, FAKE])
    assert "was yours and is now generated" in error.render()
    plan = generate(tmp_path, [OPS, FAKE], force=True)
    assert kinds(plan)["pkg/_fake.py"] == "overwrite"
    assert (tmp_path / plan.backup_dir / "pkg/_fake.py").read_text().endswith("x.new_empty(x.shape)\n")


def test_user_file_opgen_never_wrote_that_becomes_generated_counts_as_edited(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg/kernel.py").write_text("hand written before opgen\n")
    generate(tmp_path, [OPS, KERNEL], force=True)
    error = refusal(tmp_path, [OPS, PlannedFile("pkg/kernel.py", "generated now\n", "generated")])
    assert "pkg/kernel.py: was yours and is now generated, but holds your edits" in error.render()


def test_generated_file_that_becomes_yours_gets_the_new_text_only_if_unedited(tmp_path):
    generate(tmp_path, [OPS, FAKE])
    todo_fake = PlannedFile("pkg/_fake.py", "raise NotImplementedError('TODO: outputs')\n", "user")
    plan = generate(tmp_path, [OPS, todo_fake])
    assert kinds(plan)["pkg/_fake.py"] == "update"
    assert (tmp_path / "pkg/_fake.py").read_text() == todo_fake.content
    assert manifest(tmp_path)["files"]["pkg/_fake.py"]["owner"] == "user"

    generate(tmp_path, [OPS, FAKE])  # generated again (it was untouched)
    (tmp_path / "pkg/_fake.py").write_text("my improved fake\n")
    for force in (True, False):
        plan = plan_changes(tmp_path, [OPS, todo_fake], force=force)
        assert kinds(plan)["pkg/_fake.py"] == "keep"
        assert "now yours; your edits kept" in plan.render(include_unchanged=False)
    apply_plan(plan)
    assert (tmp_path / "pkg/_fake.py").read_text() == "my improved fake\n"
    assert manifest(tmp_path)["files"]["pkg/_fake.py"]["owner"] == "user"


# --- stale files ----------------------------------------------------------------------------------


def test_stale_unedited_generated_file_is_removed_with_its_empty_folder(tmp_path):
    extra = PlannedFile("pkg/sub/_old.py", "old\n", "generated")
    generate(tmp_path, [*PROJECT, extra])
    plan = generate(tmp_path, PROJECT)
    assert kinds(plan)["pkg/sub/_old.py"] == "remove"
    assert not (tmp_path / "pkg/sub").exists()
    assert "pkg/sub/_old.py" not in manifest(tmp_path)["files"]
    assert (tmp_path / "pkg").is_dir()


def test_stale_edited_generated_file_is_an_orphan_left_in_place(tmp_path):
    extra = PlannedFile("pkg/_old.py", "old\n", "generated")
    generate(tmp_path, [*PROJECT, extra])
    (tmp_path / "pkg/_old.py").write_text("old, but I changed it\n")
    for force in (False, True):
        plan = plan_changes(tmp_path, PROJECT, force=force)
        assert kinds(plan)["pkg/_old.py"] == "orphan"
        assert "edited by hand; left in place" in plan.render()
    apply_plan(plan)
    assert (tmp_path / "pkg/_old.py").read_text() == "old, but I changed it\n"
    # reported once: afterwards opgen no longer claims the file
    assert "pkg/_old.py" not in manifest(tmp_path)["files"]
    assert "pkg/_old.py" not in kinds(plan_changes(tmp_path, PROJECT))


def test_stale_user_file_is_removed_only_if_never_edited(tmp_path):
    """E.g. a TODO fake that is no longer needed once the spec has semantics."""
    todo_fake = PlannedFile("pkg/fakes/scale.py", "raise NotImplementedError('TODO')\n", "user")
    generate(tmp_path, [*PROJECT, todo_fake])
    (tmp_path / "pkg/kernel.py").write_text("my kernel\n")
    plan = generate(tmp_path, [OPS, FAKE, SCRIPT])
    assert kinds(plan)["pkg/fakes/scale.py"] == "remove"
    assert not (tmp_path / "pkg/fakes").exists()
    assert kinds(plan)["pkg/kernel.py"] == "orphan"
    assert "yours and no longer planned; left in place" in plan.render()
    assert (tmp_path / "pkg/kernel.py").read_text() == "my kernel\n"


def test_stale_file_the_user_already_deleted_is_forgotten(tmp_path):
    generate(tmp_path, PROJECT)
    (tmp_path / "pkg/_fake.py").unlink()
    plan = generate(tmp_path, [OPS, KERNEL, SCRIPT])
    assert "pkg/_fake.py" not in kinds(plan)
    assert "pkg/_fake.py" not in manifest(tmp_path)["files"]


# --- paths ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["../up.py", "pkg/../../up.py", "/etc/passwd", "C:/x.py", "pkg\\x.py", "",
                                  "pkg//x.py", "./x.py", "pkg/", "a\nb.py", ".opgen/manifest.json",
                                  ".opgen/evil.py", "pkg/a:b.py", "pkg/x.py ", "pkg./x.py", "pkg/con.py",
                                  "NUL"])
def test_paths_that_leave_the_project_or_are_malformed_are_refused(tmp_path, path):
    error = refusal(tmp_path, [OPS, PlannedFile(path, "x\n", "generated")])
    assert [problem.path for problem in error.problems] == [path]
    assert not error.problems[0].forceable
    with pytest.raises(WriteRefused):
        plan_changes(tmp_path, [PlannedFile(path, "x\n", "generated")], force=True)


def test_duplicate_case_colliding_and_file_as_folder_paths_are_refused(tmp_path):
    error = refusal(tmp_path, [OPS, OPS, PlannedFile("pkg/_OPS.py", "", "generated"),
                               PlannedFile("pkg/_fake.py/inner.py", "", "generated"), FAKE])
    messages = "\n".join(str(problem) for problem in error.problems)
    assert "pkg/_ops.py: planned twice" in messages
    assert "only in case" in messages
    assert "pkg/_fake.py/inner.py: needs pkg/_fake.py to be a directory" in messages


@needs_posix
def test_symlink_pointing_outside_is_refused_even_with_force(tmp_path):
    root, outside = tmp_path / "proj", tmp_path / "outside"
    outside.mkdir()
    generate(root, [OPS])
    (root / "scripts").symlink_to(outside, target_is_directory=True)
    for force in (False, True):
        error = refusal(root, [OPS, SCRIPT], force=force)
        assert "scripts is a symbolic link" in error.render()
    assert list(outside.iterdir()) == []


@needs_posix
def test_symlinked_file_is_refused_and_its_target_untouched(tmp_path):
    root = tmp_path / "proj"
    generate(root, [OPS, FAKE])
    target = tmp_path / "elsewhere.py"
    target.write_text("precious\n")
    (root / "pkg/_fake.py").unlink()
    (root / "pkg/_fake.py").symlink_to(target)
    error = refusal(root, [OPS, FAKE], force=True)
    assert "pkg/_fake.py: is a symbolic link" in error.render()
    assert target.read_text() == "precious\n"


@needs_posix
def test_symlink_inside_the_project_is_followed(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "pkg").symlink_to(tmp_path / "real", target_is_directory=True)
    (tmp_path / ".opgen").mkdir()
    (tmp_path / MANIFEST).write_text(write._manifest_text({}))  # an opgen project with no files yet
    generate(tmp_path, [OPS])
    assert (tmp_path / "real/_ops.py").read_text() == OPS.content


@needs_posix
def test_stale_entry_behind_an_outside_symlink_is_never_removed(tmp_path):
    root, outside = tmp_path / "proj", tmp_path / "outside"
    generate(root, [OPS, FAKE])
    outside.mkdir()
    (outside / "_fake.py").write_text(FAKE.content)  # same bytes as the recorded hash
    (root / "pkg/_fake.py").unlink()
    (root / "pkg").rename(root / "real")
    (root / "pkg").symlink_to(outside, target_is_directory=True)
    (root / "real/_ops.py").rename(outside / "_ops.py")
    plan = plan_changes(root, [PlannedFile("other.py", "x\n", "generated")])
    assert kinds(plan)["pkg/_fake.py"] == "orphan"
    apply_plan(plan)
    assert (outside / "_fake.py").read_text() == FAKE.content


def test_directory_where_a_file_should_be_is_refused_even_with_force(tmp_path):
    generate(tmp_path, PROJECT)
    (tmp_path / "pkg/_fake.py").unlink()
    (tmp_path / "pkg/_fake.py").mkdir()
    (tmp_path / "pkg/_fake.py/keep.txt").write_text("mine\n")
    for force in (False, True):
        error = refusal(tmp_path, PROJECT, force=force)
        assert "pkg/_fake.py: is a directory" in error.render()
        assert not error.problems[0].forceable


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_pipe_where_a_file_should_be_is_refused_without_reading_it(tmp_path):
    generate(tmp_path, [OPS])
    os.mkfifo(tmp_path / "pkg/_fake.py")  # reading it would block forever
    error = refusal(tmp_path, [OPS, FAKE], force=True)
    assert "pkg/_fake.py: is not a regular file" in error.render()


def test_file_where_a_folder_should_be_is_refused(tmp_path):
    generate(tmp_path, [OPS])
    (tmp_path / "scripts").write_text("I am a file\n")
    error = refusal(tmp_path, [OPS, SCRIPT], force=True)
    assert "scripts is a file, but opgen needs it to be a directory" in error.render()


def test_output_directory_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "proj").write_text("file\n")
    for out_dir in (tmp_path / "proj", tmp_path / "proj" / "sub"):
        with pytest.raises(WriteRefused, match="proj exists and is not a directory"):
            plan_changes(out_dir, [OPS])


# --- manifest -------------------------------------------------------------------------------------


def test_manifest_is_deterministic_sorted_json(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    generate(a, PROJECT)
    generate(b, list(reversed(PROJECT)))
    text = (a / MANIFEST).read_text(encoding="utf-8")
    assert text == (b / MANIFEST).read_text(encoding="utf-8")
    assert text == json.dumps(json.loads(text), indent=2, sort_keys=True) + "\n"
    data = json.loads(text)
    assert data["opgen_version"] == write.__version__ and data["format"] == write.MANIFEST_FORMAT


def test_new_opgen_version_rewrites_only_the_manifest(tmp_path, monkeypatch):
    generate(tmp_path, PROJECT)
    before = snapshot(tmp_path)
    monkeypatch.setattr(write, "__version__", "99.0")
    plan = plan_changes(tmp_path, PROJECT)
    assert plan.changed and plan.manifest_changed
    apply_plan(plan)
    after = snapshot(tmp_path)
    assert manifest(tmp_path)["opgen_version"] == "99.0"
    assert {path for path in after if after[path] != before[path] and after[path][0] != "dir"} == {MANIFEST}


@pytest.mark.parametrize("damage", ["{not json", "[]", json.dumps({"format": 1, "files": {"../x": {"owner": "user"}}}),
                                    json.dumps({"format": 1, "files": {"a.py": {"owner": "root"}}}),
                                    json.dumps({"format": 1})])
def test_damaged_manifest_is_refused_and_force_treats_files_as_unknown(tmp_path, damage):
    generate(tmp_path, PROJECT)
    (tmp_path / "pkg/_ops.py").write_text("edit\n")
    (tmp_path / MANIFEST).write_text(damage)
    error = refusal(tmp_path, PROJECT)
    assert ".opgen/manifest.json: is damaged" in error.render()
    plan = generate(tmp_path, PROJECT, force=True)
    assert kinds(plan)["pkg/_ops.py"] == "overwrite"
    assert kinds(plan)["pkg/_fake.py"] == "unchanged"
    assert (tmp_path / plan.backup_dir / "pkg/_ops.py").read_text() == "edit\n"
    assert manifest(tmp_path)["files"]["pkg/_ops.py"]["sha256"] == OPS.sha256


def test_manifest_from_a_newer_opgen_is_refused_even_with_force(tmp_path):
    generate(tmp_path, PROJECT)
    (tmp_path / MANIFEST).write_text(json.dumps({"format": 2, "files": {}}))
    error = refusal(tmp_path, PROJECT, force=True)
    assert "upgrade opgen" in error.render()


# --- modes ----------------------------------------------------------------------------------------


@needs_posix
def test_new_files_follow_the_umask_and_the_executable_flag(tmp_path):
    old = os.umask(0o027)
    try:
        generate(tmp_path, PROJECT)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "pkg/_ops.py").stat().st_mode) == 0o640
    assert stat.S_IMODE((tmp_path / "scripts/run.sh").stat().st_mode) == 0o750
    assert stat.S_IMODE((tmp_path / "pkg/kernel.py").stat().st_mode) == 0o640


@needs_posix
def test_update_keeps_the_users_permissions(tmp_path):
    generate(tmp_path, PROJECT)
    os.chmod(tmp_path / "pkg/_ops.py", 0o600)
    os.chmod(tmp_path / "scripts/run.sh", 0o700)
    generate(tmp_path, [edited(OPS, "v2\n"), FAKE, KERNEL, edited(SCRIPT, "#!/bin/sh\necho v2\n")])
    assert stat.S_IMODE((tmp_path / "pkg/_ops.py").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "scripts/run.sh").stat().st_mode) == 0o700


@needs_posix
def test_executable_flag_change_alone_is_a_mode_only_update(tmp_path):
    generate(tmp_path, PROJECT)
    inode = (tmp_path / "pkg/_ops.py").stat().st_ino
    plan = generate(tmp_path, [PlannedFile(OPS.path, OPS.content, "generated", executable=True), FAKE, KERNEL,
                               SCRIPT])
    assert kinds(plan)["pkg/_ops.py"] == "update"
    assert "executable bit" in plan.render()
    info = (tmp_path / "pkg/_ops.py").stat()
    assert info.st_mode & stat.S_IXUSR and info.st_ino == inode
    plan = generate(tmp_path, PROJECT)
    assert not (tmp_path / "pkg/_ops.py").stat().st_mode & 0o111
    assert not plan_changes(tmp_path, PROJECT).changed


# --- atomicity ------------------------------------------------------------------------------------


class HalfWrite:
    """A stream that writes half of what it is given, then fails like a full disk."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, data):
        self.stream.write(data[: len(data) // 2])
        self.stream.flush()
        raise OSError(28, "No space left on device")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stream.close()


def fail_on_call(monkeypatch, name: str, failing_call: int) -> None:
    real = getattr(os, name)
    calls = {"n": 0}

    def flaky(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == failing_call:
            if name == "fdopen":
                return HalfWrite(real(*args, **kwargs))
            raise OSError(28, "No space left on device")
        return real(*args, **kwargs)

    monkeypatch.setattr(os, name, flaky)


@pytest.mark.parametrize(("name", "failing_call", "new_files"),
                         [("fdopen", 2, 0), ("fsync", 2, 0), ("replace", 2, 1), ("replace", 4, 3)])
def test_failure_midway_leaves_complete_files_and_a_valid_old_manifest(tmp_path, monkeypatch, name, failing_call,
                                                                       new_files):
    """Three files are staged and fsynced, then renamed, then the manifest: a failure while staging (a half
    write, an fsync) changes no file; one in the 2nd rename leaves one new file; one in the manifest's
    rename leaves all three new. Never a partial file, never a new manifest."""
    generate(tmp_path, PROJECT)
    old_manifest = (tmp_path / MANIFEST).read_bytes()
    version2 = [edited(OPS, "v2 ops\n"), edited(FAKE, "v2 fake\n"), KERNEL, edited(SCRIPT, "#!/bin/sh\nv2\n")]
    plan = plan_changes(tmp_path, version2)
    with monkeypatch.context() as patch:
        fail_on_call(patch, name, failing_call)
        with pytest.raises(OpgenError, match="No space"):
            apply_plan(plan)
    # each generated file is entirely old or entirely new, the first `new_files` in write (path) order new
    pairs = sorted(((old, new) for old, new in zip(PROJECT, version2) if old.owner == "generated"),
                   key=lambda pair: pair[0].path)
    states = [(tmp_path / old.path).read_text() for old, _ in pairs]
    expected = [new.content for _, new in pairs[:new_files]] + [old.content for old, _ in pairs[new_files:]]
    assert states == expected
    assert not [path for path in snapshot(tmp_path) if path.endswith(".opgen-tmp")]
    assert (tmp_path / MANIFEST).read_bytes() == old_manifest
    # the next run, without --force, finishes the job
    plan = generate(tmp_path, version2)
    assert set(kinds(plan).values()) <= {"update", "unchanged", "keep"}
    for file in version2:
        assert (tmp_path / file.path).read_text() == file.content
    assert not plan_changes(tmp_path, version2).changed


def open_descriptors() -> int | None:
    return len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None


def test_many_files_are_synced_in_groups_without_leaking_descriptors(tmp_path, monkeypatch):
    monkeypatch.setattr(staging.Batch, "_OPEN_FILES", 3)
    files = [PlannedFile(f"pkg/m{index:02}.py", f"x = {index}\n", "generated") for index in range(10)]
    before = open_descriptors()
    generate(tmp_path, files)
    assert [(tmp_path / file.path).read_text() for file in files] == [file.content for file in files]
    with monkeypatch.context() as patch:  # a failure after two groups were synced: still nothing renamed
        fail_on_call(patch, "fdopen", 8)
        with pytest.raises(OpgenError, match="No space"):
            apply_plan(plan_changes(tmp_path, [edited(file, "v2\n") for file in files]))
    assert [(tmp_path / file.path).read_text() for file in files] == [file.content for file in files]
    assert not [path for path in snapshot(tmp_path) if path.endswith(".opgen-tmp")]
    assert open_descriptors() == before


def test_failure_during_a_first_run_can_be_resumed(tmp_path, monkeypatch):
    with monkeypatch.context() as patch:
        fail_on_call(patch, "replace", 3)
        with pytest.raises(OpgenError):
            apply_plan(plan_changes(tmp_path / "proj", PROJECT))
    assert not (tmp_path / "proj" / MANIFEST).exists()
    generate(tmp_path / "proj", PROJECT)
    assert not plan_changes(tmp_path / "proj", PROJECT).changed


def test_disk_changed_between_plan_and_apply_writes_nothing(tmp_path):
    generate(tmp_path, PROJECT)
    plan = plan_changes(tmp_path, [edited(OPS, "v2\n"), edited(FAKE, "v2\n"), KERNEL, SCRIPT])
    (tmp_path / "pkg/_ops.py").write_text("edited after the dry run\n")
    before = snapshot(tmp_path)
    with pytest.raises(OpgenError, match="changed after opgen planned"):
        apply_plan(plan)
    assert snapshot(tmp_path) == before


# --- rendering ------------------------------------------------------------------------------------


def test_render_is_one_sorted_line_per_action_and_a_count(tmp_path):
    generate(tmp_path, [*PROJECT, PlannedFile("old.py", "o\n", "generated")])
    (tmp_path / "pkg/_fake.py").write_text("edit\n")
    plan = plan_changes(tmp_path, [edited(OPS, "v2\n"), FAKE, KERNEL, SCRIPT], force=True)
    lines = plan.render().splitlines()
    assert lines[0] == "remove     old.py  (no longer generated)"
    assert lines[1].startswith("overwrite  pkg/_fake.py  (edited by hand since opgen generated it; your version "
                               "saved to .opgen/backup/")
    assert lines[2:5] == ["update     pkg/_ops.py", "keep       pkg/kernel.py  (yours; never overwritten)",
                          "unchanged  scripts/run.sh"]
    assert lines[5] == f"{tmp_path}: 1 update, 1 overwrite, 1 remove, 1 unchanged, 1 keep"
    assert plan.render(include_unchanged=False).splitlines() == lines[:3] + lines[5:]
    assert plan.render() == plan_changes(tmp_path, [SCRIPT, KERNEL, FAKE, edited(OPS, "v2\n")], force=True).render()


def test_write_files_dry_run_writes_nothing(tmp_path):
    plan = write.write_files(tmp_path / "proj", PROJECT, dry_run=True)
    assert not (tmp_path / "proj").exists()
    assert plan.summary["create"] == 4
    assert write.write_files(tmp_path / "proj", PROJECT).render() == plan.render()
    assert not write.write_files(tmp_path / "proj", PROJECT).changed


def test_planning_writes_nothing_even_when_the_plan_would(tmp_path):
    generate(tmp_path, [*PROJECT, PlannedFile("old.py", "o\n", "generated")])
    (tmp_path / "pkg/_ops.py").write_text("edit\n")
    before = snapshot(tmp_path)
    plan = plan_changes(tmp_path, [FAKE, KERNEL, edited(SCRIPT, "v2\n"), OPS], force=True)
    assert set(kinds(plan).values()) == {"overwrite", "remove", "update", "unchanged", "keep"}
    assert snapshot(tmp_path) == before


def test_writer_does_not_import_torch():
    code = "import sys, opgen.render.write; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_planned_file_rejects_an_unknown_owner():
    with pytest.raises(ValueError, match="owner"):
        PlannedFile("a.py", "", "opgen")


# --- nothing is lost, whatever happens in between ---------------------------------------------------

PATHS = ("a.py", "pkg/b.py", "pkg/c.py")
TEXTS = ("one\n", "two\n", "three\n")
planned_files = st.lists(
    st.builds(PlannedFile, st.sampled_from(PATHS), st.sampled_from(TEXTS), st.sampled_from(write.OWNERS)),
    unique_by=lambda file: file.path)
steps = st.one_of(
    st.tuples(st.just("generate"), planned_files, st.booleans()),
    st.tuples(st.just("edit"), st.sampled_from(PATHS), st.sampled_from(("mine\n", "also mine\n", *TEXTS))),
    st.tuples(st.just("delete"), st.sampled_from(PATHS), st.none()),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(steps, min_size=1, max_size=8))
@example([("edit", "a.py", "one\n"), ("generate", [PlannedFile("a.py", "one\n", "user")], False),
          ("generate", [], False)])
@example([("edit", "a.py", "one\n"), ("generate", [PlannedFile("a.py", "one\n", "user")], False),
          ("generate", [PlannedFile("a.py", "two\n", "generated")], False)])
def test_user_text_survives_any_sequence_of_edits_and_runs(history):
    """Text opgen did not write is, after every run, still at its path or in a backup; a refused run
    changes nothing; a run that succeeded is idempotent."""
    with tempfile.TemporaryDirectory() as name:
        root = Path(name) / "proj"
        written: dict[str, set[bytes]] = {path: set() for path in PATHS}  # every text opgen put at each path
        for step, argument, option in history:
            if step == "edit":
                (root / argument).parent.mkdir(parents=True, exist_ok=True)
                (root / argument).write_text(option)
                continue
            if step == "delete":
                with contextlib.suppress(FileNotFoundError):
                    (root / argument).unlink()
                continue
            precious = {path: (root / path).read_bytes() for path in PATHS
                        if (root / path).is_file() and (root / path).read_bytes() not in written[path]}
            before = snapshot(root)
            try:
                plan = generate(root, argument, force=option)
            except WriteRefused:
                assert snapshot(root) == before
                continue
            for path, text in precious.items():
                backups = [backup.read_bytes() for backup in root.glob(f"{BACKUP_DIR}/*/{path}")]
                assert (root / path).read_bytes() == text or text in backups, (path, plan.render())
            for file in argument:
                if file.owner == "generated":
                    assert (root / file.path).read_text() == file.content
                if kinds(plan)[file.path] != "keep":
                    written[file.path].add(file.data)
            assert not plan_changes(root, argument).changed


# --- what an interrupted run left (issue 29) ------------------------------------------------------------------


def dead_pid() -> int:
    """The pid of a process that has ended."""
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    return int(done.stdout)


def test_staged_files_of_a_dead_run_are_removed_by_the_next_and_make_no_directory_foreign(tmp_path):
    root = tmp_path / "proj"
    (root / "pkg").mkdir(parents=True)
    pid = dead_pid()
    leftovers = [root / f".README.md.{pid}-0123abcd.opgen-tmp", root / "pkg" / f"._ops.py.{pid}-89abcdef.opgen-tmp",
                 root / "pkg" / ".kernel.py.deadbeef.opgen-tmp"]  # opgen's older name, without the pid
    for path in leftovers:
        path.write_text("half")
    (root / "pkg" / "_ops.py").write_bytes(OPS.data)  # renamed into place before the kill
    plan = plan_changes(root, PROJECT)  # no "opgen did not create"
    removed = {action.path: action.reason for action in plan.actions if action.kind == "remove"}
    assert removed == dict.fromkeys((path.relative_to(root).as_posix() for path in leftovers),
                                    "staged by an interrupted opgen run")
    assert "remove     pkg/._ops.py." in plan.render()  # a dry run shows it
    apply_plan(plan)
    assert not list(root.rglob("*.opgen-tmp"))
    assert not plan_changes(root, PROJECT).changed


def test_a_live_runs_staged_file_is_left_alone_and_is_not_foreign(tmp_path):
    root = tmp_path / "proj"
    root.mkdir()
    mine = root / f".README.md.{os.getpid()}-0123abcd.opgen-tmp"  # this process: alive
    mine.write_text("being written")
    plan = plan_changes(root, PROJECT)
    assert mine.name not in plan.render()
    apply_plan(plan)
    assert mine.read_text() == "being written"


def test_a_user_file_named_like_a_staged_one_but_not_is_foreign(tmp_path):
    root = tmp_path / "proj"
    root.mkdir()
    (root / ".notes.opgen-tmp").write_text("mine")  # no hex part: not opgen's naming
    assert refusal(root, PROJECT).problems[0].kind == "foreign"


def test_the_staged_manifest_of_a_killed_run_is_its_journal(tmp_path):
    """Killed after renaming its files, before its manifest: the files it created are recorded as opgen's (a user
    file it wrote keeps its sha256, so a later plan without it removes it), as the uninterrupted run records."""
    root, clean = tmp_path / "proj", tmp_path / "clean"
    version1 = [OPS, FAKE, SCRIPT]
    for directory in (root, clean):
        generate(directory, version1)
    plan = plan_changes(clean, PROJECT)
    apply_plan(plan)
    # the killed run: files renamed into place, its manifest still staged
    for file in PROJECT:
        (root / file.path).parent.mkdir(parents=True, exist_ok=True)
        (root / file.path).write_bytes(file.data)
    write._set_executable(root / SCRIPT.path, True)
    (root / ".opgen" / f".manifest.json.{dead_pid()}-0123abcd.opgen-tmp").write_text(plan.manifest_text)
    generate(root, PROJECT)
    assert manifest(root)["files"] == manifest(clean)["files"]
    assert manifest(root)["files"][KERNEL.path]["sha256"] == KERNEL.sha256
    assert not list(root.rglob("*.opgen-tmp"))
    assert kinds(generate(root, version1))[KERNEL.path] == "remove"  # never edited, no longer planned


def test_a_failure_while_staging_removes_the_directories_it_made(tmp_path, monkeypatch):
    fail_on_call(monkeypatch, "fdopen", 3)
    with pytest.raises(OpgenError, match=r"cannot write .*: No space left on device \(nothing was written\)"):
        apply_plan(plan_changes(tmp_path / "new" / "proj", PROJECT))
    assert not (tmp_path / "new").exists()


def test_a_file_name_over_255_bytes_is_a_path_problem(tmp_path):
    planned = PlannedFile("pkg/" + "k" * 253 + ".py", "x = 1\n", "user")
    problem = refusal(tmp_path / "proj", [planned]).problems[0]
    assert problem.kind == "path" and "has a name of 256 bytes; file systems allow 255" in problem.message
