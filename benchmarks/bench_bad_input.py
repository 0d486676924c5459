"""A bad-input and fault campaign against every command, each case a fresh process as a user runs it.

Every case must end in a located error (file and line/column, a byte offset, or the path at fault; exit 2, or 3
for an environment fault), or in the right result, within its time limit and memory. Counted: internal
errors, hangs (time or memory), tracebacks, unlocated errors, failed recoveries after `kill -9`, broken
projects (accepted specs whose generated tests fail) and user bytes lost. Target: 0 of each.

    python benchmarks/bench_bad_input.py [--only SUBSTRING] [--no-project-tests] [-v]

Cases that need a tmpfs or a read-only mount (disk full, read-only file system) run where `mount` works
(root in a privileged container) and are skipped with the reason elsewhere.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
OP_PLUGIN_FIXTURE = ROOT / "tests" / "fixtures" / "op_plugin_root"
FIXTURE_META = OP_PLUGIN_FIXTURE / "op_plugin" / "python" / "meta" / "_meta_registrations.py"
MEMORY_LIMIT = 3 << 30  # bytes of address space a case may use before it counts as runaway memory
# an error naming a file (and line, column or byte offset), a column of the input, or the option at fault
LOCATED = re.compile(r"^(error: (\S.*?:\d+(:\d+)?: |column \d+: |-\S+ |.*(byte|offset) \d+|.*(/|\.yaml|\.py|\.json)\b)"
                     r"|Error: Invalid value for ')", re.MULTILINE)
SIMPLE_SPEC = """\
namespace: bad
style: library
device: cpu
ops:
  - schema: "{schema}"
    outputs:
      out0: {{like: x}}
    reference: "return x * 2"
    examples:
      - {{x: {{shape: [2, 3]}}}}
"""


@dataclass
class Run:
    """One command of a case. `expect`: "error" (a located error, exit 2 or 3), "ok" (exit 0 or 1 with findings),
    "either"; `check` sees the outcome and returns problems of its own."""

    argv: list[str]
    expect: str = "error"
    stdin: str | None = None
    cwd: Path | None = None
    timeout: float = 60
    fsize: int | None = None  # RLIMIT_FSIZE in bytes
    wrapper: str | None = None  # Python run before opgen's main in the same process (fault injection)
    check: object = None


@dataclass
class Outcome:
    rc: int | None
    out: str
    err: str
    seconds: float
    peak_mb: float
    timed_out: bool = False


@dataclass
class Result:
    name: str
    problems: list[str] = field(default_factory=list)
    skipped: str = ""
    seconds: float = 0.0


def run(command: Run, work: Path) -> Outcome:
    if command.wrapper:
        argv = [sys.executable, "-c", command.wrapper + "\nfrom opgen.cli import main\nmain()", *command.argv]
    else:
        argv = [sys.executable, "-m", "opgen", *command.argv]
    env = {k: v for k, v in os.environ.items() if k != "OPGEN_DEBUG"}
    env["PYTHONPATH"] = str(ROOT)
    env["TMPDIR"] = str(case_tmp(work))

    def limits() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
        if command.fsize is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (command.fsize, command.fsize))
        os.setsid()

    start = time.perf_counter()
    process = subprocess.Popen(argv, cwd=command.cwd or work, env=env, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=limits)  # noqa: PLW1509 (no threads here)
    try:
        out, err = process.communicate(command.stdin, timeout=command.timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        timed_out = True
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return Outcome(None if timed_out else process.returncode, out, err, seconds, peak, timed_out)


def judge(command: Run, outcome: Outcome, work: Path) -> list[str]:
    problems = []
    text = outcome.out + outcome.err
    if outcome.timed_out:
        return [f"hang: no end after {command.timeout:g} s"]
    if "Traceback (most recent call last)" in text:
        problems.append("traceback")
    if "internal error" in text or "opgen could not check this file" in text:
        problems.append("internal error: " + _first_line(text, "internal error", "could not check"))
    if "MemoryError" in text or outcome.rc in (-9, 137) and not command.wrapper:
        problems.append("runaway memory")
    if command.expect == "error":
        if outcome.rc not in (2, 3):
            problems.append(f"exit {outcome.rc}, expected a refusal (2 or 3)")
        elif not LOCATED.search(outcome.err) and not problems:
            problems.append("not located: " + _first_line(outcome.err, "error"))
    elif command.expect == "ok" and outcome.rc not in (0, 1):
        problems.append(f"exit {outcome.rc}, expected it to run: {_first_line(outcome.err, 'error')}")
    if command.check is not None:
        problems += command.check(outcome, work)
    return problems


def _first_line(text: str, *needles: str) -> str:
    for line in text.splitlines():
        if any(needle in line for needle in needles):
            return line.strip()[:200]
    return (text.strip().splitlines() or [""])[-1][:200]


# --- helpers for cases ---------------------------------------------------------------------------


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def spec_with(work: Path, schema: str = "double(Tensor x) -> Tensor", text: str | None = None) -> str:
    return str(write(work / "spec.yaml", text if text is not None else SIMPLE_SPEC.format(schema=schema)))


def tree_digest(root: Path, skip: tuple[str, ...] = (".opgen",)) -> dict[str, str]:
    digest = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_file() and not rel.startswith(skip) and "__pycache__" not in rel:
            digest[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return digest


def manifest_files(root: Path) -> dict:
    path = root / ".opgen" / "manifest.json"
    return json.loads(path.read_text())["files"] if path.is_file() else {}


def leftovers(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*opgen-tmp*"))


def case_tmp(work: Path) -> Path:
    """Each case's own temp directory (TMPDIR), so that a folder left there is the case's."""
    path = work / "tmp"
    path.mkdir(exist_ok=True)
    return path


def opgen_temp_dirs(work: Path) -> set[str]:
    return {name for name in os.listdir(case_tmp(work)) if name.startswith("opgen")}


def case_env(work: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(case_tmp(work)), **extra}


def project_tests(outcome: Outcome, work: Path, out: str = "out") -> list[str]:
    """An accepted spec's project must pass its own tests (or have refused the spec at a location)."""
    if outcome.rc != 0:
        return []
    if ARGS.no_project_tests:
        return []
    project = work / out
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-n", "0",
                           str(project)], cwd=project, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "PYTHONPATH": str(project)}, check=False)
    if done.returncode not in (0, 5):
        tail = [line for line in done.stdout.splitlines() if "Error" in line or "FAILED" in line][:3]
        return [f"broken project: its tests fail ({'; '.join(tail) or done.stdout[-300:]})"]
    return []


