"""The second campaign's cases (issue 37), each through the real command line: a hostile environment (closed
standard streams, a deleted working directory, symlink loops, memory, file size and disk limits, an unknown user's
home) or a hostile file (a NUL byte, a manifest nested 100,000 deep, a FIFO or a device where a file is due) ends
in a located error or the right result, with the documented exit code (2 bad input, 3 the machine refused) and no
traceback. Concurrency has its own file, test_concurrency.py."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_opgen_command

REPO = Path(__file__).resolve().parents[1]
SPEC = REPO / "examples" / "rms_norm.yaml"
WHEEL = os.environ.get("OPGEN_TORCH_NPU_WHEEL")
pytestmark = pytest.mark.skipif(os.name != "posix", reason="rlimits, FIFOs, mounts and closed descriptors are POSIX")


def opgen(*args: str, cwd: Path | None = None, env: dict | None = None, preexec=None, **streams):
    """`python -m opgen ARGS`, with the streams given (e.g. stdout=None closed by `close_fds`)."""
    full_env = {key: value for key, value in os.environ.items() if key != "OPGEN_DEBUG"}
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "opgen", *args], cwd=cwd, env=full_env, timeout=120, check=False,
                          preexec_fn=preexec, **streams)


def shell(command: str, cwd: Path) -> subprocess.CompletedProcess:
    """A shell line (`>&-` closes a stream the way a user's shell does)."""
    env = {key: value for key, value in os.environ.items() if key != "OPGEN_DEBUG"}
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=120,
                          check=False)


def assert_clean_error(done, *fragments: str, code: int = 2) -> None:
    err = done.stderr if isinstance(done.stderr, str) else done.stderr.decode()
    assert done.returncode == code, (done.returncode, err)
    assert "internal error" not in err and "Traceback" not in err, err
    assert err.startswith("error: "), err
    for fragment in fragments:
        assert fragment in err, err


# --- closed streams, the working directory, symlink loops --------------------------------------------------------


def test_new_with_stdout_closed_writes_the_project_and_exits_0(tmp_path):
    done = shell(f"{sys.executable} -m opgen new {SPEC} -o out >&-", tmp_path)
    assert done.returncode == 0, done.stderr
    assert "internal error" not in done.stderr
    assert (tmp_path / "out" / ".opgen" / "manifest.json").is_file()


def test_explain_of_stdin_with_stdin_closed_is_a_located_error(tmp_path):
    done = shell(f"{sys.executable} -m opgen explain - <&-", tmp_path)
    assert_clean_error(done, "<stdin>: SCHEMA '-' reads standard input, but it is closed")


def test_out_dir_at_a_symlink_loop_is_refused_naming_it(tmp_path):
    (tmp_path / "loop").symlink_to("loop")
    for out in ("loop", "loop/sub"):
        done = run_opgen_command("new", str(SPEC), "-o", str(tmp_path / out))
        assert_clean_error(done, f"cannot use {tmp_path / out}: a symbolic link on the way points back to itself")


def test_a_deleted_working_directory_is_named(tmp_path):
    done = shell(f"mkdir gone && cd gone && rmdir ../gone && {sys.executable} -m opgen new {SPEC} -o out", tmp_path)
    assert_clean_error(done, f"cannot use the current directory {tmp_path / 'gone'}: it was deleted")


# --- the machine's limits ---------------------------------------------------------------------------------------


