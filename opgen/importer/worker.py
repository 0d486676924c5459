"""The torch side of `opgen import`, run by opgen.importer.command as `python -m opgen.importer.worker JOB.json`.

It writes one JSON object per line to its original standard output (the package's prints go to standard error):
  {"event": "started"}                      torch imported: the parent's --timeout clock starts
  {"event": "usage", "message", "hint"}     the package does not import, or registers no op: nothing to write
  {"event": "start", "index", "name"}       so the parent knows which op a crash or hang hit
  {"event": "op", "index", "record"}        what opgen.importer.spec_text needs for one op
  {"event": "done"}
"""

from __future__ import annotations

import json
import os
import sys
import traceback

from ..check.worker import Usage, _error_info, _full_name, _import, _overload, _where
from ..errors import OpgenError

PROTOCOL = None  # the original stdout, set in main()


def emit(**event) -> None:
    PROTOCOL.write(json.dumps(event, default=str) + "\n")
    PROTOCOL.flush()


def resolve(job: dict) -> tuple[list, str]:
    """(the ops the target registers, the file or directory its lint readers read)."""
    from ..check.ownership import own_ops, recording_definitions
    from ..check.worker import _all_op_names

    if job["path"]:
        sys.path.insert(0, job["path"])
    before = _all_op_names()
    with recording_definitions() as defined:
        module, error = _import(job["module"], job["text"])
    if error is not None:
        where = f" ({error['where']})" if error.get("where") else ""
        raise Usage(f"{job['text']}: importing {job['module']!r} raised {error['type']}: {error['message']}{where}",
                    "fix the import (run `python -c 'import " + job["module"] + "'` to see it), or stub what it "
                    "needs (a device library) on PYTHONPATH")
    names, _elsewhere = own_ops(module, sorted(_all_op_names() - before), defined)
    # the spec lists the ops in the order the package defines them (ops defined from C++ last, by name)
    order = {name: index for index, name in enumerate(defined)}
    names.sort(key=lambda name: order.get(name, order.get(name.split(".")[0], len(order))))
    if not names:
        raise Usage(f"{job['text']}: importing {job['module']!r} registered no operator of its own",
                    "give the module that defines the ops (torch.library.Library / custom_op / TORCH_LIBRARY)")
    overloads = [overload for overload in map(_overload, names) if overload is not None]
    path = getattr(module, "__file__", "") or ""
    root = os.path.dirname(path) if os.path.basename(path) == "__init__.py" else path
    return overloads, root


def main(job_path: str) -> None:
    global PROTOCOL
    PROTOCOL = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # the package's own prints must not corrupt the protocol
    with open(job_path, encoding="utf-8") as handle:
        job = json.load(handle)
    try:
        import torch  # noqa: F401
    except ImportError as error:
        emit(event="usage", message=f"opgen import needs torch, which cannot be imported ({error})",
             hint="pip install torch")
        return
    emit(event="started")  # the parent's --timeout clock starts here
    try:
        overloads, root = resolve(job)
        given = _given_examples(overloads, job.get("inputs"))
    except Usage as usage:
        emit(event="usage", message=usage.message, hint=usage.hint)
        return
    from .describe import describe
    from .sources import lookup, read_sources

    sources = read_sources(root) if root else {}
    for index, overload in enumerate(overloads):
        if index < job.get("resume", 0):
            continue
        name = _full_name(overload)
        emit(event="start", index=index, name=name)
        try:
            record = describe(overload, given.get(name), lookup(sources, name))
        except Exception as error:  # noqa: BLE001  (an op opgen cannot read is reported; the others go on)
            record = {"name": name, "problems": [{"kind": "internal", "message": _internal(error)}]}
        emit(event="op", index=index, record=record)
    emit(event="done")


def _internal(error: BaseException) -> str:
    info = _error_info(error)
    first = (info["message"].strip().splitlines() or [""])[0][:300]
    frame = traceback.extract_tb(error.__traceback__)[-1:]
    where = _where(error) or (f"{frame[0].filename}:{frame[0].lineno}" if frame else "")
    return f"{info['type']}: {first}" + (f" ({where})" if where else "")


def _given_examples(overloads: list, inputs_path: str | None) -> dict:
    """{op name: examples} from the --inputs file (opgen check's format)."""
    if not inputs_path:
        return {}
    from ..schema import parse_schema
    from ..spec.examples import load_inputs_text

    schemas = {}
    for overload in overloads:
        try:
            schemas[_full_name(overload)] = parse_schema(str(overload._schema))
        except OpgenError:
            continue
    with open(inputs_path, encoding="utf-8") as handle:
        text = handle.read()
    try:
        return load_inputs_text(text, inputs_path, schemas, [])
    except OpgenError as error:
        raise Usage(error.render().removeprefix("error: "), "") from None


if __name__ == "__main__":
    main(sys.argv[1])