@contextlib.contextmanager
def mounted(path: Path, options: str):
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "none", str(path)], capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        raise Skip(f"cannot mount a tmpfs here ({done.stderr.strip() or done.returncode})")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


class Skip(Exception):
    pass


# --- the cases -----------------------------------------------------------------------------------

CASES: dict[str, object] = {}


def case(function):
    CASES[function.__name__.removeprefix("case_")] = function
    return function


def nested_yaml(depth: int, flow: bool) -> str:
    if flow:
        return "[" * depth + "]" * depth
    return "".join("  " * level + "- \n" for level in range(depth))


@case
def case_new_yaml_deep_flow(work):
    text = SIMPLE_SPEC.format(schema="double(Tensor x) -> Tensor") + f"    doc: {nested_yaml(500, True)}\n"
    return [Run(["new", spec_with(work, text=text), "-o", "out"])]


@case
def case_new_yaml_deep_block(work):
    text = "namespace: bad\nops:\n" + textwrap.indent(nested_yaml(500, False), "  ")
    return [Run(["new", spec_with(work, text=text), "-o", "out"])]


@case
def case_new_yaml_deep_mapping(work):
    text = "namespace: bad\nops: " + "{a: " * 600 + "1" + "}" * 600 + "\n"
    return [Run(["new", spec_with(work, text=text), "-o", "out"])]


@case
def case_new_op_name_300(work):
    return [Run(["new", spec_with(work, "o" * 300 + "(Tensor x) -> Tensor"), "-o", "out"])]


@case
def case_new_op_name_250_runs(work):
    return [Run(["new", spec_with(work, "o" * 250 + "(Tensor x) -> Tensor"), "-o", "out"], expect="either",
                check=project_tests)]


@case
def case_new_out_under_file(work):
    write(work / "afile", "x")
    return [Run(["new", spec_with(work), "-o", "afile/sub/out"])]


@case
def case_new_out_dev_null(work):
    return [Run(["new", spec_with(work), "-o", "/dev/null/out"])]


@case
def case_new_out_proc(work):
    return [Run(["new", spec_with(work), "-o", "/proc/self/opgen-out"])]


@case
def case_new_out_name_too_long(work):
    return [Run(["new", spec_with(work), "-o", "d" * 300])]


def unchanged_after(before: dict[str, str], root: Path):
    def check(outcome: Outcome, work: Path) -> list[str]:
        after = tree_digest(root, skip=())
        lost = [path for path, digest in before.items() if after.get(path) != digest]
        return ([f"bytes lost: {lost}"] if lost else []) + ([f"left {leftovers(root)}"] if leftovers(root) else [])
    return check


@case
def case_new_disk_full(work):
    mount = work / "mnt"
    stack = contextlib.ExitStack()
    stack.enter_context(mounted(mount, "size=48k"))
    CLEANUPS.append(stack)
    return [Run(["new", spec_with(work), "-o", str(mount / "out")], check=unchanged_after({}, mount))]


@case
def case_new_disk_full_regenerate(work):
    mount = work / "mnt"
    stack = contextlib.ExitStack()
    stack.enter_context(mounted(mount, "size=1m"))
    CLEANUPS.append(stack)
    out = mount / "out"
    first = subprocess.run([sys.executable, "-m", "opgen", "new", spec_with(work), "-o", str(out)],
                           capture_output=True, text=True, check=False)
    if first.returncode != 0:
        raise Skip(f"the first generation did not fit: {first.stderr[-200:]}")
    write(mount / "filler", b"\0" * max(0, shutil.disk_usage(mount).free - 4096))
    bigger = SIMPLE_SPEC.format(schema="double(Tensor x) -> Tensor").replace("return x * 2", "return x * 2 " + "+ 0 " * 3000)
    return [Run(["new", spec_with(work, text=bigger), "-o", str(out)], check=unchanged_after(tree_digest(out, ()), out))]


