"""A newcomer's first hour: the README followed in a fresh virtual environment on a fresh copy of the
repository, every command taken from the README itself and run as written, in README order.

Some commands are not run here, each for a stated reason (EXEMPT): the whole test suite (this test is part of
it: the run that runs this test collected it, and CI runs that command in a fresh venv, see .ci/run; its install
is run) and the benchmarks (minutes; their tool look-up is checked in the same venv). A README command that is
neither run nor exempted fails the test, so a new command cannot slip through. A command the README repeats
(the install, which the Quickstart's first line begins with) runs once: the same command in the same venv proves
nothing more the second time.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.first_hour, pytest.mark.slow]

# command (exactly as in the README) -> (exit code, text its output must contain)
EXPECTED = {
    'pip install "torch==2.13.0" -e ".[test]" && opgen new examples/rms_norm.yaml -o build/rms_norm && '
    'python -m pytest build/rms_norm -q': (0, " passed"),
    "opgen new examples/rms_norm.yaml -o build/rms_norm": (0, "nothing to write"),
    'opgen new --schema "myops::scale(Tensor x, float s) -> Tensor" -o scale_ops': (0, "create     myops/ops.py"),
    "cd build/rms_norm && opgen new": (0, "nothing to write"),
    "opgen new examples/kv_cache_update.yaml -o kv --style custom_op --device cuda --dry-run":
        (0, "dry run: nothing was written"),
    "opgen lint build/rms_norm": (0, "All checks passed!"),
    "opgen lint --output-format sarif build/rms_norm": (0, '"version": "2.1.0"'),
    "opgen lint --fix --select OPG2 build/rms_norm": (0, "All checks passed!"),
    "opgen lint --explain OPG301": (0, "OPG301"),
    'opgen explain "myops::rms_norm(Tensor x, Tensor gamma, float epsilon=1e-06) -> (Tensor y, Tensor rstd)"':
        (0, "mutates_args: ()"),
    'opgen explain --json "myops::cache_update(Tensor(a!) cache, Tensor index, Tensor src) -> ()"':
        (0, '"mutates_args": [\n    "cache"\n  ]'),
    # the second schema returns its mutated argument: an error diagnostic, exit 1 by design
    "printf '%s\\n' \"f(Tensor x) -> Tensor\" \"g(Tensor(a!) x) -> Tensor(a!)\" | opgen explain --json -":
        (1, '"code": "OPG102"'),
    "opgen explain --code OPG102": (0, "OPG102 (aliased-return, error)"),
    "opgen new examples/op_plugin/rms_norm.yaml --target op_plugin -o build/npu_rms_norm":
        (0, "create     op_plugin/config/op_plugin_functions.yaml"),
    "python -m pytest build/npu_rms_norm/opgen_checks -q": (0, " passed"),
    'pip install "torch==2.13.0" -e ".[test]"': (0, ""),
    "opgen check build/rms_norm": (0, "1 of 1 op(s) pass every runnable rung"),
    "PYTHONPATH=tests/fixtures/check opgen check --skip static check_fixtures.broken_custom_op:chk_cop::undeclared":
        (1, "layer: dynamo-fx - undeclared-mutation"),
    "opgen check --explain undeclared-mutation": (0, "rule: OPG301"),
    # pip downloads the torch-npu wheel matching torch (into this test's own OPGEN_CACHE_DIR, see `fresh`)
    "opgen npugraph-ex fetch": (0, "npugraph_ex/2.13.0"),
    "opgen npugraph-ex path": (0, "npugraph_ex/2.13.0"),
}
EXEMPT = {
    "python -m pytest -q": "the whole suite, this test included (so it collected): CI runs it in a fresh venv "
                           "(.ci/run)",
    'python -m pytest -q -m "not slow"': "a subset of the whole suite, which CI runs",
    "python -m pytest -q -m first_hour": "this test",
    "python -m pytest -q -m stress": "the heavy forms of suite tests, which CI runs in a step of its own",
    "python benchmarks/run.py": "minutes of timing; the benchmarks' tool look-up is checked on its own below",
    "opgen add --op-plugin-root ~/op-plugin examples/op_plugin/rms_norm.yaml --dry-run":
        "needs an op-plugin checkout; tests/test_op_plugin_add.py runs it on a tree shaped like one",
    "opgen add --op-plugin-root ~/op-plugin examples/op_plugin/rms_norm.yaml":
        "needs an op-plugin checkout; tests/test_op_plugin_add.py runs it on a tree shaped like one",
    "OPGEN_OP_PLUGIN_ROOT=~/op-plugin python -m pytest build/npu_rms_norm/opgen_checks -q":
        "needs an op-plugin checkout; tests/test_op_plugin_add.py runs opgen_checks on a tree shaped like one",
    "opgen meta-coverage ~/op-plugin --json": "needs an op-plugin checkout; tests/test_op_plugin_coverage.py runs it "
                                             "on a tree shaped like one",
    "python test/test_custom_ops/test_npu_rms_norm.py": "runs inside an op-plugin checkout on an NPU machine",
    "opgen npugraph-ex fetch --wheel torch_npu-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl":
        "needs the wheel on disk; tests/test_npugraph_ex.py runs fetch --wheel on wheels it builds",
    "opgen import my_pkg -o specs": "needs the user's package; tests/test_import.py runs it on a toy package",
    "opgen import my_pkg -o specs --inputs inputs.yaml":
        "needs the user's package; tests/test_import.py runs it with --inputs on a toy package",
    "opgen new specs/myops.yaml -o build/myops":
        "an imported spec (adopt mode) of the user's package; tests/test_import.py runs it on the toy package's",
}


def readme_commands() -> list[str]:
    """Every command line of every ```bash block of the README, in order, without trailing comments."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.DOTALL):
        for line in block.splitlines():
            line = re.sub(r"\s+#\s.*$", "", line).strip()
            if line and not line.startswith("#"):
                commands.append(line)
    return commands


def test_every_readme_command_is_run_or_exempt_with_a_reason():
    commands = readme_commands()
    quickstart_tests = 'pip install "torch==2.13.0" -e ".[test]" && python -m pytest -q'
    unknown = [c for c in commands if c not in EXPECTED and c not in EXEMPT and c != quickstart_tests]
    assert not unknown, f"README commands with no expectation in this test: {unknown}"
    assert quickstart_tests in commands and set(EXPECTED) <= set(commands)


@pytest.fixture
def fresh(tmp_path_factory) -> dict:
    """A copy of the repository's files (what a clone has) and a new venv that has nothing installed."""
    root = tmp_path_factory.mktemp("first-hour")
    checkout = root / "opgen"
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=False)
    if listed.returncode != 0:
        pytest.fail(f"cannot list the repository's files with git: {listed.stderr.decode()}")
    for name in filter(None, listed.stdout.decode().split("\0")):
        source, target = REPO / name, checkout / name
        if source.is_symlink():  # a clone has the link itself (the style templates link into project_files)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(os.readlink(source))
        elif source.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    venv = root / "venv"
    # pip is linked in below with the rest, as ensurepip would install it (its unpacking was 4 CPU-s of this test)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300)
    bin_dir = venv / ("Scripts" if os.name == "nt" else "bin")
    link_installed_requirements(bin_dir / "python")
    env = {key: value for key, value in os.environ.items()
           if key not in ("PYTHONPATH", "PYTHONHOME", "PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER", "OPGEN_NPUGRAPH_EX_FETCH")}
    env.update(VIRTUAL_ENV=str(venv), PATH=os.pathsep.join([str(bin_dir), "/usr/bin", "/bin"]),
               OPGEN_CACHE_DIR=str(root / "cache"))
    return {"checkout": checkout, "venv": venv, "bin": bin_dir, "env": env}


VENV_STATE = """import importlib.metadata, json, re, sysconfig
installed = [re.sub(r"[-_.]+", "-", d.metadata["Name"]).lower() for d in importlib.metadata.distributions()]
print(json.dumps({**sysconfig.get_paths(), "installed": installed}))"""


def link_installed_requirements(python: Path) -> None:
    """Every distribution opgen and its test extra need (torch and numpy among them, and their own requirements),
    and pip, linked from this process's environment into the new venv: package folders, dist-info and scripts, so that the
    README's `pip install "torch==2.13.0" -e ".[test]"` finds them all satisfied and installs opgen alone (unpacking
    torch alone was most of this test's time, and resolving and unpacking the ~50 others most of the rest). pip
    still reads the command as written; `.ci/run`'s first step installs it all from nothing, as the README says."""
    from packaging.utils import canonicalize_name

    venv = json.loads(subprocess.run([str(python), "-c", VENV_STATE], capture_output=True, text=True, check=True).stdout)
    site_packages, scripts = Path(venv["purelib"]), Path(venv["scripts"])
    for distribution in [*requirement_closure("opgen", extras={"test"}), importlib.metadata.distribution("pip")]:
        if canonicalize_name(distribution.metadata["Name"]) in venv["installed"]:  # its own setuptools, pip
            continue
        where = Path(distribution.locate_file(""))
        for file in distribution.files or ():
            parts = Path(file).parts
            if parts[0] != "..":
                if (where / parts[0]).exists() and not (site_packages / parts[0]).exists():
                    (site_packages / parts[0]).symlink_to(where / parts[0])
            elif Path(file).parent.name == "bin":  # a script: ours names this interpreter, theirs the new one
                link_script(Path(distribution.locate_file(file)).resolve(), scripts / Path(file).name, python)


def requirement_closure(name: str, extras: set[str]) -> list[importlib.metadata.Distribution]:
    """The installed distributions `name[extras]` requires, directly or not (without `name` itself)."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    found: dict[str, importlib.metadata.Distribution] = {}
    pending = [(name, frozenset(extras))]
    while pending:
        current, wanted = pending.pop()
        distribution = importlib.metadata.distribution(current)
        for text in distribution.requires or ():
            requirement = Requirement(text)
            if requirement.marker and not any(requirement.marker.evaluate({"extra": extra}) for extra in {"", *wanted}):
                continue
            key = canonicalize_name(requirement.name)
            if key not in found:
                found[key] = importlib.metadata.distribution(requirement.name)
                pending.append((requirement.name, frozenset(requirement.extras)))
    found.pop(canonicalize_name(name), None)
    return list(found.values())


def link_script(source: Path, target: Path, python: Path) -> None:
    if target.exists() or not source.is_file():
        return
    content = source.read_bytes()
    first, _, rest = content.partition(b"\n")
    if first.startswith(b"#!") and b"python" in first:  # as pip writes it for the new venv
        target.write_bytes(b"#!" + str(python).encode() + b"\n" + rest)
        target.chmod(0o755)
    else:  # a program of its own (ruff)
        target.symlink_to(source)


def shell(command: str, fresh: dict, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command], cwd=fresh["checkout"], env=fresh["env"], capture_output=True,
                          text=True, timeout=timeout, check=False)


def test_the_readme_works_as_written_in_a_fresh_venv(fresh):
    """One test, one venv: a single install, whichever worker runs it."""
    commands = readme_commands()
    quickstart, tests_command = commands[0], commands[1]
    start = time.perf_counter()
    ran: set[str] = set()
    for command in commands:
        if command == tests_command:  # its install as written; the suite itself is exempt (module docstring)
            command, pytest_command = command.split(" && ")
            assert pytest_command == "python -m pytest -q"
        if command in EXEMPT or command in ran:
            continue
        ran.add(command)
        code, text = EXPECTED[command]
        done = shell(command, fresh)
        output = done.stdout + done.stderr
        assert done.returncode == code, f"{command}\nexit {done.returncode}:\n{output[-4000:]}"
        assert text in output, f"{command}\n{text!r} not in:\n{output[-4000:]}"
        assert "Traceback" not in output, f"{command}\n{output[-4000:]}"
        if command == quickstart:
            assert "Failed to initialize NumPy" not in output, output[-4000:]
            assert re.search(r"\b\d+ passed, \d+ skipped", output) and " failed" not in output, output[-4000:]
            # npugraph_ex fetched on first use, its tiers run; the models tests, opt-in, left out (issue 35)
            assert "opgen: npugraph_ex fetched into" in output, output[-4000:]
            assert "  ran      npugraph_ex   2 passed" in output and "(models, opt-in)" in output, output[-4000:]
            print(f"Quickstart main job with its install: {time.perf_counter() - start:.0f} s")
            ran.add(command.split(" && ")[0])  # its install, which the README repeats alone
    # the opgen that ran is the checkout's, installed in the venv
    where = shell("python -c 'import opgen; print(opgen.__file__)'", fresh).stdout.strip()
    assert Path(where).is_relative_to(fresh["checkout"]), where
    check_benchmarks_find_ruff_next_to_the_interpreter(fresh)


def check_benchmarks_find_ruff_next_to_the_interpreter(fresh: dict) -> None:
    """A venv's bin/ need not be on PATH: the benchmark finds ruff beside the interpreter."""
    env = {**fresh["env"], "PATH": "/usr/bin:/bin"}
    if shutil.which("ruff", path=env["PATH"]):
        pytest.fail("ruff is on the system PATH: this check needs it to be found only next to the interpreter")
    done = subprocess.run([str(fresh["bin"] / "python"), "benchmarks/bench_lint.py", "--runs", "1", "--tree",
                           "tests/fixtures/lint"], cwd=fresh["checkout"], env=env, capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "baseline: ruff check --no-cache" in done.stdout
    # the libcst baseline runs where libcst is installed (the test extra has it), else says it is skipped
    assert "libcst" in done.stdout


def test_lint_skips_the_backups_that_new_force_keeps(tmp_path):
    """`opgen new --force` saves the replaced file under .opgen/backup/; lint must not read that stale copy."""
    project = tmp_path / "p"
    spec = REPO / "examples" / "rms_norm.yaml"
    run = [sys.executable, "-m", "opgen"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    assert subprocess.run([*run, "new", str(spec), "-o", str(project)], env=env, check=False).returncode == 0
    ops = project / "myops" / "ops.py"
    # a hand edit that lint flags: the fake reads tensor data (OPG302)
    edited = ops.read_text().replace("    rstd = torch.empty(", "    x.sum().item()\n    rstd = torch.empty(", 1)
    assert edited != ops.read_text()
    ops.write_text(edited)
    forced = subprocess.run([*run, "new", str(spec), "-o", str(project), "--force"], env=env, capture_output=True,
                            text=True, check=False)
    assert forced.returncode == 0, forced.stderr
    backup = next((project / ".opgen" / "backup").rglob("ops.py"))
    assert "x.sum().item()" in backup.read_text()
    clean = subprocess.run([*run, "lint", "."], cwd=project, env=env, capture_output=True, text=True, check=False)
    assert clean.returncode == 0 and "All checks passed!" in clean.stdout, clean.stdout + clean.stderr
    # the planted twin: the same stale copy is reported once the default excludes are replaced
    stale = subprocess.run([*run, "lint", "--exclude", "__pycache__", "--output-format", "json", "."], cwd=project,
                           env=env, capture_output=True, text=True, check=False)
    assert stale.returncode == 1, stale.stdout + stale.stderr
    # the stale copy: its fake reads data (OPG302), and it defines the op a second time (OPG210)
    stale_findings = {(Path(d["filename"]).parts[0], d["code"]) for d in json.loads(stale.stdout)}
    assert (".opgen", "OPG302") in stale_findings, stale_findings
