"""`opgen check` output: the four-part text (layer -> evidence -> likely root causes -> next minimal
action) after each rung's status and wall time, or one JSON object per op."""

from __future__ import annotations

import json

from ..colour import paint
from . import RUNGS

NAME_WIDTH = max(map(len, RUNGS))  # the rung column

STATUS_STYLE = {"pass": {"fg": "green"}, "fail": {"fg": "red", "bold": True}, "skip": {"fg": "yellow"}}


def render_json(reports: list[dict]) -> str:
    """One object per op (JSON Lines): op, rungs, verdict (null when every rung passed), versions."""
    lines = []
    for report in reports:
        verdict = report["verdict"]
        if verdict is not None:
            verdict = {key: verdict[key] for key in ("layer", "signature", "rule", "evidence", "causes",
                                                     "next_action")}
        lines.append(json.dumps({"op": report["op"], "rungs": report["rungs"], "verdict": verdict,
                                 "versions": report["versions"]}))
    return "\n".join(lines)


def render_text(reports: list[dict], versions: dict, color: bool = True) -> str:
    blocks = [paint("versions: ", color, bold=True) + ", ".join(f"{k} {v or 'not installed'}"
                                                                for k, v in versions.items())]
    for report in reports:
        blocks.append(_op_text(report, color))
    passed = sum(1 for r in reports if r["verdict"] is None)
    summary = f"{passed} of {len(reports)} op(s) pass every runnable rung"
    unrun = sum(1 for r in reports if any(rung["reason"].startswith("no inputs:") for rung in r["rungs"]))
    if unrun:
        summary += f" ({unrun} not run: no inputs, see their eager rung)"
    blocks.append(paint(summary, color, fg="green" if passed == len(reports) else "red", bold=True))
    return "\n\n".join(blocks)


def _op_text(report: dict, color: bool) -> str:
    verdict = report["verdict"]
    head = paint(report["op"], color, bold=True) + "  " + (
        paint("PASS", color, fg="green", bold=True) if verdict is None
        else paint(f"FAIL at {verdict['rung']}", color, fg="red", bold=True))
    lines = [head]
    for rung in report["rungs"]:
        status = paint(f"{rung['status']:<4}", color, **STATUS_STYLE[rung["status"]])
        reason = rung["reason"].splitlines()[0] if rung["reason"] else ""
        lines.append(f"  {rung['name']:<{NAME_WIDTH}} {status} {rung['seconds']:7.2f}s  {reason}")
    if verdict is None:
        return "\n".join(lines)
    label = lambda text: paint(text, color, fg="cyan", bold=True)
    signature = verdict["signature"] or "unclassified"
    title = f" ({verdict['title']})" if verdict.get("title") else ""
    lines.append(f"  {label('layer:')} {paint(verdict['layer'], color, fg='red', bold=True)} "
                 f"- {signature}{title}")
    lines.append(f"  {label('evidence:')}")
    lines.extend(f"    {line}" for line in verdict["evidence"].splitlines())
    lines.append(f"  {label('likely root causes:')}")
    lines.extend(f"    {i}. {cause}" for i, cause in enumerate(verdict["causes"], 1))
    lines.append(f"  {label('next minimal action:')} {verdict['next_action']}")
    if verdict["rule"]:
        lines.append(f"  {label('rule:')} {verdict['rule']} (opgen lint --explain {verdict['rule']})")
    if verdict["signature"]:
        lines.append(f"  {label('more:')} opgen check --explain {verdict['signature']}")
    return "\n".join(lines)
