"""The README's Quickstart stays true: two commands that install first, and CI runs its test command.
tests/test_first_hour.py runs the main job (and every other README command) as written, in a fresh venv."""

import re
from pathlib import Path

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
