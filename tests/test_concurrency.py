"""Two opgen runs at once on the same files (issues 37 and 38), through the real command line: a rewrite in place is
locked against another opgen and based on the bytes it read, so two `opgen lint --fix` (pre-commit runs hooks on file
batches in parallel; an editor formats on save), two `opgen new` on one project or two `opgen add` on one op-plugin
checkout end as one clean run would: never a merged file, never a lost entry, never "Fixed" when nothing was.

The deterministic cases pause the first run at the worst moment (after it read, before it writes) while the second
runs to the end; the loops start real pairs at once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import run_opgen_command

pytestmark = pytest.mark.skipif(os.name != "posix", reason="flock is POSIX")

OPS = '''\
import torch

lib = torch.library.Library("myops", "FRAGMENT")
lib.define("scale(Tensor x, float s) -> Tensor")


def scale_kernel(x, s):
    return x * s


lib.impl("scale", scale_kernel, "npu")


@torch.library.register_fake("myops::scale")
def _(x, s):
    return torch.empty_like(x)
'''
FIXED = OPS.replace('"npu"', '"PrivateUse1"')
SPEC = """\
namespace: conc
style: library
device: cpu
ops:
  - schema: "double(Tensor x) -> Tensor"
    doc: "{doc}"
    outputs:
      out0: {{like: x}}
    reference: "return x * 2"
    examples:
      - {{x: {{shape: [2, 3]}}}}
"""
# Runs opgen's main with FUNCTION (module:attribute) paused at its first call, until the file GO exists (READY is
# made when it pauses): the run has read its input and decided what to write, and writes nothing yet. With
# module:attribute:after it pauses when the call returns (the first call made the plan).
PAUSED = """
import importlib, os, sys, time
function, ready, go = sys.argv.pop(1), sys.argv.pop(1), sys.argv.pop(1)
module_name, name, *when = function.split(":")
module = importlib.import_module(module_name)
original = getattr(module, name)
def wait():
    open(ready, "w").close()
    deadline = time.monotonic() + 60
    while not os.path.exists(go) and time.monotonic() < deadline:
        time.sleep(0.02)
def paused(*args, **kwargs):
    if when:
        result = original(*args, **kwargs)
        wait()
        return result
    wait()
    return original(*args, **kwargs)
setattr(module, name, paused)
from opgen.cli import main
main()
"""


def start_paused(tmp_path: Path, function: str, *args: str) -> tuple[subprocess.Popen, Path, Path]:
    ready, go = tmp_path / "ready", tmp_path / "go"
    process = subprocess.Popen([sys.executable, "-c", PAUSED, function, str(ready), str(go), *args],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not ready.exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the paused run never reached its pause"
        time.sleep(0.02)
    return process, ready, go


def finish(process: subprocess.Popen, go: Path) -> subprocess.CompletedProcess:
    go.touch()
    out, err = process.communicate(timeout=120)
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


# --- two fixers ---------------------------------------------------------------------------------------------


def test_a_fixer_whose_file_another_fixed_meanwhile_rewrites_nothing_and_says_so(tmp_path):
    """The case that merged `"npu"` into `"PrivateUse1vateUse1"`: the first fixer linted the file, the second fixed
    it, then the first applied its columns to the fixed text. Now the first sees other bytes than it read, lints
    again, and finds nothing left to fix."""
    ops = tmp_path / "ops.py"
    ops.write_text(OPS)
    first, _, go = start_paused(tmp_path, "opgen.lint.fix:apply_edits", "lint", "--fix", str(ops))
    second = run_opgen_command("lint", "--fix", str(ops))
    assert second.returncode == 0 and "Fixed 1 problem" in second.stdout, second
    first = finish(first, go)
    assert first.returncode == 0, first
    assert "Fixed" not in first.stdout and "All checks passed" in first.stdout, first.stdout
    assert ops.read_text() == FIXED


def test_a_fixer_whose_file_an_editor_changed_meanwhile_fixes_what_is_there_now(tmp_path):
    """Not another opgen: an editor saved the file (a line added above) between the lint and the fix. The fix
    lands on the literal where it is now, not on the line and column it was found at."""
    ops = tmp_path / "ops.py"
    ops.write_text(OPS)
    first, _, go = start_paused(tmp_path, "opgen.lint.fix:apply_edits", "lint", "--fix", str(ops))
    ops.write_text("# edited\n" + OPS)
    first = finish(first, go)
    assert first.returncode == 0 and "Fixed 1 problem" in first.stdout, first
    assert ops.read_text() == "# edited\n" + FIXED


def fixer_pairs(tmp_path: Path, pairs: int) -> list[str]:
    """`pairs` times: two `opgen lint --fix` started at once on one file; what went wrong, if anything."""
    ops, problems = tmp_path / "ops.py", []
    command = [sys.executable, "-m", "opgen", "lint", "--fix", str(ops)]
    for pair in range(pairs):
        ops.write_text(OPS)
        both = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for _ in range(2)]
        outcomes = [(process.wait(timeout=120), *process.communicate()) for process in both]
        fixed = sum("Fixed 1 problem" in out for _, out, _ in outcomes)
        if ops.read_text() != FIXED or fixed != 1 or any(code != 0 for code, _, _ in outcomes):
            problems.append(f"pair {pair}: {ops.read_text()!r}, {outcomes}")
    return problems


def test_two_fixers_started_at_once_end_as_one_fix(tmp_path):
    assert fixer_pairs(tmp_path, 3) == []


@pytest.mark.slow
@pytest.mark.stress  # 200 processes, half a minute: .ci/run's stress step; the 3-pair form above runs by default
def test_a_hundred_concurrent_fixer_pairs_end_as_one_fix(tmp_path):
    """The issue's measure: 100 pairs, each ending in the file one clean fix gives, one "Fixed", both exit 0."""
    assert fixer_pairs(tmp_path, 100) == []


