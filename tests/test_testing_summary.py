"""The one-screen summary that ends a run of generated tests (opgen/testing/summary.py): each tier that ran with its
counts, each skip reason once with the tiers it hit, the opt-in tests left out and how to run them."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
from forked_python import run_pytest
from new_helpers import REPO, opgen

from opgen.testing.summary import WIDTH, Result, skip_reason, summary_lines

NO_NPU = "no NPU: torch_npu not importable"
TRANSFORMERS = importlib.util.find_spec("transformers") is not None


def test_the_summary_groups_skips_by_reason_and_names_opt_in_tests():
    results = [Result("kernel", "passed")] * 5 + [Result("npugraph_ex", "passed")] * 2 + [
        Result("npu", "skipped", NO_NPU), Result("npu", "skipped", NO_NPU), Result("cuda", "skipped", "no CUDA"),
        Result("kernel", "failed")]
    lines = summary_lines(results, {"models": (12, "transformers is not installed: pip install transformers")})
    assert lines == [
        "opgen: what ran, what did not and why",
        "  ran      kernel        5 passed, 1 failed",
        "  ran      npugraph_ex   2 passed",
        f"  skipped    2 (npu 2): {NO_NPU}",
        "  skipped    1 (cuda 1): no CUDA",
        "  not run   12 (models, opt-in): transformers is not installed: pip install transformers"]


def test_long_reasons_are_cut_to_one_line_and_skip_reports_are_read():
    lines = summary_lines([Result("fake", "skipped", "x" * 500)], {})
    assert len(lines) == 2 and len(lines[1]) == WIDTH and lines[1].endswith("...")
    assert skip_reason(("t.py", 3, "Skipped: no NPU: torch_npu not importable\nmore")) == NO_NPU


@pytest.fixture(scope="module")
def rms_norm_project(tmp_path_factory) -> Path:
    project = tmp_path_factory.mktemp("summary") / "rms_norm"
    done = opgen("new", str(REPO / "examples" / "rms_norm.yaml"), "-o", str(project))
    assert done.returncode == 0, done.stderr
    return project


def run_project(project: Path, *args: str) -> str:
    env = {key: value for key, value in os.environ.items() if key not in ("PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER")}
    done = run_pytest(["-q", "-p", "no:cacheprovider", str(project), *args], cwd=project.parent, env=env, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


@pytest.mark.slow  # runs a generated project's tests (a few)
@pytest.mark.skipif(TRANSFORMERS, reason="the opt-in case: transformers is installed here")
def test_a_run_ends_in_the_summary_and_opt_in_tests_are_left_out_unless_asked(rms_norm_project):
    """The main job's project (examples/rms_norm.yaml asks for Hugging Face models): without transformers its 18 model
    tests are not skips the user did not choose but left out, the summary saying how to run them; asked for with
    --opgen-tiers, they skip, saying why."""
    out = run_project(rms_norm_project, "-k", "is_registered or models")
    assert "1 passed, 60 deselected" in out, out
    assert "  ran      registration  1 passed" in out
    assert ('  not run   18 (models, opt-in): fusion.models needs transformers: pip install "transformers>=4.51" to '
            "run them") in out, out
    asked = run_project(rms_norm_project, "--opgen-tiers", "registration,models")
    assert "1 passed, 18 skipped" in asked, asked
    for model in ("LlamaForCausalLM", "Olmo2ForCausalLM", "HeliumForCausalLM"):  # one line per reason: 2 routes x 3 dtypes each
        assert f"  skipped    6 (models 6): transformers is not installed: the test builds {model}" in asked, asked
    assert "not run" not in asked
