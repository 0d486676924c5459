"""`opgen import PATH_OR_MODULE`: one spec per namespace from the ops a package registers. Torch-free: torch runs
only in the worker (opgen.importer.worker), restarted past an op whose code crashes or hangs it."""

from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import click

from ..colour import paint
from ..console import handle_errors
from ..errors import EXIT_FINDINGS, EXIT_OK, OpgenError

MODULE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


@click.command("import")
@click.argument("target", metavar="PATH_OR_MODULE")
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False), default=".", show_default=True,
              help="Directory for the specs (one <namespace>.yaml per namespace).")
@click.option("--inputs", type=click.Path(dir_okay=False), metavar="FILE",
              help="Examples in `opgen check --inputs` format (a list, or {op name: list}); else opgen makes up "
              "inputs the package's fake accepts.")
@click.option("--force", is_flag=True, help="Overwrite spec files that exist.")
@click.option("--timeout", type=click.FloatRange(min=1, max=7 * 24 * 3600), default=180, show_default=True,
              metavar="SECONDS", help="Longest one op may take; a hang is reported for that op.")
@handle_errors
def import_(target: str, out_dir: str, inputs: str | None, force: bool, timeout: float) -> None:
    """Write a spec that `opgen new` accepts for the ops a package already registers.

    PATH_OR_MODULE is a module name (importable from here), a .py file, a package directory, or a project
    directory holding one package. Per namespace it writes DIR/<namespace>.yaml: torch's own schema of each op,
    the style and device detected, `outputs:` derived by running the package's fake (Meta) function under
    symbolic sizes (a TODO with the reason where they cannot be), examples the fake accepts, and a `reference:`
    TODO (the package's CPU kernel is not an independent oracle). Where the derived rules, the fake and the CPU
    kernel disagree on the tests' input variants, it says so and which is likelier wrong.

    \b
    Exit codes: 0 every op described; 1 specs written, with ops left out, TODOs or disagreements reported;
    2 bad usage or input (a package that does not import, no op found, a spec file that exists): nothing written.
    """
    if inputs is not None:
        from ..files import read_input

        read_input(inputs, "--inputs file")
    job = {**_resolve_target(target), "text": target, "inputs": inputs and os.path.abspath(inputs)}
    records = run(job, timeout)
    specs, findings = build_specs(records, target, job["module"] if "." not in job["module"] else "")
    paths = {namespace: Path(out_dir) / f"{namespace}.yaml" for namespace in specs}
    existing = [str(path) for path in paths.values() if path.exists()]
    if existing and not force:
        raise OpgenError(f"{', '.join(existing)} exists", hint="pass --force to overwrite, or -o another directory")
    for line in findings:
        click.echo(line, err=True)
    write_all({paths[namespace]: text for namespace, text in specs.items()})
    for namespace, path in paths.items():
        count = sum(1 for r in records if r.get("namespace") == namespace and r["name"] not in _left_out(findings))
        click.echo(f"{paint('wrote', fg='green')} {path} ({count} op{'s' * (count != 1)}); next: opgen new {path} "
                   f"-o <project>")
    sys.exit(EXIT_FINDINGS if findings else EXIT_OK)


def _left_out(findings: list[str]) -> set[str]:
    return {line.split(": ", 1)[0].split()[-1] for line in findings if "left out" in line}


def _resolve_target(target: str) -> dict:
    """{"module", "path"}: what the worker imports, and the directory it puts first on sys.path (None: the current)."""
    path = Path(target)
    if path.is_file():
        if path.suffix != ".py":
            raise OpgenError(f"{target} is not a Python file", hint="give a .py file, a package directory or a module")
        return {"module": path.stem, "path": str(path.resolve().parent)}
    if path.is_dir():
        if (path / "__init__.py").is_file():
            return {"module": path.resolve().name, "path": str(path.resolve().parent)}
        packages = sorted(p.name for p in path.iterdir() if (p / "__init__.py").is_file() and p.name != "tests")
        if len(packages) == 1:
            return {"module": packages[0], "path": str(path.resolve())}
        raise OpgenError(f"{target} is a directory holding {len(packages) or 'no'} package"
                         f"{'s' * (len(packages) != 1)}{': ' + ', '.join(packages) if packages else ''}",
                         hint="give the package directory itself (the one with __init__.py), or its module name")
    if not MODULE.match(target):
        raise OpgenError(f"{target} is neither a file, a directory nor a module name", source=target, column=1,
                         hint="give a package directory, a .py file, or a dotted module name importable from here")
    return {"module": target, "path": None}


