"""`python -m pytest ARGS`, `python -m opgen ARGS` and `python -c CODE ARGS` for opgen's tests, run as forks of a server
that has already imported torch and the opgen command line's third-party packages.

Each run of a generated project's tests in a new interpreter pays ~3-4 CPU-s before its first test: torch, Dynamo,
Inductor and pytest's imports; a `python -c` oracle (does torch import this package, register these ops, run opcheck
on them?) pays ~1.5 CPU-s of torch's import before its first line; a `python -m opgen new` ~0.15 CPU-s of click's,
cookiecutter's, jinja2's and yaml's; each `opgen check` or `opgen import` worker ~2 CPU-s of torch's, Dynamo's and
opcheck's. The suite makes well over a hundred runs of the first two, ~400 of the third and ~40 workers.
`run_pytest` and `run_python` send the run to a helper process (one per xdist worker, started on first use) that
imported those modules once; it forks a child per run, and the child sets up what a fresh interpreter with that cwd
and environment would see (os.environ, cwd, sys.path, sys.argv, `__main__`, stdio) and runs the module or the code.
The server also imports opgen's command line and its workers (OPGEN_PRELOAD); a child keeps them only where a fresh
interpreter would import that same opgen for the same purpose (`_keeps_preloaded_opgen`), else it drops them and its
run imports the opgen its PYTHONPATH and cwd lead to. A forked `python -m opgen` starts its workers through a launcher
that has the server fork them too (LAUNCHER below).
A run whose environment differs from the server's in a variable read at interpreter start or at torch's import
(PYTHON*, TORCH*, HOME, ...), whose path puts a stand-in for a preloaded module first (a test hiding torch), or that
sets FORKED_PYTHON_FRESH gets a real subprocess, and so does every run when the server cannot start. What a fresh
interpreter itself proves (what is imported at collection or by a package, a user's start-up output, another Python)
keeps calling subprocess at its call site.

Fork safety: after these imports the server runs no Python thread; its one other thread is OpenBLAS's pool (numpy's
import starts it), which OpenBLAS shuts down around fork itself (pthread_atfork). tests/test_forked_python.py checks
both, and that a child sees what a real subprocess sees.
"""

from __future__ import annotations

import atexit
import builtins
import faulthandler
import io
import json
import os
import runpy
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import types
from importlib.machinery import BuiltinImporter
from pathlib import Path

# Imported once by the server: what a run of generated tests imports before and while its tests compile. No pytest
# plugin from an entry point (xdist, opgen's): pytest rewrites their asserts on import, and warns when it cannot
PRELOAD = ("torch", "torch._dynamo", "torch._functorch.aot_autograd", "torch._inductor.compile_fx",
           "torch.testing._internal.optests", "pytest",
           # what `python -m opgen new` imports besides opgen (cookiecutter's brings rich, arrow and slugify)
           "click", "yaml", "jinja2", "cookiecutter.generate", "cookiecutter.prompt")
# opgen's command line, the modules of its subcommands (opgen.cli.LazyGroup's) and the workers of `opgen check` and
# `opgen import`: ~0.05 CPU-s of each of the suite's ~300 forked CLI runs once torch is imported. Not in PRELOAD: a
# stand-in opgen on a run's path does not send it to a subprocess (`_keeps_preloaded_opgen` drops these instead)
OPGEN_PRELOAD = ("opgen.cli", "opgen.explain", "opgen.op_plugin.add", "opgen.check.command", "opgen.importer.command",
                 "opgen.lint.command", "opgen.op_plugin.coverage", "opgen.new", "opgen.npugraph_ex.command",
                 "opgen.check.worker", "opgen.importer.worker")
# The modules `run_python` runs with `-m` (each one's __main__ runs as `python -m` runs it)
MODULES = ("pytest", "opgen")
# A run that needs what only a fresh interpreter has imported (nothing but torch when a module's import registers
# torch's own ops) sets it: it gets a real subprocess, and so does every `opgen check` worker it starts
FRESH = "FORKED_PYTHON_FRESH"
# Environment variables the server's imports or the interpreter's start read: a run that changes one gets a subprocess
START_TIME_VARIABLES = ("PYTHON", "TORCH", "PYTORCH", "CUDA", "OMP_", "MKL", "KMP_", "OPENBLAS", "LD_", "HOME",
                        "XDG_", "TMPDIR", "TEMP", "TMP", "TRITON", "LC_", "LANG")
