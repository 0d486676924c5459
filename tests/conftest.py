"""Shared test helpers: run the real `opgen` command line in a new interpreter (or a fork of a warm one)."""

from __future__ import annotations

import os
import subprocess
import sys

import forked_python  # (imported first: its SESSION_ENV is the environment before any test changes it)
import pytest

# tests/fixtures holds other projects' files (an op-plugin checkout's own tests, which import torch_npu): inputs of
# opgen's tests, never tests to collect
collect_ignore = ["fixtures"]
# The suite takes npugraph_ex's cache as it finds it: generated tests it runs must not fetch npugraph_ex on first use
# (opgen/npugraph_ex/ensure.py), or its state would change halfway through a run and the README's test command would
# download a wheel. It passes fetched or not; tests that fetch do so into caches of their own.
os.environ["OPGEN_NPUGRAPH_EX_FETCH"] = "0"


def run_opgen_command(*args: str, input: str | None = None, env: dict | None = None,
                      cwd: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """`python -m opgen ARGS` as a user would run it; text mode, output captured (forked from a warm server where
    the environment allows, tests/forked_python.py)."""
    full_env = {key: value for key, value in os.environ.items() if key != "OPGEN_DEBUG"}
    full_env.update(env or {})
    return forked_python.run_python(["-m", "opgen", *args], input=input, env=full_env, cwd=cwd, timeout=timeout)


def worker_started_then(seconds: float) -> subprocess.Popen:
    """A stand-in for an `opgen check` or `opgen import` worker: 1.5 s to start (Python and torch on a loaded
    machine), its `started` event, then a step of `seconds` before `done`."""
    script = ("import time; time.sleep(1.5); print('{\"event\": \"started\"}', flush=True); "
              f"time.sleep({seconds}); print('{{\"event\": \"done\"}}', flush=True)")
    return subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def pytest_configure(config):
    """opgen's own modules byte-compiled once, before any worker starts, wherever PYTHONDONTWRITEBYTECODE is set (it is
    on the CI machines): else each of the suite's ~700 `python -m opgen` runs, opgen check workers and forked runs
    compiled the modules it imports from source, ~0.13 CPU-s a CLI start. A normal Python writes the same files on
    first import; generated projects' runs still write none (their tests compare file trees)."""
    if sys.dont_write_bytecode and not hasattr(config, "workerinput"):
        import compileall
        from pathlib import Path

        compileall.compile_dir(str(Path(__file__).resolve().parents[1] / "opgen"), quiet=1)


def pytest_sessionfinish(session):
    """The pytest fork server of this process (tests/forked_python.py), if one started, stops with the session: a
    server left to outlive its worker would take its runs' CPU time out of the suite's count."""
    forked = sys.modules.get("forked_python")
    if forked is not None:
        forked.close_server()


@pytest.fixture
def run_opgen():
    return run_opgen_command


@pytest.fixture(scope="session")
def generated_examples(tmp_path_factory):
    """`generated_examples(style)`: every example spec generated once per session (per xdist worker) in
    that style with the real CLI; tests share the projects and must not change them."""
    from new_helpers import generate_examples

    cache: dict[str, list] = {}

    def get(style: str) -> list:
        if style not in cache:
            cache[style] = generate_examples(tmp_path_factory.mktemp(f"examples-{style}"), style)
        return cache[style]

    return get


# The longest tests, longest first (their time in a 2-worker CI run): they start before everything else, so
# that none of them starts last and leaves the other worker idle. Then every `slow` test, then the rest; with
# `--no-loadscope-reorder` (pyproject.toml) pytest-xdist hands the work out in this order (an xdist_group's tests go
# where its first test is).
LONGEST_FIRST = (
    "test_first_hour.py::test_the_readme_works_as_written_in_a_fresh_venv",  # a fresh venv: ~100 s
    "test_examples.py::test_generated_tests_pass_and_skip_exactly_as_expected",  # its style's group: ~60 s each
)


@pytest.hookimpl(trylast=True)  # after pytest's own ordering (fixtures' parameters)
def pytest_collection_modifyitems(items):
    def rank(item) -> int:
        where = next((number for number, name in enumerate(LONGEST_FIRST) if name in item.nodeid), None)
        if where is not None:
            return where
        return len(LONGEST_FIRST) + (0 if item.get_closest_marker("slow") else 1)

    items.sort(key=rank)
