"""Many generated packages, one `pytest`: three projects side by side are collected and tested by one run from their
common folder, each against its own ops, with the outcomes of the three per-package runs. Nothing is installed and
no PYTHONPATH is set: each test file has its own name (tests/test_<package>.py) and opgen's pytest plugin puts each
project on sys.path before its tests are imported (README, "What gets generated")."""

from __future__ import annotations

import os
from pathlib import Path
from xml.etree import ElementTree

import pytest
from forked_python import run_pytest
from new_helpers import REPO, opgen_in_one_process

pytestmark = pytest.mark.slow  # four pytest runs of generated projects

PROJECTS = {"rms": "rms_norm", "kv": "kv_cache_update", "scale": "scale_inplace"}  # folder -> example
TIERS = "registration,fake,npu,cuda"  # the quick tiers (the others are test_examples.py's)


def outcomes(target: Path, cwd: Path, junit: Path) -> dict[str, str]:
    """`python -m pytest <target>` as a user runs it (no PYTHONPATH): test id -> outcome."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    done = run_pytest(["-p", "no:cacheprovider", "-q", f"--opgen-tiers={TIERS}", f"--junitxml={junit}", str(target)],
                      cwd=cwd, env=env, timeout=900)
    assert junit.is_file(), done.stdout + done.stderr
    found = {}
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        kinds = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        module = case.get("classname").rpartition(".")[2]  # ops.rms.tests.test_myops, tests.test_myops
        found[f"{module}.py::{case.get('name')}"] = kinds[0] if kinds else "passed"
    assert found, done.stdout + done.stderr
    return found


def test_three_packages_side_by_side_test_in_one_run_as_in_three(tmp_path):
    ops = tmp_path / "ops"
    generations = [["new", str(REPO / "examples" / f"{example}.yaml"), "-o", str(ops / folder)]
                   for folder, example in PROJECTS.items()]
    assert opgen_in_one_process(*generations) == [0] * len(PROJECTS)  # one process start, not three
    together = outcomes(ops, tmp_path, tmp_path / "all.xml")
    apart = {}
    for folder in PROJECTS:
        apart.update(outcomes(ops / folder, ops / folder, tmp_path / f"{folder}.xml"))
    assert together == apart
    # each package's tests ran against its own ops: every project's registration test passed
    assert {name for name, outcome in together.items() if name.endswith("_is_registered")
            and outcome == "passed"} == {"test_myops.py::test_rms_norm_is_registered",
                                         "test_attn_ops.py::test_kv_cache_update_is_registered",
                                         "test_inplace_ops.py::test_scale__is_registered"}
    assert "skipped" in together.values() and "failure" not in together.values() and "error" not in together.values()