# ...except these, which the child applies itself
# (Inductor reads its cache directories on each compile, never at import, and sets TORCHINDUCTOR_CACHE_DIR itself on
# first use: the worker's environment gains it mid-session, so comparing it would send every later run to a subprocess)
APPLIED_BY_CHILD = ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE", "PYTHONFAULTHANDLER", "TORCHINDUCTOR_CACHE_DIR",
                    "TRITON_CACHE_DIR")


def _matters_at_start(name: str) -> bool:
    return name not in APPLIED_BY_CHILD and name.startswith(START_TIME_VARIABLES)


def forkable(env: dict[str, str], server_env: dict[str, str], cwd: str | None = None) -> bool:
    """Whether a child forked from a server started with `server_env` sees what a fresh interpreter given `env` (and
    run in `cwd`) would: the variables read at start-up or at torch's import are the same, and no folder on its path
    ahead of site-packages holds a module of its own by a preloaded one's name (a test hiding torch behind a stand-in
    that refuses to import)."""
    if env.get(FRESH):
        return False
    names = {name for name in {*env, *server_env} if _matters_at_start(name)}
    folders = [cwd or "", *env.get("PYTHONPATH", "").split(os.pathsep)]
    preloaded = {name.partition(".")[0] for name in PRELOAD}
    shadowed = any(Path(folder, name).is_dir() or Path(folder, f"{name}.py").is_file()
                   for folder in folders if folder for name in preloaded)
    return not shadowed and all(env.get(name) == server_env.get(name) for name in names)


# The environment the session started with (conftest.py imports this module before any test runs): the server starts
# with it, not with the environment of the test that first needs it, which may have changed a start-time variable
# (monkeypatch.setenv("HOME", ...)); else every later run, in the session's own environment, would get a subprocess.
SESSION_ENV = dict(os.environ)


class _Server:
    """The client's handle on one server process (of this process: each xdist worker has its own)."""

    def __init__(self) -> None:
        self.env = dict(SESSION_ENV)
        self.process = subprocess.Popen([sys.executable, __file__, *PRELOAD, *OPGEN_PRELOAD], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=self.env, text=True)
        ready = self.process.stdout.readline()
        if not ready.startswith("ready "):
            self.close()
            raise OSError(f"pytest fork server did not start: {ready!r}")
        self.threads = json.loads(ready[len("ready "):])  # {"python": ..., "os": ...} once it had imported PRELOAD

    def ask(self, request: dict) -> dict:
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline()
        if not answer:
            raise OSError("pytest fork server died")
        return json.loads(answer)

    def close(self) -> None:
        try:
            self.process.stdin.close()
        except OSError:
            pass
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


_server: _Server | None = None
_server_failed = False
_lock = threading.Lock()


def close_server() -> None:
    """Stop this process's server, waiting for it: its CPU time and its children's then count in this process's
    (conftest.py calls it at the session's end; atexit is the fallback)."""
    global _server
    if _server is not None:
        _server.close()
        _server = None


atexit.register(close_server)


def _get_server() -> _Server | None:
    global _server, _server_failed
    if _server is None and not _server_failed:
        try:
            _server = _Server()
        except OSError:
            _server_failed = True
    return _server


def run_pytest(args: list[str], *, cwd: Path | str | None = None, env: dict[str, str] | None = None,
               timeout: float | None = None) -> subprocess.CompletedProcess:
    """What `subprocess.run([sys.executable, "-m", "pytest", *args], cwd=cwd, env=env, timeout=timeout,
    capture_output=True, text=True)` returns (TimeoutExpired too), from a forked child where it can."""
    return run_python(["-m", "pytest", *map(str, args)], cwd=cwd, env=env, timeout=timeout)