@case
def case_new_read_only(work):
    mount = work / "ro"
    stack = contextlib.ExitStack()
    stack.enter_context(mounted(mount, "ro,size=1m"))
    CLEANUPS.append(stack)
    return [Run(["new", spec_with(work), "-o", str(mount / "out")])]


@case
def case_new_file_size_limit(work):
    return [Run(["new", spec_with(work), "-o", "out"], fsize=2048, check=unchanged_after({}, work / "out"))]


def example_spec(examples: str, schema: str = "ex(Tensor x, float s=1.0) -> Tensor", reference="return x * s") -> str:
    return textwrap.dedent(f"""\
        namespace: bad
        style: library
        device: cpu
        ops:
          - schema: "{schema}"
            outputs:
              out0: {{like: x}}
            reference: "{reference}"
            examples:
        """) + textwrap.indent(examples, "      ")


@case
def case_new_values_inf_nan(work):
    text = example_spec("- {x: {values: [[.inf, -.inf], [.nan, 1.0]]}, s: 2.0}\n- {x: {shape: [2]}, s: .inf}\n",
                        reference="return x * s")
    return [Run(["new", spec_with(work, text=text), "-o", "out"], expect="either", check=project_tests)]


@case
def case_new_op_named_from(work):
    return [Run(["new", spec_with(work, "from(Tensor x) -> Tensor"), "-o", "out"], expect="either",
                check=project_tests)]


@case
def case_new_op_named_lambda(work):
    return [Run(["new", spec_with(work, "lambda(Tensor x) -> Tensor"), "-o", "out"], expect="either",
                check=project_tests)]


@case
def case_new_arg_named_len(work):
    text = example_spec("- {len: {shape: [2, 3]}}\n", schema="lenop(Tensor len) -> Tensor",
                        reference="return len * 2").replace("like: x", "like: len")
    return [Run(["new", spec_with(work, text=text), "-o", "out"], expect="either", check=project_tests)]


@case
def case_new_op_named_sum(work):
    return [Run(["new", spec_with(work, "sum(Tensor x) -> Tensor"), "-o", "out"], expect="ok",
                check=project_tests)]


def package_spec(package: str) -> str:
    return SIMPLE_SPEC.format(schema="double(Tensor x) -> Tensor").replace("style: library",
                                                                          f"style: library\npackage: {package}")


@case
def case_new_package_os(work):
    return [Run(["new", spec_with(work, text=package_spec("os")), "-o", "out"], expect="either", check=project_tests)]


@case
def case_new_package_operator(work):
    return [Run(["new", spec_with(work, text=package_spec("operator")), "-o", "out"], expect="either",
                check=project_tests)]


@case
def case_new_package_sympy(work):
    return [Run(["new", spec_with(work, text=package_spec("sympy")), "-o", "out"], expect="either",
                check=project_tests)]


@case
def case_new_values_ragged(work):
    return [Run(["new", spec_with(work, text=example_spec("- {x: {values: [[1.0, 2.0], [3.0]]}}\n")), "-o", "out"],
                expect="either", check=project_tests)]


@case
def case_new_shape_huge(work):
    return [Run(["new", spec_with(work, text=example_spec("- {x: {shape: [1e21, 2]}}\n")), "-o", "out"],
                expect="either", check=project_tests)]


@case
def case_new_shape_huge_int(work):
    return [Run(["new", spec_with(work, text=example_spec("- {x: {shape: [1000000000000000000000, 2]}}\n")),
                 "-o", "out"], expect="either", check=project_tests)]


@case
def case_new_shape_100_dims(work):
    return [Run(["new", spec_with(work, text=example_spec("- {x: {shape: [" + ", ".join(["1"] * 100) + "]}}\n")),
                 "-o", "out"], expect="either", check=project_tests)]


@case
def case_new_values_huge_int(work):
    return [Run(["new", spec_with(work, text=example_spec("- {x: {values: [1, 99999999999999999999999]}}\n",
                                                          schema="ex(Tensor x) -> Tensor", reference="return x")),
                 "-o", "out"], expect="either", check=project_tests)]


def many_ops_spec(count: int) -> str:
    lines = ["namespace: many", "style: library", "device: cpu", "ops:"]
    for index in range(count):
        lines += [f'  - schema: "op{index}(Tensor x, float s) -> Tensor"', "    outputs:", "      out0: {like: x}",
                  '    reference: "return x * s"', "    examples:", "      - {x: {shape: [2, 3]}, s: 2.0}"]
    return "\n".join(lines) + "\n"


@case
def case_new_dry_run_2000_ops(work):
    def check(outcome, work):
        left = opgen_temp_dirs(work)
        return [f"temporary folders left: {sorted(left)}"] if left else []
    return [Run(["new", spec_with(work, text=many_ops_spec(2000)), "-o", "out", "--dry-run"], expect="ok",
                timeout=120, check=check)]


@case
def case_new_killed_leaves_no_temp_folder(work):
    """SIGKILL in the middle of rendering: the next run removes the folder the killed one left."""
    spec = spec_with(work, text=many_ops_spec(300))
    process = subprocess.Popen([sys.executable, "-m", "opgen", "new", spec, "-o", "out", "--dry-run"], cwd=work,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=case_env(work))
    deadline = time.time() + 60
    while time.time() < deadline and not opgen_temp_dirs(work):
        time.sleep(0.05)
    time.sleep(0.3)
    process.kill()
    process.wait()
    if not opgen_temp_dirs(work):
        raise Skip("the killed run had no temporary folder yet")

    def check(outcome, work):
        left = opgen_temp_dirs(work)
        return [f"temporary folders left after the next run: {sorted(left)}"] if left else []
    return [Run(["new", spec_with(work), "-o", "out2", "--dry-run"], expect="ok", check=check)]


