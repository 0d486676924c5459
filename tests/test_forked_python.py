"""tests/forked_python.py: a forked run is what a fresh `python -m pytest` or `python -c` would be, a hung one is killed at its
timeout, a crashed one reports its exit code, and the server survives both."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import forked_python
import pytest
from forked_python import forkable, run_pytest, run_python

pytestmark = pytest.mark.xdist_group("forked_python")  # one server for the module's runs

REPORT = '''
import json, os, signal, sys, threading

def test_report():
    main = sys.modules["__main__"]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_CURRENT_TEST", "REPORT_TO")}
    with open(os.environ["REPORT_TO"], "w") as out:
        json.dump({"cwd": os.getcwd(), "env": env, "path": sys.path, "argv": sys.argv,
                   "main": getattr(main.__spec__, "name", None), "bytecode": sys.dont_write_bytecode,
                   "sigpipe": int(signal.getsignal(signal.SIGPIPE)),
                   "python_threads": threading.active_count(), "parent": os.getppid()}, out)
'''


def _report(tmp_path, runner, name, **extra_env):
    project = tmp_path / "project"
    (project / "tests").mkdir(parents=True, exist_ok=True)
    (project / "tests" / "test_report.py").write_text(REPORT)
    target = tmp_path / f"{name}.json"
    env = {**os.environ, "PYTHONPATH": f"{tmp_path / 'lib'}{os.pathsep}{tmp_path / 'other'}",
           "PYTHONDONTWRITEBYTECODE": "1", "REPORT_TO": str(target), **extra_env}
    args = ["-q", "-p", "no:cacheprovider", "tests"]
    done = runner(args, project, env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout
    printed = re.sub(r" in [0-9.]+s", "", done.stdout + done.stderr)
    return {**json.loads(target.read_text()), "printed": printed}


def _real(args, cwd, env):
    return subprocess.run([sys.executable, "-m", "pytest", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120, check=False)


def _forked(args, cwd, env):
    return run_pytest(args, cwd=cwd, env=env, timeout=120)


def test_a_forked_run_sees_what_a_fresh_python_m_pytest_sees(tmp_path):
    real = _report(tmp_path, _real, "real")
    forked = _report(tmp_path, _forked, "forked")
    assert forked["parent"] != os.getpid()  # it did run in the server's child
    assert real["parent"] == os.getpid()
    for key in ("cwd", "env", "path", "argv", "main", "bytecode", "sigpipe", "python_threads", "printed"):
        assert forked[key] == real[key], key


CODE_REPORT = """
import json, os, sys, threading
main = sys.modules["__main__"]
print(json.dumps({"cwd": os.getcwd(), "path": sys.path, "argv": sys.argv, "name": __name__,
                  "main": sorted(k for k in vars(main) if k != "__builtins__"), "parent": os.getppid(),
                  "opgen": sorted(name for name in sys.modules if name.partition(".")[0] == "opgen"),
                  "env": {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}}))
def late():
    import time
    time.sleep(0.3)
    print("a thread's last line")
threading.Thread(target=late).start()
{ending}
"""


@pytest.mark.parametrize(("ending", "code", "stderr"), [
    ("", 0, ""), ("sys.exit(3)", 3, ""), ("sys.exit('bye')", 1, "bye"),
    ("raise KeyError('planted')", 1, "KeyError: 'planted'")])
def test_python_c_forked_sees_what_a_fresh_python_c_sees(tmp_path, ending, code, stderr):
    """`-c`: cwd, sys.path (an empty first entry, PYTHONPATH's next), argv, `__main__`, no opgen module imported (the
    server's are dropped), the exit code of a normal end, a SystemExit and an uncaught exception (its traceback on
    stderr), and the wait for a non-daemon thread."""
    env = {**os.environ, "PYTHONPATH": f"{tmp_path / 'lib'}{os.pathsep}{tmp_path / 'other'}"}
    args = ["-c", CODE_REPORT.replace("{ending}", ending), "one", "two"]
    real = subprocess.run([sys.executable, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    forked = run_python(args, cwd=tmp_path, env=env, timeout=120)
    reports = []
    for done in (real, forked):
        assert done.returncode == code, done.stderr
        first, last = done.stdout.splitlines()
        assert last == "a thread's last line"
        assert stderr in done.stderr and ("Traceback (most recent call last)" in done.stderr) == ("raise" in ending)
        reports.append(json.loads(first))
    real_report, forked_report = reports
    assert real_report.pop("parent") == os.getpid() != forked_report.pop("parent")
    assert forked_report == real_report
    with pytest.raises(ValueError, match="not"):
        run_python(["-m", "json.tool"])


MODULE_REPORT = """
import json, os, sys
main = sys.modules["__main__"]
print(json.dumps({"cwd": os.getcwd(), "path": sys.path, "argv": sys.argv, "spec": main.__spec__.name,
                  "file": main.__file__, "stdin": sys.stdin.read(), "parent": os.getppid(), "opgen": __file__}))