def address_space(limit: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    return apply


@pytest.mark.slow
def test_no_thread_to_start_under_a_memory_limit_still_writes_the_project(tmp_path):
    """Under `ulimit -v` a new thread's stack cannot be mapped ("can't start new thread", an internal error and an
    empty directory before): the fsyncs run one by one instead, and the project is whole. The limit is found by
    stepping down until `opgen new` itself no longer starts, so it holds on any Python build."""
    outcomes = []
    for megabytes in (400, 350, 300, 250, 200, 150):
        out = tmp_path / f"out{megabytes}"
        done = opgen("new", str(SPEC), "-o", str(out), preexec=address_space(megabytes << 20), capture_output=True,
                     text=True)
        outcomes.append(done.returncode)
        assert "internal error" not in done.stderr and "Traceback" not in done.stderr, (megabytes, done.stderr)
        if done.returncode == 0:
            assert (out / ".opgen" / "manifest.json").is_file()
        else:
            assert done.returncode == 3, (megabytes, done.stderr)  # out of memory: the machine refused
            assert not out.exists() or not any(out.iterdir()), megabytes
    assert 0 in outcomes


def test_lint_fix_under_a_file_size_limit_leaves_the_file_whole(tmp_path):
    """`ulimit -f` below the file's size: the rewrite fails, the file is as it was, its problems remain."""
    ops = tmp_path / "ops.py"
    text = ('import torch\nlib = torch.library.Library("myops", "FRAGMENT")\n'
            'lib.define("scale(Tensor x, float s) -> Tensor")\nlib.impl("scale", lambda x, s: x * s, "npu")\n'
            + "# padding\n" * 300)
    ops.write_text(text)

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))

    done = opgen("lint", "--fix", str(ops), preexec=limit, capture_output=True, text=True)
    assert done.returncode == 1, done.stderr
    assert "--fix did not rewrite this file: cannot write it: File too large" in done.stderr
    assert ops.read_text() == text
    assert [path.name for path in tmp_path.iterdir()] == ["ops.py"]


@pytest.fixture
def full_disk(tmp_path):
    """A 64 KiB tmpfs, where the machine lets this process mount one (root); skipped elsewhere."""
    mount = tmp_path / "full"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], capture_output=True,
                          check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", str(mount)], check=False)


@pytest.mark.skipif(not WHEEL, reason="needs the torch-npu wheel: set OPGEN_TORCH_NPU_WHEEL")
def test_npugraph_ex_fetch_on_a_full_disk_is_an_environment_fault(full_disk):
    cache = full_disk / "cache"
    done = opgen("npugraph-ex", "fetch", "--wheel", WHEEL, env={"OPGEN_CACHE_DIR": str(cache)}, capture_output=True,
                 text=True)
    assert_clean_error(done, f"cannot write the cache at {cache}/npugraph_ex/", "No space left on device",
                       "the cache is as it was", "free some space", code=3)
    assert not [path for path in cache.rglob("*") if path.is_file()]


def test_new_on_a_full_disk_is_an_environment_fault_and_writes_nothing(full_disk):
    out = full_disk / "out"
    done = run_opgen_command("new", str(SPEC), "-o", str(out))
    assert_clean_error(done, "No space left on device", "nothing was written", code=3)
    assert not out.exists()


# --- hostile files -----------------------------------------------------------------------------------------------


def test_a_nul_byte_is_reported_at_its_line_and_column(tmp_path):
    lines = SPEC.read_text().split("\n")
    lines[5] = lines[5][:4] + "\x00" + lines[5][4:]
    spec = tmp_path / "nul.yaml"
    spec.write_text("\n".join(lines))
    done = run_opgen_command("new", str(spec), "-o", str(tmp_path / "out"))
    assert_clean_error(done, f"{spec}:6:5: invalid YAML: the character U+0000 at offset")
    assert not (tmp_path / "out").exists()


def test_a_manifest_nested_100000_deep_is_named_as_damaged(tmp_path):
    out = tmp_path / "out"
    assert run_opgen_command("new", str(SPEC), "-o", str(out)).returncode == 0
    (out / ".opgen" / "manifest.json").write_text("[" * 100_000 + "]" * 100_000)
    done = run_opgen_command("new", str(SPEC), "-o", str(out))
    assert_clean_error(done, ".opgen/manifest.json: is damaged (nested too deeply to be opgen's)", "--force")
    forced = run_opgen_command("new", str(SPEC), "-o", str(out), "--force")
    assert forced.returncode == 0, forced.stderr


def test_an_unknown_users_home_as_the_cache_is_a_located_error():
    for args in (("path",), ("fetch", "--wheel", "/nonexistent.whl")):
        done = run_opgen_command("npugraph-ex", *args, env={"OPGEN_CACHE_DIR": "~nouser_opgen/x"})
        assert_clean_error(done, "OPGEN_CACHE_DIR=~nouser_opgen/x: cannot expand '~nouser_opgen': there is no user")