@case
def case_new_sigterm_leaves_no_temp_folder(work):
    spec = spec_with(work, text=many_ops_spec(300))
    process = subprocess.Popen([sys.executable, "-m", "opgen", "new", spec, "-o", "out", "--dry-run"], cwd=work,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=case_env(work))
    deadline = time.time() + 60
    while time.time() < deadline and not opgen_temp_dirs(work):
        time.sleep(0.05)
    time.sleep(0.3)
    process.terminate()
    _, err = process.communicate()
    left = opgen_temp_dirs(work)
    problems = [f"temporary folders left by SIGTERM: {sorted(left)}"] if left else []
    if "Traceback" in err:
        problems.append("traceback on SIGTERM")
    return problems


# explain

DEEP_SCHEMAS = {
    "list_3000": "f(Tensor" + "[]" * 3000 + " x) -> Tensor",
    "parens_5000": "f(" + "(" * 5000 + "Tensor x) -> Tensor",
    "int_5000_digits": "f(Tensor x, int n=" + "7" * 5000 + ") -> Tensor",
    "list_size_5000_digits": "f(int[" + "7" * 5000 + "] x) -> Tensor",
    "float_5000_digits": "f(Tensor x, float s=" + "7" * 5000 + ".5) -> Tensor",
    "optional_3000": "f(Tensor" + "?" * 3000 + " x) -> Tensor",
    "tuple_returns_3000": "f(Tensor x) -> " + "(" * 3000 + "Tensor" + ")" * 3000,
    "default_list_5000": "f(int[] x=" + "[" * 5000 + "]" * 5000 + ") -> Tensor",
}


def explain_cases():
    for key, schema in DEEP_SCHEMAS.items():
        for mode in ("plain", "json", "stdin"):
            def make(work, schema=schema, mode=mode):
                if mode == "plain":
                    return [Run(["explain", schema])]
                if mode == "json":
                    return [Run(["explain", "--json", schema])]
                return [Run(["explain", "-", "--json"], stdin=schema + "\nf(Tensor x) -> Tensor\n", expect="either",
                            check=_stdin_other_line_answered)]
            CASES[f"explain_{key}_{mode}"] = make


def _stdin_other_line_answered(outcome, work):
    lines = [line for line in outcome.out.splitlines() if line.strip()]
    if len(lines) != 2:
        return [f"stdin mode printed {len(lines)} lines for 2 schemas"]
    first = json.loads(lines[0])
    if "error" not in first or first["error"].get("column") is None:
        return ["stdin mode: the deep schema's line has no located error"]
    return []


explain_cases()


# add

def op_plugin_root(work: Path) -> Path:
    root = work / "op-plugin"
    shutil.copytree(OP_PLUGIN_FIXTURE, root)
    return root


OP_PLUGIN_SPEC = """\
namespace: npu
ops:
  - schema: "npu_double(Tensor self) -> Tensor"
    outputs:
      out0: {like: self}
    reference: "return self * 2"
    examples:
      - {self: {shape: [2, 3]}}
"""


def add_run(work: Path, root: Path, spec: Path | None = None, **kwargs) -> list[Run]:
    spec = spec or write(work / "plugin_spec.yaml", OP_PLUGIN_SPEC)  # no backward: the checkout's files decide
    before = tree_digest(root, skip=())

    def check(outcome, work):
        after = tree_digest(root, skip=())
        return [] if after == before else ["opgen add wrote into the checkout although it refused"]
    return [Run(["add", "--op-plugin-root", str(root), str(spec)], check=check, **kwargs)]


def hostile_file(relative: str, data: bytes, spec: Path | None = None):
    def make(work):
        root = op_plugin_root(work)
        write(root / relative, data)
        return add_run(work, root, spec)
    return make


FUNCTIONS = "op_plugin/config/op_plugin_functions.yaml"
CASES["add_functions_latin1"] = hostile_file(FUNCTIONS, "custom:\n  - func: caf\xe9(Tensor x) -> Tensor\n"
                                             .encode("latin-1"))
CASES["add_functions_utf16"] = hostile_file(FUNCTIONS, "custom:\n  - func: f(Tensor x) -> Tensor\n".encode("utf-16"))
CASES["add_functions_custom_mapping"] = hostile_file(FUNCTIONS, b"custom:\n  func: f(Tensor x) -> Tensor\n")
CASES["add_functions_custom_scalar"] = hostile_file(FUNCTIONS, b"custom: 3\n")
CASES["add_functions_custom_ints"] = hostile_file(FUNCTIONS, b"custom: [1, 2, 3]\n")
CASES["add_functions_deep"] = hostile_file(FUNCTIONS, b"custom:\n  - " + b"[" * 20000 + b"]" * 20000 + b"\n")
CASES["add_functions_top_list"] = hostile_file(FUNCTIONS, b"- custom\n")
CASES["add_meta_latin1"] = hostile_file("op_plugin/python/meta/_meta_registrations.py",
                                        "# caf\xe9\nimport torch\n".encode("latin-1"))