# --- the worker ---------------------------------------------------------------------------------------------------


def run(job: dict, timeout: float) -> list[dict]:
    """Each op's record; an op whose code crashed or hung the worker gets a record saying so, and the worker is
    started again after it."""
    records: dict[int, dict] = {}
    resume = 0
    while True:
        state = _run_worker({**job, "resume": resume}, timeout, records)
        if state["done"]:
            return [records[i] for i in sorted(records)]
        index, name = state["current"]
        if index is None:
            raise OpgenError(f"{job['text']}: the import worker {state['failure']} while importing the package",
                             hint="run `python -c 'import MODULE'` to see it")
        records[index] = {"name": name, "namespace": name.split("::")[0],
                          "problems": [{"kind": "crashed", "message": f"the worker {state['failure']} on this op"}]}
        resume = index + 1


def _run_worker(job: dict, timeout: float, records: dict) -> dict:
    from ..check.command import _kill, _worker_env
    from ..render.staging import scratch_dir

    with scratch_dir("import") as tmp:
        job_path = Path(tmp) / "job.json"
        job_path.write_text(json.dumps(job), encoding="utf-8")
        process = subprocess.Popen([sys.executable, "-m", "opgen.importer.worker", str(job_path)],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_worker_env(),
                                   start_new_session=True)
        try:
            return _follow(process, timeout, records)
        finally:
            if process.poll() is None:
                _kill(process)


def _follow(process: subprocess.Popen, timeout: float, records: dict) -> dict:
    from ..check.command import WORKER_START_LIMIT

    lines: queue.Queue = queue.Queue()
    stderr: list[str] = []
    threading.Thread(target=lambda: [lines.put(line) for line in process.stdout] + [lines.put(None)],
                     daemon=True).start()
    threading.Thread(target=lambda: stderr.extend(process.stderr), daemon=True).start()
    current: tuple = (None, "")
    limit = max(timeout, WORKER_START_LIMIT)  # until the worker has started Python and torch
    while True:
        try:
            line = lines.get(timeout=limit)
        except queue.Empty:
            return {"done": False, "current": current, "failure": f"hung (no answer in {limit:g} s)"}
        if line is None:
            process.wait()
            said = "".join(stderr).strip().splitlines()
            tail = [line for line in said if line.startswith("Fatal Python error")][:1] or said[-1:] or [""]
            return {"done": False, "current": current,
                    "failure": f"died (exit code {process.returncode}{': ' + tail[0] if tail[0] else ''})"}
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if event["event"] == "started":
            limit = timeout
        elif event["event"] == "usage":
            raise OpgenError(event["message"], hint=event.get("hint") or None)
        if event["event"] == "start":
            current = (event["index"], event["name"])
        elif event["event"] == "op":
            records[event["index"]] = event["record"]
        elif event["event"] == "done":
            return {"done": True}


# --- specs --------------------------------------------------------------------------------------------------------


def build_specs(records: list[dict], source: str, adopt: str = "") -> tuple[dict[str, str], list[str]]:
    """({namespace: spec text}, the lines to report: per op its problems, TODOs and disagreements)."""
    from .validate import checked_entry

    by_namespace: dict[str, list[dict]] = {}
    findings: list[str] = []
    for record in records:
        kept = checked_entry(record, findings)
        if kept is not None:
            by_namespace.setdefault(record["namespace"], []).append(kept)
    specs = {}
    from .spec_text import spec_text

    for namespace, kept in by_namespace.items():
        style = Counter(r.get("style") or "library" for r in kept).most_common(1)[0][0]
        devices = {d for r in kept for d in r.get("devices", ())}
        device = next((d for d in ("npu", "cuda", "cpu") if d in devices), "cpu")
        specs[namespace] = spec_text(namespace, style, device, kept, source, adopt)
    return specs, findings


def write_all(texts: dict[Path, str]) -> None:
    """Every file or none: each staged beside its target, then all renamed into place."""
    from ..render.staging import staged_name

    staged = []
    try:
        for path, text in texts.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            temp = staged_name(path)
            with open(temp, "w", encoding="utf-8") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())
            staged.append((temp, path))
    except OSError as error:
        for temp, _ in staged:
            temp.unlink(missing_ok=True)
        raise OpgenError(f"cannot write {error.filename}: {error.strerror}", hint="choose another -o directory") \
            from None
    for temp, path in staged:
        os.replace(temp, path)