@pytest.mark.parametrize("kind", ["fifo", "device", "missing"])
def test_inputs_and_wheel_name_what_they_are(tmp_path, kind):
    """A FIFO or /dev/zero given as --inputs or --wheel was "no such file"; each is now said as what it is."""
    if kind == "fifo":
        path = tmp_path / "pipe"
        os.mkfifo(path)
        words = "is a named pipe (FIFO), not a regular file"
    elif kind == "device":
        path, words = Path("/dev/zero"), "is a character device, not a regular file"
    else:
        path, words = tmp_path / "none.yaml", "does not exist"
    done = run_opgen_command("check", "some_module:ns::op", "--inputs", str(path), timeout=30)
    assert_clean_error(done, f"--inputs file {path} {words}")
    done = run_opgen_command("npugraph-ex", "fetch", "--wheel", str(path), timeout=30)
    assert_clean_error(done, f"--wheel {path}" + (": no such file" if kind == "missing" else f" {words}"))


def test_non_utf8_inputs_are_located_at_line_and_column(tmp_path):
    inputs = tmp_path / "inputs.yaml"
    inputs.write_bytes(b"- {x: {shape: [2]}}\n- {x: {shape: [\xff]}}\n")
    done = run_opgen_command("check", "some_module:ns::op", "--inputs", str(inputs), timeout=30)
    assert_clean_error(done, f"{inputs}:2:16: not UTF-8: byte 0xff at offset 35")


@pytest.mark.slow
def test_check_refuses_duplicate_op_keys_in_inputs_as_new_does(tmp_path):
    module = tmp_path / "dup_inputs.py"
    module.write_text(
        "import torch\n"
        "@torch.library.custom_op('chk_dup::twice', mutates_args=())\n"
        "def twice(x: torch.Tensor) -> torch.Tensor:\n"
        "    return x * 2\n"
        "@twice.register_fake\n"
        "def _(x):\n"
        "    return torch.empty_like(x)\n")
    inputs = tmp_path / "inputs.yaml"
    inputs.write_text("twice: [{x: {shape: [2]}}]\ntwice: [{x: {shape: [3]}}]\n")
    done = run_opgen_command("check", "dup_inputs:chk_dup::twice", "--skip", "aot_eager", "--skip", "npugraph_ex",
                             "--inputs", str(inputs), cwd=str(tmp_path), env={"PYTHONPATH": str(tmp_path)})
    assert done.returncode == 2, done.stdout + done.stderr
    assert "duplicate key 'twice' in the inputs file" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert "inputs.yaml:2:1:" in done.stderr, done.stderr


# --- the memory of a generated test ------------------------------------------------------------------------------

MEMORY_BOUND = 3 << 30  # address space (`ulimit -v`) the generated tests of a spec at the limits run in (docs/limits.md)
AT_THE_LIMITS = """\
namespace: membound
style: library
device: cpu
ops:
  - schema: "double(Tensor x) -> Tensor"
    outputs:
      out0: {shape: "x.shape", dtype: "x.dtype"}
    reference: "return x * 2"
    examples:
      - {x: {shape: [1024, 1024]}}
"""


@pytest.mark.slow
def test_the_generated_tests_of_a_spec_at_the_limits_run_under_the_memory_bound(tmp_path):
    """An example of the most elements a spec may give (1,048,576), generated and its tests run under `ulimit -v`
    3 GiB: they pass (measured peak 902 MiB resident; 16 Mi elements, the limit before issue 37, took 5.7 GiB)."""
    from opgen.spec.tensor_limits import MAX_ELEMENTS

    assert 1024 * 1024 == MAX_ELEMENTS
    spec = tmp_path / "spec.yaml"
    spec.write_text(AT_THE_LIMITS)
    out = tmp_path / "out"
    assert opgen("new", str(spec), "-o", str(out), preexec=address_space(MEMORY_BOUND)).returncode == 0
    env = {key: value for key, value in os.environ.items() if key != "OPGEN_DEBUG"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-n", "0", "tests"],
                          cwd=out, env=env, capture_output=True, text=True, timeout=900, check=False,
                          preexec_fn=address_space(MEMORY_BOUND))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
