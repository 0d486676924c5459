"""Shared test helpers: run the real `opgen` command line in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def run_opgen_command(*args: str, input: str | None = None, env: dict | None = None,
                      cwd: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """`python -m opgen ARGS` as a user would run it; text mode, output captured."""
    full_env = {key: value for key, value in os.environ.items() if key != "OPGEN_DEBUG"}
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "opgen", *args], input=input, capture_output=True, text=True,
                          env=full_env, cwd=cwd, timeout=timeout, check=False)


@pytest.fixture
def run_opgen():
    return run_opgen_command
