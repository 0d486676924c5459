"""A generated project's metadata is the user's, and a project of the old layout is migrated in place: through the
real `opgen new`.

- pyproject.toml is created once and then the user's (its version, dependencies and tool settings): a regeneration,
  with the spec unchanged or changed, keeps it without --force; its `test` extra pins the opgen whose checks the
  tests call (opgen.testing).
- A project generated before the checks became a library (five modules copied into tests/, tests/test_graph_entry.py,
  pyproject.toml generated) is migrated by a plain `opgen new`: the unedited copies and test file removed, the new
  test file written, every file the user edited kept byte for byte, each change printed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from forked_python import run_pytest
from new_helpers import REPO, opgen, snapshot

from opgen.render.context import opgen_requirement

RMS_NORM = REPO / "examples" / "rms_norm.yaml"
# the last commit of main whose projects carry the checks as copies (the layout before opgen.testing)
OLD_LAYOUT = "2e99743e76efb43101f198a2bbd31b55894c7479"
COPIES = ("graph_checks.py", "input_variants.py", "npugraph_ex_cpu.py", "npu_graph_cpu.py", "npugraph_ex_features.py")


def bump(pyproject: Path) -> bytes:
    """The user's edits: a new version and a dependency."""
    text = pyproject.read_text(encoding="utf-8")
    assert 'version = "0.1.0"' in text and "dependencies = [" in text
    text = text.replace('version = "0.1.0"', 'version = "0.2.0"').replace("dependencies = [",
                                                                         'dependencies = ["einops>=0.8", ')
    pyproject.write_text(text, encoding="utf-8")
    return pyproject.read_bytes()


def test_the_test_extra_pins_a_compatible_opgen(tmp_path):
    assert opgen("new", str(RMS_NORM), "-o", str(tmp_path / "p")).returncode == 0
    text = (tmp_path / "p" / "pyproject.toml").read_text(encoding="utf-8")
    assert opgen_requirement("0.1.0") == "opgen>=0.1,<0.2" and opgen_requirement("1.4.2") == "opgen>=1.4,<2"
    assert f'test = ["{opgen_requirement()}", "numpy", "pytest>=7"]' in text
    assert "pythonpath" not in text  # the plugin finds the package; nothing of opgen's to keep in sync there


def test_a_version_bump_and_a_dependency_survive_opgen_new_without_force(tmp_path):
    target = tmp_path / "p"
    assert opgen("new", str(RMS_NORM), "-o", str(target)).returncode == 0
    edited = bump(target / "pyproject.toml")
    again = opgen("new", cwd=target)  # the stored spec, unchanged
    assert again.returncode == 0, again.stderr
    assert (target / "pyproject.toml").read_bytes() == edited
    spec = target / "opgen.yaml"  # a changed spec: the generated files follow it, pyproject.toml stays the user's
    spec.write_text(spec.read_text(encoding="utf-8").replace("RMS normalisation over", "RMS norm over"),
                    encoding="utf-8")
    changed = opgen("new", cwd=target)
    assert changed.returncode == 0, changed.stderr
    assert (target / "pyproject.toml").read_bytes() == edited
    assert "update     myops/ops.py" in changed.stdout and "pyproject.toml" not in changed.stdout.replace(
        "keep       pyproject.toml  (yours; never overwritten)", "")


def test_the_twin_a_hand_edit_of_a_generated_file_is_still_refused(tmp_path):
    """The twin: a hand edit of a file opgen generates (ops.py) is still refused without --force."""
    target = tmp_path / "p"
    assert opgen("new", str(RMS_NORM), "-o", str(target)).returncode == 0
    ops = target / "myops" / "ops.py"
    ops.write_text(ops.read_text(encoding="utf-8") + "# mine\n", encoding="utf-8")
    refused = opgen("new", cwd=target)
    assert refused.returncode != 0 and "myops/ops.py: edited by hand" in refused.stderr, refused.stderr


def old_opgen(tmp_path: Path) -> Path:
    """opgen as of OLD_LAYOUT (its package, templates and examples), exported from this checkout's git history."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout: the old layout's opgen comes from its history")
    archive = subprocess.run(["git", "-C", str(REPO), "archive", OLD_LAYOUT, "opgen", "templates", "examples"],
                             capture_output=True, check=False)
    if archive.returncode != 0:
        pytest.skip(f"commit {OLD_LAYOUT[:8]} is not in this checkout's history")
    root = tmp_path / "old_opgen"
    root.mkdir()
    subprocess.run(["tar", "-x", "-C", str(root)], input=archive.stdout, check=True)
    return root


@pytest.mark.slow  # opgen of the old layout, then one tier of the migrated project's tests
def test_a_project_of_the_old_layout_is_migrated_in_place_with_no_user_byte_lost(tmp_path):
    root = old_opgen(tmp_path)
    target = tmp_path / "p"
    env = {**os.environ, "PYTHONPATH": str(root)}
    # the example as it was then (today's may use keys the old opgen does not know)
    made = subprocess.run([sys.executable, "-m", "opgen", "new", str(root / "examples" / "rms_norm.yaml"), "-o",
                           str(target)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, check=False)
    assert made.returncode == 0, made.stderr
    tests = target / "tests"
    assert {path.name for path in tests.iterdir()} == {"test_graph_entry.py", *COPIES}
    # the user's edits: a kernel, the version and a dependency in pyproject.toml (then generated), a note in a copy
    kernel = target / "myops" / "kernels" / "rms_norm_cpu.py"
    kernel.write_text(kernel.read_text(encoding="utf-8") + "# tuned\n", encoding="utf-8")
    pyproject = bump(target / "pyproject.toml")
    variants = tests / "input_variants.py"
    variants.write_text(variants.read_text(encoding="utf-8") + "# my note\n", encoding="utf-8")
    before = snapshot(target)

    done = opgen("new", cwd=target)
    assert done.returncode == 0, done.stderr
    after = snapshot(target)
    for path in ("myops/kernels/rms_norm_cpu.py", "pyproject.toml", "tests/input_variants.py"):
        assert after[path] == before[path], path  # no user byte lost
    assert after["pyproject.toml"] == pyproject
    for name in ("test_graph_entry.py", *(copy for copy in COPIES if copy != "input_variants.py")):
        assert f"tests/{name}" not in after, name
        assert f"remove     tests/{name}  (no longer generated)" in done.stdout, done.stdout
    assert "orphan     tests/input_variants.py  (no longer generated, but edited by hand; left in place)" in done.stdout
    assert "create     tests/test_myops.py" in done.stdout
    assert "keep       pyproject.toml  (now yours; your edits kept)" in done.stdout
    # and the migrated project's tests run on the library (its pyproject, the user's, still names tests/ on the path)
    run = run_pytest(["-q", "-p", "no:cacheprovider", "--opgen-tiers=registration", str(target)], cwd=tmp_path,
                     env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert run.returncode == 0 and "1 passed" in run.stdout, run.stdout[-2000:]