CASES["add_derivatives_latin1"] = hostile_file("op_plugin/config/derivatives.yaml",
                                               "backward:\n  - name: caf\xe9\n".encode("latin-1"),
                                               EXAMPLES / "op_plugin" / "rms_norm.yaml")  # it has a backward
CASES["add_docs_latin1"] = hostile_file("codegen/templates/_op_plugin_docs.py", "# caf\xe9\n".encode("latin-1"))


@case
def case_add_functions_is_directory(work):
    root = op_plugin_root(work)
    (root / FUNCTIONS).unlink()
    (root / FUNCTIONS).mkdir()
    return add_run(work, root)


@case
def case_add_functions_fifo(work):
    root = op_plugin_root(work)
    (root / FUNCTIONS).unlink()
    os.mkfifo(root / FUNCTIONS)
    return add_run(work, root, timeout=20)


# check

@case
def case_check_timeout_1e400(work):
    return [Run(["check", "x.y", "--timeout", "1e400"])]


@case
def case_check_timeout_nan(work):
    return [Run(["check", "x.y", "--timeout", "nan"])]


# lint

def lint_case(make_tree, *, expect="ok", timeout=60, check=None):
    def make(work):
        target = make_tree(work)
        return [Run(["lint", str(target)], expect=expect, timeout=timeout, check=check)]
    return make


def with_good_file(work: Path) -> Path:
    """A project whose one real finding must still be printed, whatever else is in it."""
    write(work / "proj" / "ops.py", 'import torch\nlib = torch.library.Library("myops", "FRAGMENT")\n'
          'lib.define("scale(Tensor(a) x) -> Tensor(a)")\n')
    return work / "proj"


def finding_printed(outcome, work):
    return [] if "ops.py" in outcome.out else ["the other files' findings were not printed"]


def fifo_named(name):
    def tree(work):
        root = with_good_file(work)
        os.mkfifo(root / name)
        return root
    return tree


def symlink_to(name, target):
    def tree(work):
        root = with_good_file(work)
        os.symlink(target, root / name)
        return root
    return tree


CASES["lint_fifo_py"] = lint_case(fifo_named("x.py"), timeout=20, check=finding_printed)
CASES["lint_fifo_functions_yaml"] = lint_case(fifo_named("op_functions.yaml"), timeout=20, check=finding_printed)
CASES["lint_dev_zero_py"] = lint_case(symlink_to("zero.py", "/dev/zero"), timeout=20, check=finding_printed)
CASES["lint_urandom_yaml"] = lint_case(symlink_to("x_functions.yaml", "/dev/urandom"), timeout=20,
                                       check=finding_printed)
CASES["lint_dangling_functions_yaml"] = lint_case(symlink_to("y_functions.yaml", "/nonexistent/y.yaml"),
                                                  check=finding_printed)
CASES["lint_symlink_loop_py"] = lint_case(symlink_to("loop.py", "loop.py"), check=finding_printed)


@case
def case_lint_fifo_given_by_name(work):
    os.mkfifo(work / "x.py")
    return [Run(["lint", "x.py"], expect="ok", timeout=20)]


def big_registration_file(megabytes: int):
    def tree(work):
        root = with_good_file(work)
        line = 'lib.define("f{n}(Tensor x) -> Tensor")\n'
        head = 'import torch\nlib = torch.library.Library("big", "FRAGMENT")\n'
        count = megabytes * (1 << 20) // len(line.format(n=100000))
        write(root / "big.py", head + "".join(line.format(n=n) for n in range(count)))
        return root
    return tree


CASES["lint_50mb_registrations"] = lint_case(big_registration_file(50), timeout=120, check=finding_printed)


@case
def case_lint_unreadable_functions_yaml(work):
    root = with_good_file(work)
    path = write(root / "op_plugin_functions.yaml", b"custom:\n  - func: f(Tensor x) -> Tensor\n")
    path.chmod(0)
    if os.access(path, os.R_OK):  # root reads anything: use a directory-shaped obstacle instead
        path.unlink()
        os.symlink(root / "missing" / "x.yaml", path)
    return [Run(["lint", str(root)], expect="ok", check=finding_printed)]


@case
def case_lint_define_5000_parens(work):
    root = with_good_file(work)
    write(root / "deep.py", 'import torch\nlib = torch.library.Library("deep", "FRAGMENT")\n'
          f'lib.define("f({"(" * 5000}Tensor x) -> Tensor")\n')
    return [Run(["lint", str(root)], expect="ok", check=finding_printed)]


@case
def case_lint_deep_yaml(work):
    root = with_good_file(work)
    write(root / "op_plugin_functions.yaml", "custom:\n  - " + "[" * 20000 + "]" * 20000 + "\n")
    return [Run(["lint", str(root)], expect="ok", check=finding_printed)]


@case
def case_lint_yaml_not_utf8(work):
    root = with_good_file(work)
    write(root / "op_plugin_functions.yaml", "custom:\n  - func: caf\xe9(Tensor x) -> Tensor\n".encode("latin-1"))
    return [Run(["lint", str(root)], expect="ok", check=finding_printed)]


FIXABLE = 'import torch\nlib = torch.library.Library("myops", "FRAGMENT")\nlib.impl("scale", lambda x: x, "cuda")\n'