# --- two generators -----------------------------------------------------------------------------------------


def clean_project(tmp_path: Path, doc: str) -> dict[str, bytes]:
    """The files (manifest aside: it names opgen's version) of a project generated once, from scratch."""
    spec = tmp_path / f"clean-{doc}.yaml"
    spec.write_text(SPEC.format(doc=doc))
    out = tmp_path / f"clean-{doc}"
    done = run_opgen_command("new", str(spec), "-o", str(out))
    assert done.returncode == 0, done.stderr
    return files_of(out)


def files_of(root: Path) -> dict[str, bytes]:
    return {str(path.relative_to(root)): path.read_bytes() for path in sorted(root.rglob("*"))
            if path.is_file() and ".opgen" not in path.parts}


def test_a_generator_whose_project_another_wrote_meanwhile_plans_again(tmp_path):
    """Two `opgen new` of different specs into one project: the first plans, the second writes the whole
    project, then the first writes. It plans again from what is there (the second run's files are opgen's now, in
    the manifest), so the project ends as the first spec's, whole, and a third run has nothing to write."""
    first_spec, second_spec = tmp_path / "first.yaml", tmp_path / "second.yaml"
    first_spec.write_text(SPEC.format(doc="first"))
    second_spec.write_text(SPEC.format(doc="second"))
    out = tmp_path / "proj"
    first, _, go = start_paused(tmp_path, "opgen.render.write:apply_plan", "new", str(first_spec), "-o", str(out))
    second = run_opgen_command("new", str(second_spec), "-o", str(out))
    assert second.returncode == 0, second.stderr
    first = finish(first, go)
    assert first.returncode == 0, first.stderr
    assert "planning again from what is there now" in first.stderr, first.stderr
    assert files_of(out) == clean_project(tmp_path, "first")
    again = run_opgen_command("new", str(first_spec), "-o", str(out))
    assert again.returncode == 0 and "nothing to write" in again.stdout, again


