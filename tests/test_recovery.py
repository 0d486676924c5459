"""A run of `opgen new` killed outright (SIGKILL, nothing of opgen runs after it) at a staged point: the next run,
without --force, finishes the job: the project and its manifest are those of a run never interrupted, and no
staged file is left (issue 29)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(os.name != "posix", reason="SIGKILL is POSIX")
SPEC = """\
namespace: rec
style: {style}
device: npu
ops:
  - schema: "double(Tensor x) -> Tensor"
    outputs:
      out0: {{like: x}}
    reference: "return x * 2"
    examples:
      - {{x: {{shape: [2, 3]}}}}
"""
# Kill this very process with SIGKILL at the AT-th staged file written ("stage") or renamed into place ("rename").
KILLING = """
import os, signal, sys
from opgen.render import staging
point, at = sys.argv.pop(1), int(sys.argv.pop(1))
count = [0]
def tick():
    count[0] += 1
    if count[0] == at:
        os.kill(os.getpid(), signal.SIGKILL)
if point == "stage":
    add = staging.Batch.add
    def staged(self, *args, **kwargs):
        add(self, *args, **kwargs)
        tick()
    staging.Batch.add = staged
else:
    replace = os.replace
    def renamed(src, dst):
        replace(src, dst)
        if str(src).endswith(staging.SUFFIX):
            tick()
    os.replace = renamed
from opgen.cli import main
main()
"""


def opgen(*args: str, kill: tuple[str, int] | None = None) -> subprocess.CompletedProcess:
    command = [sys.executable, "-c", KILLING, *map(str, kill)] if kill else [sys.executable, "-m", "opgen"]
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=120, check=False)


def generate_in_process(spec: Path, out: Path, *, dry_run: bool = False):
    """What `opgen new SPEC -o OUT` does (a run never interrupted), without a new interpreter."""
    from opgen.render.templates import render_package
    from opgen.render.write import write_files
    from opgen.spec.load import load_spec

    return write_files(out, render_package(load_spec(str(spec))), dry_run=dry_run)


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not p.relative_to(root).as_posix().startswith(".opgen/")}


def manifest(root: Path) -> dict:
    return json.loads((root / ".opgen" / "manifest.json").read_text())["files"]


def staged(root: Path) -> list[str]:
    return sorted(p.name for p in root.rglob("*.opgen-tmp"))


def test_a_first_run_killed_midway_is_finished_by_the_next(tmp_path):
    """Killed after 4 renames: some files in place, the others (and the manifest) still staged."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(style="library"))
    out, clean = tmp_path / "out", tmp_path / "clean"
    killed = opgen("new", str(spec), "-o", str(out), kill=("rename", 4))
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert staged(out), "the kill came after something was staged"
    again = opgen("new", str(spec), "-o", str(out))
    assert again.returncode == 0, again.stderr  # not "opgen did not create ..."
    assert "staged by an interrupted opgen run" in again.stdout
    generate_in_process(spec, clean)
    assert staged(out) == []
    assert tree(out) == tree(clean)
    assert manifest(out) == manifest(clean)


def test_a_regeneration_killed_after_its_renames_is_finished_from_its_staged_manifest(tmp_path):
    """Killed after every file was renamed, before the manifest: the next run learns from the staged manifest that
    the kernels there are opgen's (a later spec without the op removes them), as an uninterrupted run records."""
    first, second = tmp_path / "first.yaml", tmp_path / "second.yaml"
    first.write_text(SPEC.format(style="library"))
    second.write_text(SPEC.format(style="library").replace("device: npu", "device: cuda"))
    out, clean = tmp_path / "out", tmp_path / "clean"
    assert opgen("new", str(first), "-o", str(out)).returncode == 0
    generate_in_process(first, clean)
    renames = sum(1 for action in generate_in_process(second, out, dry_run=True).actions
                  if action.kind in ("create", "update", "overwrite"))
    killed = opgen("new", str(second), "-o", str(out), kill=("rename", renames))  # the last file, not the manifest
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert staged(out) == [next(name for name in staged(out) if name.startswith(".manifest.json."))]
    again = opgen("new", str(second), "-o", str(out))
    assert again.returncode == 0, again.stderr
    generate_in_process(second, clean)
    assert staged(out) == [] and tree(out) == tree(clean)
    assert manifest(out) == manifest(clean)
    assert manifest(out)["rec/kernels/double_cuda.py"]["sha256"] is not None  # opgen's: it wrote it