def fix_check(fixed: list[Path], kept: dict[Path, bytes], encoding: str = "utf-8"):
    """`fixed` files hold the fix (in their own encoding, the rest of their bytes as they were); `kept` ones are
    byte for byte as they were, and the run says it did not rewrite them."""
    def check(outcome, work):
        problems = []
        for path in fixed:
            text = path.read_bytes().decode(encoding if "latin" in path.name else "utf-8")
            if '"CUDA"' not in text or "cuda" in text:
                problems.append(f"{path.name} was not fixed")
            if "latin" in path.name and "caf\xe9" not in text:
                problems.append(f"{path.name} lost its latin-1 text")
        for path, data in kept.items():
            if path.read_bytes() != data:
                problems.append(f"bytes lost: {path.name} was changed although it could not be rewritten")
            if f"{path.name}: --fix did not rewrite" not in outcome.err:
                problems.append(f"no report that {path.name} was not rewritten")
        return problems
    return check


@case
def case_lint_fix_latin1_cookie(work):
    root = work / "proj"
    good = write(root / "a_ops.py", FIXABLE)
    bad = write(root / "b_latin1.py", ("# -*- coding: latin-1 -*-\n# caf\xe9\n" + FIXABLE).encode("latin-1"))
    return [Run(["lint", "--fix", str(root)], expect="ok", check=fix_check([good, bad], {}, "latin-1"))]


@case
def case_lint_fix_read_only_file(work):
    root = work / "proj"
    good = write(root / "a_ops.py", FIXABLE)
    mount = root / "ro"
    stack = contextlib.ExitStack()
    stack.enter_context(mounted(mount, "size=1m"))
    CLEANUPS.append(stack)
    write(mount / "keep_ro.py", FIXABLE)
    subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
    return [Run(["lint", "--fix", str(root)], expect="ok",
                check=fix_check([good], {mount / "keep_ro.py": FIXABLE.encode()}))]


# more of the same kind: other files, other commands

@case
def case_new_spec_is_dev_zero(work):
    os.symlink("/dev/zero", work / "zero.yaml")
    return [Run(["new", str(work / "zero.yaml"), "-o", "out"], timeout=20)]


@case
def case_new_spec_is_a_directory(work):
    (work / "dir.yaml").mkdir()
    return [Run(["new", str(work / "dir.yaml"), "-o", "out"])]


@case
def case_new_spec_utf16(work):
    return [Run(["new", str(write(work / "s.yaml", SIMPLE_SPEC.format(schema="double(Tensor x) -> Tensor")
                                   .encode("utf-16"))), "-o", "out"])]


@case
def case_new_spec_with_nul(work):
    return [Run(["new", spec_with(work, text="namespace: bad\x00\nops: []\n"), "-o", "out"])]


@case
def case_new_spec_40mb(work):
    return [Run(["new", str(write(work / "big.yaml", "namespace: bad\n# " + "x" * (40 << 20) + "\nops: []\n")),
                 "-o", "out"], timeout=60)]


@case
def case_new_schema_flag_deep(work):
    return [Run(["new", "--schema", "ns::f(" + "(" * 5000 + "Tensor x) -> Tensor", "-o", "out"])]


@case
def case_new_schema_flag_keyword(work):
    return [Run(["new", "--schema", "ns::lambda(Tensor x) -> Tensor", "-o", "out"])]


@case
def case_new_manifest_is_a_fifo(work):
    out = work / "out"
    subprocess.run([sys.executable, "-m", "opgen", "new", spec_with(work), "-o", str(out)], check=True,
                   capture_output=True, env=case_env(work))
    (out / ".opgen" / "manifest.json").unlink()
    os.mkfifo(out / ".opgen" / "manifest.json")
    return [Run(["new", spec_with(work), "-o", str(out)], timeout=20)]


@case
def case_new_opgen_dir_is_a_file(work):
    out = work / "out"
    out.mkdir()
    write(out / ".opgen", "x")
    return [Run(["new", spec_with(work), "-o", str(out)])]


@case
def case_new_values_nan_in_int8(work):
    return [Run(["new", spec_with(work, text=example_spec("- {x: {values: [.nan], dtype: int8}}\n")), "-o", "out"])]


@case
def case_new_shape_negative(work):
    return [Run(["new", spec_with(work, text=example_spec("- {x: {shape: [-1, 2]}}\n")), "-o", "out"])]


@case
def case_new_reference_5000_terms(work):
    text = SIMPLE_SPEC.format(schema="double(Tensor x) -> Tensor").replace("return x * 2",
                                                                           "return x" + " + 0" * 5000)
    return [Run(["new", spec_with(work, text=text), "-o", "out"])]


@case
def case_new_rule_deep(work):
    text = SIMPLE_SPEC.format(schema="double(Tensor x) -> Tensor").replace(
        "{like: x}", '{shape: "[x.shape[0]' + " + 1" * 3000 + ']", dtype: "x.dtype"}')
    return [Run(["new", spec_with(work, text=text), "-o", "out"])]


@case
def case_new_arg_named_len_called(work):
    text = SIMPLE_SPEC.format(schema="f(Tensor x, int[] len=[1, 2]) -> Tensor").replace(
        "return x * 2", "return x * len(len)")
    return [Run(["new", spec_with(work, text=text), "-o", "out"])]


