"""Each op's record checked against the spec loader before it is written (torch-free): an op whose entry the
loader refuses loses its derived rules, then its examples (each loss said), and is left out only when its schema
itself is refused. Every op's problems, TODOs and disagreements become one located line each."""

from __future__ import annotations

from ..errors import OpgenError
from ..spec.load import load_spec_text
from .spec_text import spec_text


def checked_entry(record: dict, findings: list[str]) -> dict | None:
    """The record as the spec will hold it, or None (left out); lines for the user are appended to `findings`."""
    where = f"{record['where']}: " if record.get("where") else ""
    label = f"{where}{record['name']}"
    problems = record.get("problems", [])
    fatal = [p for p in problems if p["kind"] in ("schema", "crashed", "internal")]
    for problem in problems:
        if problem not in fatal:
            findings.append(f"warning: {label}: {problem['message']}")
    if fatal:
        findings += [f"error: {label}: left out: {problem['message']}" for problem in fatal]
        return None
    record = dict(record)
    error = _load_error({**record, "outputs": [], "examples": []})
    if error is not None:
        findings.append(f"error: {label}: left out: opgen cannot express it: {error}")
        return None
    for dropped in ("outputs", "examples"):
        error = _load_error(record)
        if error is None:
            break
        findings.append(f"warning: {label}: the derived {dropped} do not load ({error}): left as TODO")
        record[dropped] = [{"name": o["name"], "todo": {"shape": "not derived", "dtype": "not derived"}}
                           for o in record.get("outputs", [])] if dropped == "outputs" else []
    for out in record.get("outputs", []):
        for key, reason in sorted(out.get("todo", {}).items()):
            findings.append(f"note: {label}: TODO outputs.{out['name']}.{key}: {reason}")
    for found in record.get("disagreements", []):
        findings.append(f"warning: {label}: on {found['variant']}: {found['message']} (likelier: {found['likelier']})")
    return record


def _load_error(record: dict) -> str | None:
    try:
        load_spec_text(spec_text(record["namespace"], "library", "cpu", [record], "-"), "<imported>")
    except OpgenError as error:
        return error.message
    return None