def run_python(args: list[str], *, cwd: Path | str | None = None, env: dict[str, str] | None = None,
               timeout: float | None = None, input: str | None = None) -> subprocess.CompletedProcess:
    """What `subprocess.run([sys.executable, *args], cwd=cwd, env=env, timeout=timeout, input=input,
    capture_output=True, text=True)` returns (TimeoutExpired too), from a forked child where it can; `args`:
    `-m pytest ...`, `-m opgen ...` or `-c CODE ...`."""
    global _server
    if args[0] not in ("-c", "-m") or (args[0] == "-m" and args[1] not in MODULES):
        raise ValueError(f"run_python runs `-c CODE` or `-m` {' or '.join(MODULES)}, not {args[:2]}")
    command = [sys.executable, *map(str, args)]
    env = dict(os.environ if env is None else env)
    cwd = str(Path(cwd if cwd is not None else os.getcwd()).resolve())
    with _lock:
        server = _get_server()
        if server is None or not forkable(env, server.env, cwd):
            return subprocess.run(command, cwd=cwd, env=env, timeout=timeout, input=input, capture_output=True,
                                  text=True, check=False)
        with tempfile.TemporaryDirectory(prefix="forked-python-") as folder:
            out, err, given = Path(folder, "stdout"), Path(folder, "stderr"), Path(folder, "stdin")
            if input is not None:
                given.write_text(input)
            request = {"args": command[1:], "cwd": cwd, "env": env, "timeout": timeout,
                       "stdin": str(given) if input is not None else os.devnull, "stdout": str(out),
                       "stderr": str(err)}
            try:
                answer = server.ask(request)
            except (OSError, ValueError):  # the server died: a new one next time, a real subprocess now
                server.close()
                _server = None
                return subprocess.run(command, cwd=cwd, env=env, timeout=timeout, input=input, capture_output=True,
                                      text=True, check=False)
            stdout = out.read_text(errors="replace") if out.exists() else ""
            stderr = err.read_text(errors="replace") if err.exists() else ""
    if answer["timed_out"]:
        raise subprocess.TimeoutExpired(command, timeout, output=stdout, stderr=stderr)
    return subprocess.CompletedProcess(command, answer["returncode"], stdout, stderr)


# --- the server (this file run as a script) ---

def _child(request: dict, stdio: list[int] | None = None) -> None:
    """In the forked child: become `python ARGS` as started in request's cwd and env, on the `stdio` descriptors a
    launcher sent (else the request's files), run, exit."""
    os.setpgid(0, 0)  # the server kills the whole group on timeout: the run's own subprocesses too
    for fd in _SERVER_FDS:
        os.close(fd)
    if stdio is None:
        stdio = [os.open(request["stdin"], os.O_RDONLY),
                 *(os.open(request[name], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600) for name in ("stdout", "stderr"))]
    for fd, given in enumerate(stdio):
        os.dup2(given, fd)
    for given in set(stdio) - {0, 1, 2}:
        os.close(given)
    # a stdin of its own, as the interpreter makes at start: the server's read ahead on its request pipe
    sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)),
                                                 encoding=sys.stdin.encoding, errors=sys.stdin.errors)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.dont_write_bytecode = bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
    if os.environ.get("PYTHONFAULTHANDLER"):
        faulthandler.enable()
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # as Python sets it at start
    if request["args"][:2] == ["-m", "opgen"]:  # its workers start through the launcher
        sys.executable = _LAUNCHER
    _set_path(request["args"], request["cwd"])
    if not _keeps_preloaded_opgen(request["args"]):
        for name in [name for name in sys.modules if name.partition(".")[0] == "opgen"]:
            del sys.modules[name]
    atexit._clear()  # the run's own exit functions run at its end, as the interpreter's do, not the server's
    code = 1
    try:
        code = _run_as_main(request["args"])
    except SystemExit as done:
        code = _exit_code(done.code)
    except BaseException:  # noqa: BLE001  (as the interpreter reports an uncaught exception: traceback, exit 1)
        traceback.print_exc()
    finally:
        threading._shutdown()  # the interpreter waits for the run's non-daemon threads before it exits
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)


def _set_path(args: list[str], cwd: str) -> None:
    """sys.path as a fresh interpreter sets it: `-m` puts the cwd first, `-c` an empty entry, then PYTHONPATH's
    entries, empty ones dropped, then the rest."""
    python_path = [entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry]
    sys.path[:] = [cwd if args[0] == "-m" else "", *python_path, *_BASE_PATH]