@case
def case_explain_nul_and_unicode(work):
    return [Run(["explain", "-", "--json"], stdin="f(Tensor\x00 x) -> Tensor\nf(Tensor \u00e9) -> Tensor\n"
                 "f(Tensor x) -> Tensor\n", expect="either")]


@case
def case_add_root_is_a_file(work):
    write(work / "root", "x")
    return [Run(["add", "--op-plugin-root", str(work / "root"), str(EXAMPLES / "op_plugin" / "rms_norm.yaml")])]


@case
def case_add_meta_is_dev_zero(work):
    root = op_plugin_root(work)
    meta = root / "op_plugin/python/meta/_meta_registrations.py"
    meta.unlink()
    os.symlink("/dev/zero", meta)
    return add_run(work, root, timeout=20)


@case
def case_check_inputs_fifo(work):
    os.mkfifo(work / "in.yaml")
    return [Run(["check", "x.y", "--inputs", str(work / "in.yaml")], timeout=20)]


@case
def case_meta_coverage_fifo(work):
    os.mkfifo(work / "f.yaml")
    return [Run(["meta-coverage", str(work / "f.yaml"), "--meta", str(FIXTURE_META)], timeout=20)]


@case
def case_meta_coverage_latin1(work):
    return [Run(["meta-coverage", str(write(work / "f.yaml", "custom:\n  - func: caf\xe9() -> Tensor\n"
                                                 .encode("latin-1"))), "--meta", str(FIXTURE_META)], timeout=20)]


@case
def case_lint_config_fifo(work):
    os.mkfifo(work / "pyproject.toml")
    root = with_good_file(work)
    return [Run(["lint", "--config", str(work / "pyproject.toml"), str(root)], timeout=20)]


@case
def case_lint_binary_and_empty_files(work):
    root = with_good_file(work)
    write(root / "bin.py", bytes(range(256)) * 64)
    write(root / "nul.py", b"import torch\ntorch.library.define('x::f(Tensor x) -> Tensor')\x00\n")
    write(root / "empty.py", b"")
    write(root / "op_functions.yaml", bytes(range(256)))
    return [Run(["lint", str(root)], expect="ok", check=finding_printed)]


@case
def case_lint_deep_python(work):
    root = with_good_file(work)
    write(root / "deep.py", "import torch\ntorch.library.define('x::f(Tensor x) -> Tensor')\nx = 1" + " + 1" * 5000
          + "\n")
    return [Run(["lint", str(root)], expect="ok", check=finding_printed)]


@case
def case_lint_fix_file_vanishes(work):
    """A file is fixed through a symlink whose target is read-only: reported, nothing lost."""
    root = work / "proj"
    write(root / "a_ops.py", FIXABLE)
    os.symlink("/proc/version", root / "b_ops.py")
    return [Run(["lint", "--fix", str(root)], expect="ok")]


# recovery after kill -9

KILL_AFTER = """
import os, signal
from opgen.render import staging as _w
_count = [0]
_point, _at = os.environ["OPGEN_CAMPAIGN_KILL"].split(":")
def _tick():
    _count[0] += 1
    if _count[0] == int(_at):
        os.kill(os.getpid(), signal.SIGKILL)
if _point == "stage":
    _add = _w.Batch.add
    def add(self, *args, **kwargs):
        _add(self, *args, **kwargs)
        _tick()
    _w.Batch.add = add
else:
    _replace = os.replace
    def replace(src, dst, *args, **kwargs):
        _replace(src, dst, *args, **kwargs)
        if str(src).endswith("opgen-tmp"):
            _tick()
    _w.os.replace = replace
"""


def killed_then_rerun(point: str, at: int, regenerate: bool):
    def make(work):
        first_spec = EXAMPLES / "rms_norm.yaml"
        second_spec = EXAMPLES / "rms_norm.yaml"
        out = work / "out"
        style = []
        if regenerate:
            subprocess.run([sys.executable, "-m", "opgen", "new", str(first_spec), "-o", str(out)], check=True,
                           capture_output=True, env=case_env(work))
            style = ["--style", "custom_op"]
        env = case_env(work, OPGEN_CAMPAIGN_KILL=f"{point}:{at}")
        killed = subprocess.run([sys.executable, "-c", KILL_AFTER + "\nfrom opgen.cli import main\nmain()", "new",
                                 str(second_spec), "-o", str(out), *style], env=env, capture_output=True, check=False)
        if killed.returncode != -signal.SIGKILL:
            raise Skip(f"the run was not killed at {point} {at} (exit {killed.returncode})")
        reference = work / "reference"
        subprocess.run([sys.executable, "-m", "opgen", "new", str(second_spec), "-o", str(reference), *style],
                       check=True, capture_output=True, env=case_env(work))

        def check(outcome, work):
            problems = []
            if leftovers(out):
                problems.append(f"failed recovery: staged files left {leftovers(out)}")
            if tree_digest(out) != tree_digest(reference):
                problems.append("failed recovery: the project differs from a clean generation")
            if manifest_files(out) != manifest_files(reference):
                problems.append("failed recovery: the manifest differs from a clean generation's")
            if opgen_temp_dirs(work):
                problems.append(f"temporary folders left: {sorted(opgen_temp_dirs(work))}")
            return problems
        return [Run(["new", str(second_spec), "-o", str(out), *style], expect="ok", check=check)]
    return make