raise SystemExit(4)
"""


def test_python_m_opgen_forked_runs_the_opgen_a_fresh_python_would_find(tmp_path):
    """`-m opgen`: the opgen that runs is the one the run's cwd and PYTHONPATH lead to (here a stand-in in the cwd,
    which `-m` puts first: the child drops the server's opgen), as `__main__`, with argv, stdin and exit code as a
    fresh interpreter gives them."""
    (tmp_path / "opgen").mkdir()
    (tmp_path / "opgen" / "__init__.py").write_text("")
    (tmp_path / "opgen" / "__main__.py").write_text(MODULE_REPORT)
    env = {**os.environ, "PYTHONPATH": f"{tmp_path / 'lib'}"}
    args = ["-m", "opgen", "new", "--dry-run"]
    real = subprocess.run([sys.executable, *args], cwd=tmp_path, env=env, input="given", capture_output=True,
                          text=True, timeout=120, check=False)
    forked = run_python(args, cwd=tmp_path, env=env, input="given", timeout=120)
    reports = []
    for done in (real, forked):
        assert done.returncode == 4, done.stderr
        reports.append(json.loads(done.stdout))
    real_report, forked_report = reports
    assert real_report.pop("parent") == os.getpid() != forked_report.pop("parent")
    assert forked_report == real_report
    assert forked_report["stdin"] == "given" and forked_report["argv"][1:] == ["new", "--dry-run"]


def test_a_child_keeps_the_servers_opgen_only_for_opgens_command_line_finding_that_same_opgen(tmp_path, monkeypatch):
    """The decision each child makes on the modules of OPGEN_PRELOAD (this process imported the same opgen): kept for
    `-m opgen` and `-m opgen.check.worker` on a path without another opgen; dropped where the path finds a stand-in
    first, and for pytest and `-c` runs."""
    keeps = forked_python._keeps_preloaded_opgen
    plain, standing_in = tmp_path / "plain", tmp_path / "standing_in"
    plain.mkdir()
    (standing_in / "opgen").mkdir(parents=True)
    (standing_in / "opgen" / "__init__.py").write_text("")
    monkeypatch.setattr(sys, "path", [str(plain), *sys.path[1:]])
    assert keeps(["-m", "opgen", "new"]) and keeps(["-m", "opgen.check.worker", "job.json"])
    assert not keeps(["-m", "pytest", "-q"]) and not keeps(["-c", "import opgen"])
    monkeypatch.setattr(sys, "path", [str(standing_in), *sys.path[1:]])
    assert not keeps(["-m", "opgen", "new"]) and not keeps(["-m", "opgen.check.worker", "job.json"])


@pytest.mark.parametrize("args", [["explain", "--json", "-"], ["explain", "--code", "OPG999"], ["new", "--bogus"]])
def test_the_real_opgen_forked_prints_and_exits_as_in_a_fresh_python(tmp_path, args):
    """The command line itself: stdin read, an unknown code, a usage error, each as a fresh `python -m opgen`."""
    given = "f(Tensor x) -> Tensor\ng(Tensor(a!) x) -> Tensor(a!)\n"
    real = subprocess.run([sys.executable, "-m", "opgen", *args], cwd=tmp_path, input=given, capture_output=True,
                          text=True, timeout=120, check=False)
    forked = run_python(["-m", "opgen", *args], cwd=tmp_path, input=given, timeout=120)
    assert (forked.returncode, forked.stdout, forked.stderr) == (real.returncode, real.stdout, real.stderr)
    assert real.returncode in (1, 2) and real.stdout + real.stderr


def test_a_run_changing_a_start_time_variable_gets_a_real_subprocess(tmp_path):
    assert forkable({**os.environ, "PYTHONPATH": "x", "OPGEN_Y": "1"}, dict(os.environ))
    assert not forkable({**os.environ, "TORCHINDUCTOR_COMPILE_THREADS": "1"}, dict(os.environ))  # read at import
    assert not forkable({key: value for key, value in os.environ.items() if key != "HOME"}, {**os.environ, "HOME": "/"})
    assert not forkable({**os.environ, forked_python.FRESH: "1"}, dict(os.environ))
    (tmp_path / "hidden" / "torch").mkdir(parents=True)  # a stand-in for a module the server has imported
    assert not forkable({**os.environ, "PYTHONPATH": str(tmp_path / "hidden")}, dict(os.environ))
    assert not forkable(dict(os.environ), dict(os.environ), cwd=str(tmp_path / "hidden"))
    assert forkable(dict(os.environ), dict(os.environ), cwd=str(tmp_path))
    report = _report(tmp_path, _forked, "inductor", TORCHINDUCTOR_COMPILE_THREADS="1")
    assert report["parent"] == os.getpid()


def test_the_server_runs_no_thread_but_openblas_pool_when_it_forks():
    server = forked_python._get_server()
    assert server is not None
    assert server.threads["python"] == 1
    plain = subprocess.run([sys.executable, "-c", "import numpy, os; print(len(os.listdir('/proc/self/task')))"],
                           capture_output=True, text=True, check=True)
    assert server.threads["os"] == int(plain.stdout)  # the pool numpy's import starts, nothing of torch's


HANGS = '''
import os, subprocess, sys, time

def test_hangs():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    with open(os.environ["PID_TO"], "w") as out:
        out.write(str(child.pid))
    time.sleep(600)
'''


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_hung_run_is_killed_at_its_timeout_with_its_subprocesses_and_the_server_goes_on(tmp_path):
    (tmp_path / "test_hangs.py").write_text(HANGS)
    pid_file = tmp_path / "pid"
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        run_pytest(["-q", "-p", "no:cacheprovider", "test_hangs.py"], cwd=tmp_path,
                   env={**os.environ, "PID_TO": str(pid_file)}, timeout=4)
    assert time.monotonic() - started < 60
    grandchild = int(pid_file.read_text())
    for _ in range(50):
        if not _alive(grandchild):
            break
        time.sleep(0.1)
    assert not _alive(grandchild)
    _assert_server_still_runs(tmp_path)


CRASHES = '''
import os, signal

def test_exits():
    os._exit(7)

def test_crashes():
    os.kill(os.getpid(), signal.SIGSEGV)
'''


@pytest.mark.parametrize(("test", "code"), [("test_exits", 7), ("test_crashes", -11)])
def test_a_crashed_run_reports_its_exit_code_and_the_server_goes_on(tmp_path, test, code):
    (tmp_path / "test_crash.py").write_text(CRASHES)
    done = run_pytest(["-q", "-p", "no:cacheprovider", "-p", "no:faulthandler", f"test_crash.py::{test}"],
                      cwd=tmp_path, timeout=120)
    real = _real(["-q", "-p", "no:cacheprovider", "-p", "no:faulthandler", f"test_crash.py::{test}"], tmp_path,
                 dict(os.environ))
    assert done.returncode == real.returncode == code
    _assert_server_still_runs(tmp_path)


def _assert_server_still_runs(tmp_path):
    server = forked_python._server
    (tmp_path / "test_fine.py").write_text("def test_fine():\n    pass\n")
    done = run_pytest(["-q", "-p", "no:cacheprovider", "test_fine.py"], cwd=tmp_path, timeout=120)
    assert done.returncode == 0 and "1 passed" in done.stdout
    assert forked_python._server is server


@pytest.fixture
def own_servers():
    """The servers a test kills or closes are its own, which import pytest alone (a second or less to start, not the
    four CPU-s of torch's imports): the session's server is put back, alive, for the tests after it. (A patch of its
    own: a test's `monkeypatch.undo()` must not bring the session's server back halfway through.)"""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(forked_python, "PRELOAD", ("pytest",))
        patch.setattr(forked_python, "OPGEN_PRELOAD", ())
        patch.setattr(forked_python, "_server", None)
        yield
        forked_python.close_server()  # the test's own; the context then puts the session's back


def test_a_dead_server_is_replaced(tmp_path, own_servers):
    server = forked_python._get_server()
    server.process.kill()
    server.process.wait()
    (tmp_path / "test_fine.py").write_text("def test_fine():\n    pass\n")
    done = run_pytest(["-q", "-p", "no:cacheprovider", "test_fine.py"], cwd=tmp_path, timeout=120)
    assert done.returncode == 0 and "1 passed" in done.stdout  # the run that found it dead: a real subprocess
    assert forked_python._get_server() is not server
    done = run_pytest(["-q", "-p", "no:cacheprovider", "test_fine.py"], cwd=tmp_path, timeout=120)
    assert done.returncode == 0 and "1 passed" in done.stdout


def test_a_server_first_needed_by_a_test_that_changed_the_environment_starts_with_the_sessions(tmp_path, monkeypatch,
                                                                                              own_servers):
    """In CI the server was first started inside a test that had changed HOME: it kept that environment, so every later
    run, in the session's own environment, differed from it and fell back to a subprocess. It now starts with the
    session's environment."""
    forked_python.close_server()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "test_fine.py").write_text("def test_fine():\n    pass\n")
    done = run_pytest(["-q", "-p", "no:cacheprovider", "test_fine.py"], cwd=tmp_path, timeout=120)
    assert done.returncode == 0 and "1 passed" in done.stdout  # another HOME than the server's: a real subprocess
    monkeypatch.undo()
    assert forked_python._get_server().env == forked_python.SESSION_ENV
    assert _report(tmp_path, _forked, "after")["parent"] != os.getpid()


