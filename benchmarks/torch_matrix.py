"""The torch-line matrix: each bundled example's generated project, in both styles, tested on each torch line,
and `opgen check` on one op per line; prints one row per line (and per project with --verbose).

A line is a virtual environment (or its python) holding that torch and opgen (`pip install torch==X` first, then
`pip install -e .[test]`, which keeps it). npugraph_ex is fetched for each line first (`opgen npugraph-ex fetch`,
from a wheel of --wheels when one serves the line), so its CPU tiers run where the line's torch-npu has it.

    python benchmarks/torch_matrix.py --line /work/venv-t291 --line /work/venv-t271 [--examples rms_norm,swiglu]

Exit status 1 when a project's tests fail or `opgen check` does not exit 0 on any line.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
STYLES = ("library", "custom_op")
CHECKED = "rms_norm"  # the example whose op `opgen check` runs on, per line
SUMMARY = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed)")


@dataclass
class Project:
    name: str
    counts: dict[str, int] = field(default_factory=dict)
    problem: str = ""  # generation failed, or the first failing test
    skips: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.problem and not self.counts.get("failed") and not self.counts.get("error") \
            and not self.counts.get("errors") and bool(self.counts.get("passed"))

    def skipped_for(self, torch_version: str) -> bool:
        """Skipped as a whole (nothing ran, nothing failed) for a reason that names this torch: a package whose ops
        this line cannot register (e.g. tags that came later) passes on its line by refusing, not by running."""
        return not self.problem and not self.passed and not self.counts.get("failed") \
            and bool(self.skips) and all(torch_version in skip for skip in self.skips)


@dataclass
class Line:
    python: str
    torch: str = ""
    npugraph_ex: str = ""
    projects: list[Project] = field(default_factory=list)
    check: str = ""
    seconds: float = 0.0


def python_of(line: str) -> str:
    path = Path(line)
    return str(path / "bin" / "python") if path.is_dir() else str(path)


def run(python: str, *args: str, cwd: Path = REPO, timeout: float = 1800) -> subprocess.CompletedProcess:
    # the caller's venv, and CI's 2.13 wheel and npugraph_ex requirement, are not the line's
    dropped = ("PYTHONPATH", "VIRTUAL_ENV", "OPGEN_TORCH_NPU_WHEEL", "OPGEN_REQUIRE_NPUGRAPH_EX")
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    try:
        return subprocess.run([python, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env,
                              check=False)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess([python, *args], 124, "", f"timed out after {timeout:.0f} s")


def fetch_npugraph_ex(line: Line, wheels: Path | None) -> None:
    """`opgen npugraph-ex fetch`, from the newest wheel in `wheels` of the line's X.Y when there is one."""
    args = ["-m", "opgen", "npugraph-ex", "fetch"]
    minor = ".".join(line.torch.split(".")[:2])
    candidates = sorted(wheels.glob(f"torch_npu-{minor}.*.whl")) if wheels else []
    if candidates:
        args += ["--wheel", str(candidates[-1])]
    done = run(line.python, *args)
    line.npugraph_ex = done.stdout.strip().rpartition("/")[2] if done.returncode == 0 else \
        "none: " + (done.stderr.strip().splitlines() or ["?"])[0].removeprefix("error: ")[:90]


def test_project(line: Line, example: str, style: str, where: Path) -> Project:
    project = Project(f"{example}/{style}")
    out = where / f"{example}-{style}"
    made = run(line.python, "-m", "opgen", "new", str(REPO / "examples" / f"{example}.yaml"), "-o", str(out),
               "--style", style)
    if made.returncode != 0:
        project.problem = "opgen new: " + (made.stderr.strip().splitlines() or ["?"])[-1]
        return project
    done = run(line.python, "-m", "pytest", "-q", "-rfEs", "-p", "no:cacheprovider", "-n", "0", cwd=out)
    if "-n" in done.stderr and "unrecognized arguments" in done.stderr:  # no pytest-xdist in this venv
        done = run(line.python, "-m", "pytest", "-q", "-rfEs", "-p", "no:cacheprovider", cwd=out)
    tail = done.stdout.strip().splitlines()
    for count, what in SUMMARY.findall(tail[-1] if tail else ""):
        project.counts[what] = int(count)
    project.skips = [text for text in tail if text.startswith("SKIPPED")]
    failed = [text for text in tail if text.startswith(("FAILED", "ERROR"))]
    if failed:
        project.problem = failed[0][:160]
    elif done.returncode not in (0, 5) or not project.counts:
        project.problem = f"pytest exit {done.returncode}: {(tail or [done.stderr.strip()[-160:]])[-1][:160]}"
    return project