# a first run writes 13 files, the regeneration (library -> custom_op) 3 and the manifest
for _regenerate, _points in ((False, (("stage", 1), ("stage", 5), ("rename", 1), ("rename", 4), ("rename", 9),
                                      ("rename", 13))),
                             (True, (("stage", 1), ("stage", 3), ("rename", 1), ("rename", 2), ("rename", 3)))):
    for _point, _at in _points:
        CASES[f"recover_{'regen' if _regenerate else 'first'}_{_point}_{_at}"] = killed_then_rerun(_point, _at,
                                                                                                   _regenerate)

# --- issue 37: rules and examples that would eat the machine or fail every call ------------------------------------

RULE_SPEC = """\
namespace: bad
style: library
device: cpu
ops:
  - schema: "{schema}"
    outputs:
      out0: {{shape: "{shape}", dtype: float32}}
    examples:
      - {{x: {{shape: [2, 3]}}{extra}}}
"""


def refused_rule(shape: str, schema: str = "f(Tensor x) -> Tensor", extra: str = ""):
    def make(work):
        text = RULE_SPEC.format(schema=schema, shape=shape, extra=extra)
        return [Run(["new", spec_with(work, text=text), "-o", "out"])]
    return make


for _name, _shape, _schema, _extra in (
        ("shape_times_1e8", "x.shape * 100000000", "f(Tensor x) -> Tensor", ""),
        ("repeat_1e12", "[1] * 1000000000000", "f(Tensor x) -> Tensor", ""),
        ("floordiv_zero", "[x.shape[0] // 0]", "f(Tensor x) -> Tensor", ""),
        ("mod_zero", "[x.shape[0] % (1 - 1)]", "f(Tensor x) -> Tensor", ""),
        ("negative_size", "[-3]", "f(Tensor x) -> Tensor", ""),
        ("size_times_1e8", "[x.shape[0] * 100000000]", "f(Tensor x) -> Tensor", ""),
        ("example_repeat_1e12", "[1] * n", "f(Tensor x, int n) -> Tensor", ", n: 1000000000000"),
        ("int_example_2_70", "x.shape", "f(Tensor x, int n) -> Tensor", ", n: 1180591620717411303424")):
    CASES[f"new_rule_{_name}"] = refused_rule(_shape, _schema, _extra)


@case
def case_new_values_1e6(work):
    text = example_spec("- {x: {values: [" + ", ".join(["0.5"] * 10**6) + "]}}\n")
    return [Run(["new", spec_with(work, text=text), "-o", "out", "--dry-run"], timeout=30)]


@case
def case_new_duplicate_output(work):
    text = RULE_SPEC.format(schema="f(Tensor x) -> Tensor", shape="[1]", extra="").replace(
        "    examples:", "      out0: {like: x}\n    examples:")
    return [Run(["new", spec_with(work, text=text), "-o", "out"])]


CLEANUPS: list[contextlib.ExitStack] = []


def run_case(name: str, make, scratch: Path) -> Result:
    work = scratch / name
    work.mkdir()
    result = Result(name)
    start = time.perf_counter()
    try:
        commands = make(work)
        if commands and isinstance(commands[0], str):  # a case that judged itself
            result.problems = list(commands)
            commands = []
        for command in commands:
            outcome = run(command, work)
            result.problems += judge(command, outcome, work)
            if ARGS.verbose:
                print(f"--- {name}: exit {outcome.rc} in {outcome.seconds:.1f} s\n{outcome.err[-1500:]}")
    except Skip as skip:
        result.skipped = str(skip)
    finally:
        while CLEANUPS:
            CLEANUPS.pop().close()
    result.seconds = time.perf_counter() - start
    return result


def main() -> int:
    global ARGS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", default=[], help="run the cases whose name contains this")
    parser.add_argument("--no-project-tests", action="store_true", help="do not run accepted projects' tests")
    parser.add_argument("-v", "--verbose", action="store_true")
    ARGS = parser.parse_args()
    selected = {n: m for n, m in CASES.items() if not ARGS.only or any(o in n for o in ARGS.only)}
    counts = dict.fromkeys(("internal error", "hang", "traceback", "not located", "failed recovery",
                            "broken project", "bytes lost", "other"), 0)
    with tempfile.TemporaryDirectory(prefix="bad-input-") as scratch:
        for name, make in selected.items():
            result = run_case(name, make, Path(scratch))
            status = "skip" if result.skipped else "FAIL" if result.problems else "ok"
            print(f"{status:4}  {name} ({result.seconds:.1f} s)" + (f": {result.skipped}" if result.skipped else ""),
                  flush=True)
            for problem in result.problems:
                print(f"        {problem}")
                kind = "hang" if problem.startswith("runaway memory") else next(
                    (k for k in counts if problem.startswith(k)), "other")
                counts[kind] += 1
    print("bad-input campaign: " + ", ".join(f"{count} {kind}" for kind, count in counts.items())
          + f" over {len(selected)} cases (target: 0 of each)")
    return 0


ARGS = argparse.Namespace(no_project_tests=False, verbose=False)

if __name__ == "__main__":
    sys.exit(main())