def test_the_inductor_cache_directory_inductor_sets_mid_session_still_forks(tmp_path, monkeypatch):
    """Inductor's first compile in a worker sets TORCHINDUCTOR_CACHE_DIR in its environment (cache_dir()), and in CI
    (no such variable at the start) every later run then differed from the server and went to a subprocess. The
    variable is read on each compile, so the child applies it: the run forks and sees it."""
    forked_python._get_server()
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    report = _report(tmp_path, _forked, "cache_dir")
    assert report["parent"] != os.getpid() and report["env"]["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "inductor")


STAND_IN_CLI = """
import json, os, signal, subprocess, sys, time
mode = sys.argv[1]
worker = subprocess.Popen([sys.executable, "-m", "opgen.check.worker", mode], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True, start_new_session=True)
if mode == "hang":  # as opgen check ends a hung worker: SIGKILL to the group of the process it started
    pid = int(worker.stdout.readline())
    os.killpg(worker.pid, signal.SIGKILL)
    worker.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and os.path.exists(f"/proc/{pid}"):
        time.sleep(0.05)
    print(json.dumps({"worker_alive": os.path.exists(f"/proc/{pid}"), "eof": worker.stdout.read() == ""}))
else:
    out, _ = worker.communicate("given")
    print(json.dumps({"code": worker.returncode, "report": out}))
"""
STAND_IN_WORKER = """
import faulthandler, json, os, signal, sys, time
mode = sys.argv[1]
if mode == "hang":
    print(os.getpid(), flush=True)
    time.sleep(600)
print(json.dumps({"warm": "torch" in sys.modules, "argv": sys.argv, "cwd": os.getcwd(), "stdin": sys.stdin.read(),
                  "path": sys.path[0], "faulthandler": faulthandler.is_enabled(), "main": __name__}), flush=True)
if mode == "crash":
    os.kill(os.getpid(), signal.SIGSEGV)
raise SystemExit(3)
"""


@pytest.mark.parametrize("mode", ["exit", "crash", "hang"])
def test_an_opgen_check_worker_is_forked_warm_and_ends_as_a_fresh_one_does(tmp_path, mode):
    """In a forked `python -m opgen`, the worker `opgen check` starts with `sys.executable -m opgen.check.worker`
    comes from the server, torch imported, with the stdin, stdout, argv, cwd and exit code (a signal's too) a fresh
    worker has; killing the group of the process the command started kills the worker. Stand-ins for the command and
    its worker (found first, in the cwd) report what each saw, in a fork and in a fresh interpreter."""
    package = tmp_path / "opgen"
    (package / "check").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "check" / "__init__.py").write_text("")
    (package / "__main__.py").write_text(STAND_IN_CLI)
    (package / "check" / "worker.py").write_text(STAND_IN_WORKER)
    env = {**os.environ, "PYTHONFAULTHANDLER": "1"}
    seen = [json.loads(run_python(["-m", "opgen", mode], cwd=tmp_path, env={**env, **fresh}, timeout=120).stdout)
            for fresh in ({forked_python.FRESH: "1"}, {})]
    if mode == "hang":
        assert seen[0] == seen[1] == {"worker_alive": False, "eof": True}
        return
    reports = [json.loads(done.pop("report")) for done in seen]
    assert seen[0] == seen[1] == {"code": 3 if mode == "exit" else -11}
    assert [report.pop("warm") for report in reports] == [False, True]
    assert reports[0] == reports[1]
    assert reports[1]["stdin"] == "given" and reports[1]["faulthandler"] and reports[1]["main"] == "__main__"
