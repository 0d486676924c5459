"""What op-plugin's compatibility test needs of a new op (test/core_tests/test_compatibility.py).

- `torch_npu_OpApi_schema_all.json` keys every op of the generated YAML as `"func: <schema>"` with the torch
  versions it exists for (`["all_version"]`, `["v2.6", "newest"]` or a list); a `func:` in the YAML
  without one fails `test_op_func_compatibility` ("is new. Please add it to the ...json").
- A public op (exposed, so in `torch_npu.__all__`, or listed in `test/allowlist_for_publicAPI.json`) is
  also keyed as `"op_api: torch_npu.<name><signature>"`, where the signature is what `inspect.signature`
  prints for an OpOverloadPacket: one text up to torch 2.7 and another from 2.8, each with the versions
  it is tested on; the forms are read from the checkout's JSON (the most common version list of each).
"""

from __future__ import annotations

import collections
import json

from ..spec.op_plugin import ALL_VERSIONS

SCHEMA_JSON = "test/core_tests/torch_npu_OpApi_schema_all.json"
ALLOWLIST = "test/allowlist_for_publicAPI.json"
# op-plugin's forms (from its JSON): inspect.signature of torch_npu.<op> before torch 2.8 and from 2.8 on
DEFAULT_FORMS = (("(*args, **kwargs)", ("v2.1", "v2.5", "v2.6", "v2.7")),
                 ("(*args: _P.args, **kwargs: _P.kwargs) -> ~_T", ("v2.8", "newest")))


def version_set(versions) -> list[str]:
    """The op-plugin versions a version spec (`all_version`, [first, last|newest], 'v2.1, v2.2') covers."""
    if versions == "all_version":
        return list(ALL_VERSIONS)
    if isinstance(versions, list):
        last = ALL_VERSIONS[-1] if versions[1] == "newest" else versions[1]
        return list(ALL_VERSIONS[ALL_VERSIONS.index(versions[0]):ALL_VERSIONS.index(last) + 1])
    return [v.strip() for v in versions.split(",")]


def json_versions(covered: list[str], newest_form: bool = True) -> list[str]:
    """`covered` in the JSON's notation: all_version, [first, "newest"] for a range to the newest, else a list."""
    if covered == list(ALL_VERSIONS):
        return ["all_version"]
    tail = list(ALL_VERSIONS[ALL_VERSIONS.index(covered[0]):]) if covered and covered[0] in ALL_VERSIONS else None
    if newest_form and covered == tail and len(covered) > 1:
        return [covered[0], "newest"]
    return covered


def _covered(json_list) -> list[str]:
    if "all_version" in json_list:
        return list(ALL_VERSIONS)
    if json_list and json_list[-1] == "newest":
        return version_set([json_list[-2], "newest"]) if json_list[-2] in ALL_VERSIONS else []
    return [v for v in json_list if v in ALL_VERSIONS]


def func_entry(entry) -> tuple[str, dict]:
    return f"func: {entry.func}", {"version": json_versions(version_set(entry.config.versions))}


def op_api_entries(entry, forms=DEFAULT_FORMS) -> list[tuple[str, dict]]:
    """The `op_api:` keys of a public op: each signature form on the versions both it and the op cover."""
    covered = version_set(entry.config.versions)
    found = []
    for signature, versions in forms:
        both = [v for v in _covered(list(versions)) if v in covered]
        if both:
            found.append((f"op_api: torch_npu.{entry.schema.name}{signature}",  # the packet, not an overload
                          {"version": json_versions(both, newest_form=versions[-1] == "newest")}))
    return found


def read_forms(text: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The signature forms of a checkout's JSON `op_api:` keys, each with its most common version list."""
    try:
        data = json.loads(text)
    except ValueError:
        return DEFAULT_FORMS
    lists: dict[str, collections.Counter] = {}
    for key, value in data.items() if isinstance(data, dict) else ():
        if not key.startswith("op_api: torch_npu.") or "(" not in key or not isinstance(value, dict):
            continue
        signature = key[key.index("("):]
        lists.setdefault(signature, collections.Counter())[tuple(value.get("version") or ())] += 1
    forms = [(signature, counter.most_common(1)[0][0]) for signature, counter in lists.items()
             if sum(counter.values()) >= 3]  # a form of a few old keys is history, not the convention
    return tuple(sorted(forms, key=lambda form: _covered(list(form[1]))[:1])) or DEFAULT_FORMS


def member_text(key: str, value: dict, indent: str = "  ") -> str:
    """One member as op-plugin's JSON writes them: the key, then `"version": [...]` on its own line."""
    inner = ",\n".join(f'{indent * 2}{json.dumps(k, ensure_ascii=False)}: {json.dumps(v, ensure_ascii=False)}'
                       for k, v in value.items())
    return f"{indent}{json.dumps(key, ensure_ascii=False)}: {{\n{inner}\n{indent}}}"


def allowlist_keys(entry, existing: list[str]) -> list[str]:
    """The allowlist's version lists that get the op: `all_version` for an op of every version, else each
    version list of the file that the op covers."""
    covered = version_set(entry.config.versions)
    if covered == list(ALL_VERSIONS) and "all_version" in existing:
        return ["all_version"]
    return [key for key in existing if key in covered]
