"""Shared helpers for the `opgen new` tests: run the real CLI in subprocesses, and generated projects' tests in
forked runs of pytest (tests/forked_python.py: what a fresh `python -m pytest` would do, without its imports)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

from forked_python import run_pytest, run_python

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))
STYLES = ("library", "custom_op")
# npugraph_ex's production-feature tiers of the generated tests (a fresh process, dynamic shapes; the stream tier
# skips on CPU): proven on a few projects by tests/test_npugraph_ex_features.py, deselected in the other runs of
# generated projects (`-k`), which cover dozens of ops
NOT_FEATURES = "not npugraph_ex_compile_cache and not npugraph_ex_capture_limit and not npugraph_ex_on_a_second_stream"
# What opgen's tests pass to a pytest run of generated projects that checks their outcomes (not a run as a user makes
# it: those keep every plugin the user has): no cache folder in the projects, and no Hypothesis plugin (opgen's test
# extra installs it; no generated test uses it, and loading it is about 1 CPU-s of each run)
PYTEST_PLUGINS_OFF = ("-p", "no:cacheprovider", "-p", "no:hypothesispytest")


def opgen(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run `python -m opgen ...` as a user would (forked from a warm server where it can, tests/forked_python.py)."""
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return run_python(["-m", "opgen", *args], cwd=cwd, env=env, timeout=120)


def opgen_in_one_process(*calls: list[str]) -> list[int]:
    """Run several `opgen ...` command lines one after another inside one new `python` process (the CLI's own
    entry point, as `python -m opgen` runs it): each process costs a start and opgen's imports, which the calls
    share here. Their exit codes, in order; their output goes to this process's stderr."""
    script = ("import json, sys\nfrom opgen.cli import main\ncodes = []\n"
              "for args in json.loads(sys.argv[1]):\n"
              "    try:\n        main(args, prog_name='opgen')\n"
              "    except SystemExit as done:\n        codes.append(done.code or 0)\n"
              "print(json.dumps(codes))\n")
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, "-c", script, json.dumps(list(calls))], env=env, capture_output=True,
                          text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def generate_examples(root: Path, style: str) -> list[Path]:
    """Every example spec generated with the CLI in one style, one project per spec under `root` (in one process:
    tests/test_examples.py proves that another process, generating them in the opposite order, writes the same)."""
    codes = opgen_in_one_process(*(["new", str(spec), "-o", str(root / spec.stem), "--style", style]
                                   for spec in EXAMPLES))
    assert codes == [0] * len(EXAMPLES), codes
    return [root / spec.stem for spec in EXAMPLES]


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under `root` with its bytes (to prove that nothing changed)."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def pythonpath(projects) -> str:
    """PYTHONPATH for running generated projects' tests with their packages importable (opgen's pytest plugin
    also puts each project on sys.path; this holds where a test runs them in a process of its own)."""
    return os.pathsep.join(str(project) for project in projects)


def project_outcomes(projects: list[Path], junit: Path, select: str = NOT_FEATURES) -> dict[str, dict[str, dict]]:
    """Every project's tests (those `-k select` picks: default all but the feature tiers, NOT_FEATURES) in one pytest
    process (their test names are alike): project -> test -> {"outcome", "message"}."""
    env = {**os.environ, "PYTHONPATH": pythonpath(projects), "PYTHONDONTWRITEBYTECODE": "1"}
    arguments = ["-q", *PYTEST_PLUGINS_OFF, "--import-mode=importlib", "-c", os.devnull, "-o", "junit_family=xunit1",
                 f"--junitxml={junit}", *(["-k", select] if select else []), *[str(p / "tests") for p in projects]]
    run_pytest(arguments, env=env, timeout=1200, cwd=junit.parent)
    found: dict[str, dict[str, dict]] = {p.name: {} for p in projects}
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        project = next(part for part in Path(case.get("file")).parts if part in found)
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[child.tag]
                message = (child.get("message") or "") + "\n" + (child.text or "")
        found[project][case.get("name")] = {"outcome": outcome, "message": message}
    return found


def run_generated_tests(projects: list[Path], junit: Path, select: str = NOT_FEATURES,
                        env: dict[str, str] | None = None) -> dict[str, dict]:
    """Run the tests of several generated projects in ONE pytest process; outcome per test name.

    The projects' packages are put on PYTHONPATH; `importlib` import mode lets their identically
    named test files coexist. `select`: pytest's -k (default: all but the feature tiers, NOT_FEATURES);
    `env`: more environment variables for that process.
    """
    # no __pycache__ in the projects: tests compare their files before and after
    env = {**os.environ, "PYTHONPATH": pythonpath(projects), "PYTHONDONTWRITEBYTECODE": "1", **(env or {})}
    arguments = ["-q", *PYTEST_PLUGINS_OFF, "--import-mode=importlib", "-c", os.devnull, f"--junitxml={junit}",
                 *(["-k", select] if select else []), *[str(p / "tests") for p in projects]]
    done = run_pytest(arguments, env=env, timeout=1200, cwd=junit.parent)
    results = {}
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[child.tag]
                message = (child.get("message") or "") + "\n" + (child.text or "")
        results[case.get("name")] = {"outcome": outcome, "message": message, "file": case.get("classname")}
    if not results:
        raise AssertionError(f"pytest ran no tests:\n{done.stdout}\n{done.stderr}")
    return results