@pytest.mark.slow
def test_two_generators_started_at_once_end_as_one_run(tmp_path):
    """Pairs of `opgen new` started together into one new directory, then into the project they made (different
    specs): every run ends in the project or a located refusal, and the project is always one spec's, whole, with
    a manifest that knows every file."""
    specs = []
    for doc in ("first", "second"):
        specs.append(tmp_path / f"{doc}.yaml")
        specs[-1].write_text(SPEC.format(doc=doc))
    clean = {doc: clean_project(tmp_path, doc) for doc in ("first", "second")}
    out = tmp_path / "proj"
    for _ in range(3):
        both = [subprocess.Popen([sys.executable, "-m", "opgen", "new", str(spec), "-o", str(out)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for spec in specs]
        for process in both:
            code = process.wait(timeout=120)
            _, err = process.communicate()
            assert code in (0, 2) and "internal error" not in err and "Traceback" not in err, err
            assert code == 0 or "error: " in err, err
        assert files_of(out) in clean.values()
        manifest = json.loads((out / ".opgen" / "manifest.json").read_text())
        assert set(manifest["files"]) == set(files_of(out))


# --- two opgen add on one op-plugin checkout ----------------------------------------------------------------

OP_PLUGIN_FIXTURE = Path(__file__).parent / "fixtures" / "op_plugin_root"
EXAMPLES = Path(__file__).parent.parent / "examples" / "op_plugin"
FIRST, SECOND = EXAMPLES / "rms_norm.yaml", EXAMPLES / "kv_cache_update.yaml"
FUNCTIONS = "op_plugin/config/op_plugin_functions.yaml"


def checkout(tmp_path: Path, name: str) -> Path:
    import shutil

    return Path(shutil.copytree(OP_PLUGIN_FIXTURE, tmp_path / name))


def added_in_order(tmp_path: Path, *specs: Path) -> dict[str, bytes]:
    """The checkout (its record included) after `opgen add` of each spec, one run after the other."""
    root = checkout(tmp_path, "-".join(spec.stem for spec in specs))
    for spec in specs:
        done = run_opgen_command("add", "--op-plugin-root", str(root), str(spec))
        assert done.returncode == 0, done.stderr
    return all_files(root)


def all_files(root: Path) -> dict[str, bytes]:
    return {str(path.relative_to(root)): path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()}


def test_an_add_whose_checkout_another_add_wrote_meanwhile_plans_again(tmp_path):
    """The first `opgen add` has planned (from the checkout without the second's op), the second adds its op, then
    the first writes. Before the lock, the first wrote op_plugin_functions.yaml, the Meta module, the docs, the
    JSON and the fake test from the bytes it had read: the second op vanished from all of them (its kernel stayed,
    registered nowhere). Now the first plans again under the lock: both ops, as if the runs took turns."""
    root = checkout(tmp_path, "op-plugin")
    first, _, go = start_paused(tmp_path, "opgen.op_plugin.add:plan_add:after",
                                "add", "--op-plugin-root", str(root), str(FIRST))
    second = run_opgen_command("add", "--op-plugin-root", str(root), str(SECOND))
    assert second.returncode == 0, second.stderr
    first = finish(first, go)
    assert first.returncode == 0, first.stderr
    assert all_files(root) == added_in_order(tmp_path, SECOND, FIRST)
    assert "planning again from what is there now" in first.stderr, first.stderr
    for spec in (FIRST, SECOND):
        again = run_opgen_command("add", "--op-plugin-root", str(root), str(spec))
        assert again.returncode == 0 and again.stdout.startswith("nothing to do"), again


def test_an_add_whose_file_an_editor_saved_meanwhile_keeps_the_edit(tmp_path):
    """An editor saved op_plugin_functions.yaml (an entry's comment) between the plan and the write: the edit and
    the new op are both in the file."""
    root = checkout(tmp_path, "op-plugin")
    first, _, go = start_paused(tmp_path, "opgen.op_plugin.add:plan_add:after",
                                "add", "--op-plugin-root", str(root), str(FIRST))
    functions = root / FUNCTIONS
    edited = functions.read_text(encoding="utf-8").replace("custom:\n", "custom:\n  # edited while opgen planned\n", 1)
    functions.write_text(edited, encoding="utf-8")
    first = finish(first, go)
    assert first.returncode == 0, first.stderr
    text = functions.read_text(encoding="utf-8")
    assert "  # edited while opgen planned\n" in text and "npu_rms_norm(" in text
    assert f"{FUNCTIONS} changed since opgen add read it" in first.stderr, first.stderr


def test_two_adds_started_at_once_end_as_two_turns(tmp_path):
    """Real processes, started together on one checkout (different specs): both exit 0 and the checkout is what
    the two runs give one after the other, in one order or the other."""
    turns = [added_in_order(tmp_path, FIRST, SECOND), added_in_order(tmp_path, SECOND, FIRST)]
    for pair in range(2):
        root = checkout(tmp_path, f"pair{pair}")
        both = [subprocess.Popen([sys.executable, "-m", "opgen", "add", "--op-plugin-root", str(root), str(spec)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for spec in (FIRST, SECOND)]
        for process in both:
            out, err = process.communicate(timeout=120)
            assert process.returncode == 0, out + err
        assert all_files(root) in turns
