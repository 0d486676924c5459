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


def ci_lines() -> list[str]:
    return [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]


def test_ci_runs_exactly_the_readme_test_command_on_a_new_users_machine():
    """The README's test command, install included, as written, in an empty home, with nothing before it that a new
    user does not do: no npugraph_ex fetched, no wheel given, no cache of opgen's (issue 35: CI once fetched first)."""
    lines = ci_lines()
    readme = lines.index(quickstart_commands()[1])
    before = "\n".join(lines[:readme])
    assert 'HOME="$ci/home"' in before and 'rm -rf "$ci/venv" "$ci/home"' in before
    assert "unset OPGEN_CACHE_DIR XDG_CACHE_HOME OPGEN_TORCH_NPU_WHEEL OPGEN_REQUIRE_NPUGRAPH_EX" in before
    assert not any(word in line for line in lines[:readme] if not line.startswith(("#", "unset"))
                   for word in ("npugraph-ex", "pip download", "OPGEN_", "pip install", "pytest"))
