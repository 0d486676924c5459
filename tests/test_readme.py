"""The README's Quickstart stays true: CI runs its test command, and its main job works as written."""

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from opgen.npugraph_ex import loader

ROOT = Path(__file__).resolve().parent.parent


def quickstart_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.DOTALL).group(1)
    return [line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_quickstart_has_two_commands_that_install_first():
    commands = quickstart_commands()
    assert len(commands) == 2
    for command in commands:
        assert command.startswith('pip install "torch==2.13.0" -e ".[test]" && ')


def test_ci_runs_exactly_the_readme_test_command():
    test_command = quickstart_commands()[1].split(" && ", 1)[1]
    ci_lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert ci_lines[-1] == test_command


@pytest.mark.slow
def test_quickstart_main_job_generates_and_passes(tmp_path):
    main_job = quickstart_commands()[0].split(" && ", 1)[1]
    steps = [shlex.split(step) for step in main_job.split(" && ")]
    assert [step[0] for step in steps] == ["opgen", "python"]
    out = tmp_path / "rms_norm"
    for step in steps:
        step = [str(out) if part == "build/rms_norm" else part for part in step]
        if step[0] == "opgen":
            step = [sys.executable, "-m", "opgen", *step[1:]]
        else:
            step = [sys.executable, *step[1:]]
        result = subprocess.run(step, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
        assert result.returncode == 0, result.stdout + result.stderr
    skipped = 2 + (loader().unavailable() is not None)  # npugraph_ex on CPU skips until `opgen npugraph-ex fetch`
    assert re.search(rf"\b\d+ passed, {skipped} skipped\b", result.stdout), result.stdout