def _keeps_preloaded_opgen(args: list[str]) -> bool:
    """Whether a run keeps the server's opgen modules: it runs opgen's command line or one of its modules (a worker),
    and its sys.path finds the very opgen the server imported. pytest and `-c` runs never do (pytest rewrites the
    asserts of opgen's modules where opgen's metadata lists them, as in the repository, and warns about one
    imported before it; there opgen is a library that a fresh interpreter imports when the run asks for it)."""
    preloaded = sys.modules.get("opgen")
    if preloaded is None or args[0] != "-m" or args[1].partition(".")[0] != "opgen":
        return False
    for finder in sys.meta_path:  # as the import system looks for a module not imported yet
        spec = finder.find_spec("opgen", None) if hasattr(finder, "find_spec") else None
        if spec is not None:
            return spec.origin == preloaded.__spec__.origin
    return False


def _run_as_main(args: list[str]) -> int:
    """`python -m MODULE ...` or `python -c CODE ...` (sys.path already set, `_set_path`): sys.argv and `__main__`
    as a fresh interpreter sets them; the exit code."""
    if args[0] == "-m":
        sys.argv = [args[1], *args[2:]]  # runpy puts the module's file first, as `python -m` does
        runpy._run_module_as_main(args[1])
        return 0
    main = types.ModuleType("__main__")
    main.__dict__.update(__builtins__=builtins, __annotations__={}, __loader__=BuiltinImporter)
    sys.modules["__main__"] = main
    sys.argv = ["-c", *args[2:]]
    exec(compile(args[1], "<string>", "exec"), main.__dict__)  # noqa: S102  (what `python -c` does)
    return 0


def _exit_code(code: object) -> int:
    """The exit code of `raise SystemExit(code)` (a message is printed to stderr and gives 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


# --- the launcher: `opgen check` and `opgen import` start their worker with `sys.executable -m opgen.check.worker`
# (opgen.importer.worker): in a forked `python -m opgen`, sys.executable is this script, which asks the server to fork
# the worker (it has imported torch, Dynamo and opcheck's modules: ~2 CPU-s of each worker's start) on the launcher's
# stdin, stdout and stderr, waits for it and exits as it did. Anything else, or a worker whose environment differs at
# start-up, gets the real interpreter (exec). Killing the launcher kills the worker: the server watches both.
LAUNCHER = """#!{python} -IS
import json, os, signal, socket, sys
args = sys.argv[1:]
if args[:1] == ["-m"] and args[1:2] in (["opgen.check.worker"], ["opgen.importer.worker"]):
    try:
        server = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        server.connect({socket!r})
        request = {{"args": args, "cwd": os.getcwd(), "env": dict(os.environ), "pid": os.getpid()}}
        socket.send_fds(server, [json.dumps(request).encode()], [0, 1, 2])
        forked = json.loads(server.recv(4096) or "false")
    except OSError:
        forked = False
    if forked:
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):  # the worker's alone: a reader of its stdout sees the end when the worker ends
            os.dup2(null, fd)
        code = json.loads(server.recv(4096) or "1")
        if code < 0:  # killed by a signal: so is the launcher, without a core file
            import resource
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            signal.signal(-code, signal.SIG_DFL)
            os.kill(os.getpid(), -code)
        os._exit(code)
os.execv({python!r}, [{python!r}, *args])
"""


def _own_group(pid: int) -> None:
    """The child's own process group, set from this side too: a kill right after the fork reaches it."""
    try:
        os.setpgid(pid, pid)
    except (PermissionError, ProcessLookupError):  # it already has (and may have exec'd), or it already ended
        pass


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


