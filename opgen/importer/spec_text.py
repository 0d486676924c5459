"""The spec `opgen import` writes for one namespace, as YAML text (torch-free): per op the registry's schema, the
derived `outputs:` (a TODO comment with the reason where a rule could not be derived), the examples and a
`reference:` TODO. Records come from opgen.importer.worker (plain JSON data)."""

from __future__ import annotations

import json
import re

REFERENCE_TODO = ("# TODO reference: write the op's math in plain torch (docs/spec.md). The package's own CPU kernel "
                  "is not an\n    # independent oracle: tests comparing the kernel with it would compare it with "
                  "itself.")
_BARE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_RESERVED = {"true", "false", "null", "yes", "no", "on", "off", "none", "y", "n"}


def spec_text(namespace: str, style: str, device: str, records: list[dict], source: str, adopt: str = "") -> str:
    lines = [f"# opgen spec imported by `opgen import {source}`: the schemas are torch's own (from its registry after",
             "# importing the package); `outputs:` were derived from the package's fake functions under symbolic",
             "# sizes. Read each TODO, then `opgen new` this file (docs/import.md).",
             f"namespace: {namespace}"]
    if adopt:
        lines += ["# the package registers the ops: `opgen new` writes the tests only (remove to generate a package)",
                  f"adopt: {adopt}"]
    lines += [f"style: {style}", f"device: {device}", "ops:"]
    for record in records:
        lines += op_lines(record)
    return "\n".join(lines) + "\n"


def op_lines(record: dict) -> list[str]:
    lines = [f"  - schema: {json.dumps(record['schema'])}"]
    if record.get("where"):
        lines.insert(0, f"  # {record['name']}: {record['where']}")
    if record.get("tags"):
        lines.append(f"    tags: [{', '.join(record['tags'])}]")
    outputs = record.get("outputs") or []
    if outputs:
        lines.append("    outputs:")
        for out in outputs:
            lines += _output_lines(out)
    lines.append("    " + REFERENCE_TODO)
    examples = record.get("examples") or []
    if examples:
        origin = {"inputs": "from the --inputs file", "derived": "made up by opgen; the fake accepts it"}
        lines.append(f"    examples:  # {origin.get(record.get('examples_from'), '')}".rstrip(" #"))
        lines += [f"      - {flow(example)}" for example in examples]
    else:
        lines.append("    # TODO examples: no inputs the fake accepts were found; give them with --inputs FILE")
    return lines


def _output_lines(out: dict) -> list[str]:
    rules = {key: out[key] for key in ("shape", "dtype") if out.get(key)}
    lines = [f"      # TODO {out['name']}.{key}: {out['todo'][key]}" for key in ("shape", "dtype")
             if not out.get(key) and out.get("todo", {}).get(key)]
    if rules:
        lines.append(f"      {out['name']}: {{" + ", ".join(f"{k}: {json.dumps(v)}" for k, v in rules.items()) + "}")
    return lines


def flow(value) -> str:
    """`value` (JSON data) as one line of YAML flow style, keys and plain words unquoted."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_word(str(k))}: {flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(flow(v) for v in value) + "]"
    if isinstance(value, str):
        return _word(value)
    if isinstance(value, float):
        return repr(value) if "e" not in repr(value) or "." in repr(value) else repr(value).replace("e", ".0e")
    return json.dumps(value)


def _word(text: str) -> str:
    return text if _BARE.match(text) and text.lower() not in _RESERVED else json.dumps(text)
