"""What every command shares: bad input and broken installations end in a clear message and an exit
code, never a traceback."""

from __future__ import annotations

import functools
import os
import signal
import sys
import threading

import click

from .colour import paint
from .errors import EXIT_USAGE, EnvironmentFault, OpgenError, os_error

EXIT_TERMINATED = 128 + signal.SIGTERM  # what a shell reports for a process SIGTERM ended


class Terminated(BaseException):
    """SIGTERM arrived: unwind (temporary folders and staged files are removed on the way out), then exit."""


def handle_errors(fn):
    """Run a command body: OpgenError -> its message and its exit code (2, or 3 for an environment fault); an
    OSError nobody located -> the file and the reason; input nested past Python's recursion limit -> exit 2; a
    missing dependency -> an installation problem naming the package; SIGTERM -> a clean unwind; any other
    exception -> a short "bug in opgen" message (exit 2)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        _closed_output_discarded()
        try:
            with _terminate_as_exception():
                _current_directory_exists()
                return fn(*args, **kwargs)
        except OpgenError as error:
            _fail(error)
        except (click.exceptions.Exit, click.ClickException, click.Abort, SystemExit):
            raise
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(EXIT_USAGE)
        except Terminated:
            click.echo("terminated", err=True)
            sys.exit(EXIT_TERMINATED)
        except OSError as error:
            _debug_raise()
            _fail(os_error(error, "use"))
        except RecursionError:
            _debug_raise()
            _fail(OpgenError("the input is nested too deeply for opgen to read",
                             hint="OPGEN_DEBUG=1 shows where; nest less (a real spec, schema or file needs a few levels)"))
        except MemoryError:
            _debug_raise()
            _fail(EnvironmentFault("opgen ran out of memory", hint="the input may be far larger than the limits "
                                   "documented in docs/; otherwise free memory and re-run"))
        except RuntimeError as error:
            if "can't start new thread" not in str(error):
                _internal_error(error)
            _debug_raise()
            _fail(EnvironmentFault("opgen cannot start a thread: the process is at a limit of the machine",
                                   hint="raise the memory limit (`ulimit -v`) or the process limit (`ulimit -u`) "
                                   "and re-run"))
        except ImportError as error:
            missing = missing_dependency(error)
            if missing is None:
                _internal_error(error)
            if os.environ.get("OPGEN_DEBUG"):
                raise
            click.echo(OpgenError(
                f"opgen is not installed correctly: it needs the package {missing!r}, which cannot be imported "
                f"({error})", hint=f"reinstall opgen with its dependencies (pip install opgen), or pip install "
                f"{missing}").render(color=True), err=True)
            sys.exit(EXIT_USAGE)
        except Exception as error:  # noqa: BLE001  (any other exception is an opgen bug: reported, not raised)
            _internal_error(error)

    return wrapper


def _closed_output_discarded() -> None:
    """A command started with its standard output or error closed (`opgen new ... >&-`) does its work and its
    output goes nowhere, as `>/dev/null` would have it (Python leaves sys.stdout None there)."""
    for name in ("stdout", "stderr"):
        if getattr(sys, name) is None:
            setattr(sys, name, open(os.devnull, "w", encoding="utf-8"))  # noqa: SIM115  (for the process's life)


def _current_directory_exists() -> None:
    """A command run in a directory deleted since the shell entered it fails on its first relative path, far from
    the cause: say it first, naming the directory (the shell's $PWD)."""
    try:
        os.getcwd()
    except FileNotFoundError:
        where = os.environ.get("PWD") or "the current directory"
        raise OpgenError(f"cannot use the current directory {where}: it was deleted (or moved) while this shell was "
                         "in it", hint="cd to an existing directory and re-run") from None


def _debug_raise() -> None:
    if os.environ.get("OPGEN_DEBUG"):
        raise  # noqa: PLE0704  (called from an except block: the exception being handled)


def _fail(error: OpgenError) -> None:
    click.echo(error.render(color=True), err=True)
    sys.exit(error.exit_code)


class _terminate_as_exception:
    """While a command runs in the main thread, SIGTERM raises Terminated (Python's default would end the process
    at once, leaving temporary folders and staged files behind)."""

    def __enter__(self):
        self.previous = None
        if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            global _HANDLER_PID
            _HANDLER_PID = os.getpid()
            self.previous = signal.signal(signal.SIGTERM, _raise_terminated)
        return self

    def __exit__(self, *exc) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGTERM, self.previous)


_HANDLER_PID = None


def _raise_terminated(signum, frame) -> None:
    if os.getpid() != _HANDLER_PID:  # a forked worker (lint's pool ends its workers with SIGTERM): end quietly
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
        return
    raise Terminated


def _internal_error(error: Exception) -> None:
    """An opgen bug: say so briefly (exit 2); the traceback only with OPGEN_DEBUG."""
    if os.environ.get("OPGEN_DEBUG"):
        raise error
    click.echo(f"{paint('internal error', fg='red', bold=True)}: {type(error).__name__}: {error}\n"
               "  = hint: this is a bug in opgen; rerun with OPGEN_DEBUG=1 for the traceback", err=True)
    sys.exit(EXIT_USAGE)


def missing_dependency(error: ImportError) -> str | None:
    """The distribution opgen declares as a dependency whose import failed, or None (then it is no
    installation problem but a bug)."""
    from importlib import metadata

    module = (error.name or "").split(".")[0]
    if not module or module == "opgen":
        return None
    try:
        requirements = metadata.requires("opgen") or []
    except metadata.PackageNotFoundError:  # running from a checkout that is not installed
        requirements = []
    declared = {_distribution(req) for req in requirements if "extra ==" not in req}
    distributions = metadata.packages_distributions().get(module, [module])
    for name in distributions:
        if _normalise(name) in declared:
            return name
    # a module not installed at all has no distribution to map it to: compare its import name
    return module if _normalise(module) in declared else None


def _distribution(requirement: str) -> str:
    name = requirement.split(";")[0]
    for stop in "<>=!~[ (":
        name = name.split(stop)[0]
    return _normalise(name)


def _normalise(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(".", "-")
