"""Wall time of the README's test command (`python -m pytest -q`, the install already done) as a new user runs it: an
empty home, so nothing fetched and no cache of opgen's; next to a named baseline.

The baseline is either a git revision of this repository, whose suite runs in the same run on the same machine
(exported with `git worktree add --detach` into a temporary directory and installed as the README says into a venv of
its own, with the torch release installed here: its subprocesses that drop PYTHONPATH then run its own opgen too;
minutes: the suite runs twice), or a figure measured before, named with --baseline-seconds and --baseline-name (issue 35's
385 s on a quiet 2-core machine by default). The target is absolute: <= 300 s on a 2-core machine (issue 35).

    python benchmarks/bench_suite.py [--baseline REV | --baseline-seconds S --baseline-name NAME] [--target 300]
                                     [-- PYTEST_ARGS...]   (e.g. `-- tests/test_readme.py` for a smoke run)
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASELINE_SECONDS = 385.0  # issue 35: a fresh clone, fresh venv, empty home, quiet 2-core machine (main at 2e99743)
BASELINE_NAME = "issue 35's fresh machine (2e99743, quiet, 2 cores)"
TARGET = 300.0
COMMAND = ["-m", "pytest", "-q"]  # the README's test command after its install
PIP_CACHE = str(Path(tempfile.gettempdir()) / "opgen-bench-pip-cache")


def timed_suite(checkout: Path, pytest_args: list[str], home: Path, python: str = sys.executable
                ) -> tuple[float, float, str]:
    """Seconds the README's test command takes in `checkout`, the CPU seconds of its process tree (user + system of
    pytest, its workers and every process they waited for: on a shared machine the figure to compare, wall time
    being noise), and pytest's last line."""
    env = {key: value for key, value in os.environ.items()
           if key not in ("OPGEN_CACHE_DIR", "XDG_CACHE_HOME", "OPGEN_TORCH_NPU_WHEEL", "OPGEN_REQUIRE_NPUGRAPH_EX",
                          "PYTEST_ADDOPTS")}
    env["HOME"] = str(home)
    env.setdefault("PIP_CACHE_DIR", PIP_CACHE)
    start, cpu_before = time.perf_counter(), _children_cpu()
    done = subprocess.run([python, *COMMAND, *pytest_args], cwd=checkout, env=env, capture_output=True, text=True,
                          check=False)
    seconds, cpu = time.perf_counter() - start, _children_cpu() - cpu_before
    lines = [line for line in done.stdout.splitlines() if re.search(r"\d+ (passed|failed|error)", line)]
    return seconds, cpu, (lines[-1] if lines else f"exit {done.returncode}: {done.stdout[-500:]}{done.stderr[-500:]}")


def _children_cpu() -> float:
    """User + system CPU seconds of the waited-for descendants of this process so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def baseline_run(revision: str, pytest_args: list[str], scratch: Path) -> tuple[float, float, str]:
    checkout = scratch / "baseline"
    added = subprocess.run(["git", "worktree", "add", "--detach", str(checkout), revision], cwd=ROOT,
                           capture_output=True, text=True, check=False)
    if added.returncode != 0:
        raise SystemExit(f"error: cannot check out the baseline {revision}: {added.stderr.strip()}")
    try:
        home = scratch / "baseline-home"
        home.mkdir()
        return timed_suite(checkout, pytest_args, home, python=_installed(checkout, scratch / "baseline-venv"))
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(checkout)], cwd=ROOT, capture_output=True,
                       check=False)


def _installed(checkout: Path, venv: Path) -> str:
    """`checkout` installed as the README's install does (`pip install "torch==X.Y.Z" -e ".[test]"`) into a new venv,
    with the torch release of this environment; the venv's python."""
    torch = importlib.metadata.version("torch").split("+")[0]
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    done = subprocess.run([python, "-m", "pip", "install", "-q", f"torch=={torch}", "-e", f"{checkout}[test]"],
                          env={**os.environ, "PIP_CACHE_DIR": os.environ.get("PIP_CACHE_DIR", PIP_CACHE)},
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"error: cannot install the baseline into its venv: {done.stderr.strip()[-2000:]}")
    return python


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    pytest_args = argv[argv.index("--") + 1:] if "--" in argv else []
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", metavar="REV", help="a git revision whose suite runs in the same run")
    parser.add_argument("--baseline-seconds", type=float, default=BASELINE_SECONDS)
    parser.add_argument("--baseline-name", default=BASELINE_NAME)
    parser.add_argument("--target", type=float, default=TARGET, help="seconds the suite may take (default 300)")
    args = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    with tempfile.TemporaryDirectory(prefix="opgen-bench-suite-") as scratch:
        home = Path(scratch) / "home"
        home.mkdir()
        if args.baseline:
            base_seconds, base_cpu, base_line = baseline_run(args.baseline, pytest_args, Path(scratch))
            base_name = f"{args.baseline}, same run"
        else:
            base_seconds, base_cpu, base_line, base_name = args.baseline_seconds, None, "", args.baseline_name
        seconds, cpu, line = timed_suite(ROOT, pytest_args, home)
    print(f"readme test command: {seconds:.0f} s ({line}); {os.cpu_count()} cores")
    print(f"  (baseline: {base_seconds:.0f} s, {base_name}{'; ' + base_line if base_line else ''}; "
          f"ratio {base_seconds / seconds:.2f}x faster, target <= {args.target:.0f} s: "
          f"{'met' if seconds <= args.target else 'NOT met'})")
    if "failed" in base_line or "error" in base_line:
        print("  warning: the baseline's suite did not pass: its time is no fair comparison")
    print(f"  CPU: {cpu:.0f} s user + system of the process tree" + (
        f" (baseline {base_cpu:.0f} s, ratio {base_cpu / cpu:.2f}x less)" if base_cpu else ""))
    return 0 if "failed" not in line and "error" not in line else 1


if __name__ == "__main__":
    sys.exit(main())