def check_op(line: Line, where: Path) -> str:
    out = where / f"{CHECKED}-library"
    if not out.is_dir():
        return "not run"
    done = run(line.python, "-m", "opgen", "check", str(out), cwd=where, timeout=1200)
    last = (done.stdout.strip().splitlines() or done.stderr.strip().splitlines() or ["?"])[-1]
    return "exit 0" if done.returncode == 0 else f"exit {done.returncode}: {last[:100]}"


def run_line(path: str, examples: list[str], styles: list[str], wheels: Path | None, verbose: bool) -> Line:
    line = Line(python_of(path))
    start = time.perf_counter()
    done = run(line.python, "-c", "import torch; print(torch.__version__)")
    line.torch = done.stdout.strip() or f"no torch: {done.stderr.strip()[-100:]}"
    if done.returncode != 0:
        return line
    fetch_npugraph_ex(line, wheels)
    with tempfile.TemporaryDirectory(prefix="opgen-matrix-") as where:
        for example in examples:
            for style in styles:
                project = test_project(line, example, style, Path(where))
                line.projects.append(project)
                if verbose:
                    print(f"  {line.torch} {project.name}: {project.counts} {project.problem}", flush=True)
                    print("".join(f"      {skip}\n" for skip in project.skips), end="", flush=True)
        line.check = check_op(line, Path(where))
    line.seconds = time.perf_counter() - start
    return line


def table(lines: list[Line], verbose: bool) -> str:
    rows = [("| torch | npugraph_ex | projects passing (+ skipped for the line) | tests passed / failed / skipped | "
             "`opgen check` | time |"),
            "|---|---|---|---|---|---|"]
    for line in lines:
        total = {what: sum(p.counts.get(what, 0) for p in line.projects) for what in ("passed", "failed", "skipped")}
        errors = sum(p.counts.get("error", 0) + p.counts.get("errors", 0) for p in line.projects)
        passing = sum(p.passed for p in line.projects)
        refused = sum(p.skipped_for(line.torch) for p in line.projects)
        rows.append(f"| {line.torch} | {line.npugraph_ex} | {passing}/{len(line.projects)}"
                    f"{f' (+{refused})' if refused else ''} | {total['passed']} / "
                    f"{total['failed']}{f' (+{errors} errors)' if errors else ''} / {total['skipped']} | "
                    f"{line.check} | {line.seconds:.0f} s |")
    for line in lines:
        for project in line.projects:
            if project.problem or verbose or project.skipped_for(line.torch):
                state = project.problem or ("skipped for this torch" if project.skipped_for(line.torch) else "ok")
                rows.append(f"- {line.torch} {project.name}: {state}")
            if verbose:
                rows += [f"    {skip}" for skip in project.skips]
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--line", action="append", required=True, metavar="VENV",
                        help="a virtual environment (or python) with torch and opgen installed (repeatable)")
    parser.add_argument("--examples", default="", metavar="A,B", help="examples/*.yaml stems (default: all)")
    parser.add_argument("--styles", default=",".join(STYLES), metavar="A,B", help="registration styles")
    parser.add_argument("--wheels", type=Path, metavar="DIR",
                        help="torch_npu-*.whl files to fetch npugraph_ex from (else pip downloads them)")
    parser.add_argument("--verbose", action="store_true", help="every project's counts and skip reasons")
    args = parser.parse_args(argv)
    examples = args.examples.split(",") if args.examples else sorted(
        p.stem for p in (REPO / "examples").glob("*.yaml") if p.stem != "todo_semantics")
    lines = [run_line(path, examples, args.styles.split(","), args.wheels, args.verbose) for path in args.line]
    print(table(lines, args.verbose))
    ok = all(p.passed or p.skipped_for(line.torch) for line in lines for p in line.projects) \
        and all(line.check == "exit 0" for line in lines)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