class _Workers:
    """The workers the server forked for launchers: each one's pid, its launcher's connection and pidfd."""

    def __init__(self, listener: socket.socket, env: dict[str, str]) -> None:
        self.listener, self.env = listener, env
        self.by_worker: dict[int, tuple[int, socket.socket, int]] = {}  # worker pidfd -> (pid, connection, launcher pidfd)
        self.orphaned: set[int] = set()  # the workers killed with their launcher, whose end is still to come

    def descriptors(self) -> list[int]:
        return [self.listener.fileno(), *self.by_worker,
                *(launcher for worker, (_, _, launcher) in self.by_worker.items() if worker not in self.orphaned)]

    def handle(self, fd: int) -> None:
        if fd == self.listener.fileno():
            self._start()
            return
        for worker, (pid, connection, launcher) in list(self.by_worker.items()):
            if fd == launcher:  # the launcher was killed: so is its worker (its pidfd then says it ended)
                _kill_group(pid)
                self.orphaned.add(worker)
            elif fd == worker:
                _, status = os.waitpid(pid, 0)
                try:
                    connection.send(json.dumps(os.waitstatus_to_exitcode(status)).encode())
                except OSError:
                    pass
                for done in (worker, launcher, connection.fileno()):
                    _SERVER_FDS.remove(done)
                for done in (worker, launcher):
                    os.close(done)
                connection.close()
                del self.by_worker[worker]
                self.orphaned.discard(worker)

    def _start(self) -> None:
        connection, _ = self.listener.accept()
        message, stdio, _, _ = socket.recv_fds(connection, 1 << 20, 3)
        try:
            request = json.loads(message)
            launcher = os.pidfd_open(request["pid"])
        except (ValueError, OSError):
            request, launcher = None, None
        if launcher is None or len(stdio) != 3 or not forkable(request["env"], self.env, request["cwd"]):
            for fd in [*stdio, *([launcher] if launcher is not None else [])]:
                os.close(fd)
            connection.send(b"false")
            connection.close()
            return
        _SERVER_FDS.extend([connection.fileno(), launcher])
        pid = os.fork()
        if pid == 0:
            _child(request, stdio)
        _own_group(pid)
        for fd in stdio:
            os.close(fd)
        connection.send(b"true")
        worker = os.pidfd_open(pid)
        _SERVER_FDS.append(worker)
        self.by_worker[worker] = (pid, connection, launcher)


def _serve(preload: list[str]) -> None:
    import gc
    import importlib

    global _LAUNCHER
    for name in preload:
        try:
            importlib.import_module(name)
        except Exception:  # an opgen whose module does not import (another revision's): its runs import their own
            if name.partition(".")[0] != "opgen":
                raise
    gc.collect()
    gc.freeze()  # the children's collections leave the server's objects (and their shared pages) alone
    threads = {"python": threading.active_count(), "os": len(os.listdir("/proc/self/task"))}
    folder = tempfile.mkdtemp(prefix="forked-python-")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(os.path.join(folder, "socket"))
    listener.listen(16)
    launcher = os.path.join(folder, "python")
    Path(launcher).write_text(LAUNCHER.format(python=sys.executable, socket=listener.getsockname()))
    os.chmod(launcher, 0o700)
    if len(f"#!{sys.executable} -IS") < 127:  # else the kernel may cut its #! line: workers start as they would
        _LAUNCHER = launcher
    workers = _Workers(listener, dict(os.environ))
    _SERVER_FDS.append(listener.fileno())
    print("ready", json.dumps(threads), flush=True)
    try:
        _loop(workers)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _loop(workers: _Workers) -> None:
    """Serve the client's runs (one at a time, from stdin) and the launchers' workers (any number) until stdin ends."""
    run: tuple[int, int, float | None] | None = None  # (pid, pidfd, deadline) of the client's run
    while True:
        waiting = [*workers.descriptors(), run[1] if run else sys.stdin.fileno()]
        timeout = max(0.0, run[2] - time.monotonic()) if run and run[2] is not None else None
        ready, _, _ = select.select(waiting, [], [], timeout)
        if run and (run[1] in ready or (run[2] is not None and time.monotonic() >= run[2])):
            timed_out = run[1] not in ready
            if timed_out:
                _kill_group(run[0])
            _, status = os.waitpid(run[0], 0)
            os.close(run[1])
            _SERVER_FDS.remove(run[1])
            print(json.dumps({"returncode": os.waitstatus_to_exitcode(status), "timed_out": timed_out}), flush=True)
            run = None
            continue
        for fd in ready:
            if fd == sys.stdin.fileno():
                line = sys.stdin.readline()
                if not line:
                    return
                request = json.loads(line)
                pid = os.fork()
                if pid == 0:
                    _child(request)
                _own_group(pid)
                deadline = None if request["timeout"] is None else time.monotonic() + request["timeout"]
                run = (pid, os.pidfd_open(pid), deadline)
                _SERVER_FDS.append(run[1])
            else:
                workers.handle(fd)


_SERVER_FDS: list[int] = []  # the server's own descriptors, which its children close
_LAUNCHER = sys.executable  # the server's launcher script, once it has one

if __name__ == "__main__":
    _BASE_PATH = sys.path[1:]  # without this script's folder, which a `python -m pytest` does not have
    _serve(sys.argv[1:])  # the client's PRELOAD and OPGEN_PRELOAD (tests of the server's own life import less)
