"""`opgen add` on a real op-plugin checkout, checked as its CI and a reviewer would (issue 27).

A throw-away clone of the checkout gets the ops of a spec (default: tests/op_plugin/new_ops.yaml, an in-place op,
a multi-output op and an exposed op with an optional tensor, keyword-only arguments and a str); then:

- the repo's own code generator runs the steps of its gencode.sh (torchnpugen of the checkout, else the torch-npu
  wheel's): gen_op_plugin_functions, gen_derivatives, gen_op_backend, gen_struct_opapi; each op must be kept by the
  version filter, declared in OpApiInterface.h with its kernel's signature, and a gen_opapi op generated;
- test_compatibility.py's JSON checks, computed without torch_npu on the YAML each torch version gets: every op
  of the checkout has its `func:` key, with a signature the test finds compatible, and a public op its `op_api:`
  keys on every version the test runs (the repo's own pre-existing findings are counted, not failed);
- `git diff` adds lines only (the comma a JSON file's last member gains aside), the entries are blank-line
  separated, no value is double-quoted, clang-format with the checkout's .clang-format changes no kernel;
- a second `opgen add` changes nothing; a doc-only change re-added updates the docstring (one per op) in place;
- the str argument reaches aclnn converted (char*) in torchnpugen's generated kernel.

`--measure` also prints how many of the checkout's own entries follow the conventions opgen writes by.

    OPGEN_OP_PLUGIN_ROOT=~/op-plugin python benchmarks/check_op_plugin_snapshot.py [--spec SPEC] [--measure] [--json]

The checkout (a work tree or a bare git directory) is never changed. CI has no network to GitHub or gitcode, so
tests/test_op_plugin_snapshot.py (which runs these checks) skips there unless a checkout is provided.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from opgen.op_plugin import compat
from opgen.op_plugin.clangformat import executable
from opgen.spec.op_plugin import ALL_VERSIONS

NEW_OPS = REPO / "tests" / "op_plugin" / "new_ops.yaml"
TORCH = "2.13.0"
SKIPPED_BY_THE_TEST = ("v2.2",)  # test_compatibility.py skips these torch versions (and v1.11, v2.0)


@dataclass
class Report:
    checks: list[tuple[str, bool, str]] = field(default_factory=list)
    numbers: dict[str, object] = field(default_factory=dict)

    def check(self, name: str, ok: bool, detail: str = "") -> bool:
        self.checks.append((name, bool(ok), detail))
        return bool(ok)

    @property
    def failed(self) -> list[tuple[str, bool, str]]:
        return [c for c in self.checks if not c[1]]


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True).stdout


def clone(source: Path, into: Path) -> Path:
    """A throw-away copy of the checkout (a work tree or a bare git directory) with a work tree."""
    target = into / "op-plugin"
    subprocess.run(["git", "clone", "-q", str(source), str(target)], check=True, capture_output=True)
    git(target, "config", "user.email", "opgen@example.invalid")
    git(target, "config", "user.name", "opgen check")
    return target


def opgen_add(root: Path, spec: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "opgen", "add", "--op-plugin-root", str(root), str(spec)], env=env,
                          capture_output=True, text=True, timeout=600, check=False)


def torchnpugen_path(root: Path, work: Path) -> tuple[str, str]:
    """PYTHONPATH holding torchnpugen: the checkout's own, else the torch-npu wheel's ($OPGEN_TORCH_NPU_WHEEL)."""
    if (root / "torchnpugen" / "gen_op_backend.py").is_file():
        return str(root), "the checkout's torchnpugen"
    wheel = os.environ.get("OPGEN_TORCH_NPU_WHEEL")
    if not wheel or not Path(wheel).is_file():
        raise SystemExit("the checkout has no torchnpugen/ and OPGEN_TORCH_NPU_WHEEL names no torch-npu wheel")
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            if name.startswith("torchnpugen/"):
                archive.extract(name, work / "wheel")
    return str(work / "wheel"), f"torchnpugen of {Path(wheel).name}"


def gencode(root: Path, pythonpath: str, version: str, out: Path, full: bool = True) -> Path:
    """The torchnpugen steps of the checkout's gencode.sh for torch `version`; the filtered YAML's directory."""
    env = {**os.environ, "PYTHONPATH": pythonpath, "PYTORCH_VERSION": version}
    config = out / "config"
    config.mkdir(parents=True, exist_ok=True)
    steps = [["torchnpugen.gen_op_plugin_functions", f"--version={version}", f"--output_dir={config}/",
              f"--source_yaml={root / 'op_plugin/config/op_plugin_functions.yaml'}"]]
    if full:
        steps += [
            ["torchnpugen.gen_derivatives", f"--version={version}", f"--output_dir={config}/",
             f"--source_yaml={root / 'op_plugin/config/derivatives.yaml'}"],
            ["torchnpugen.gen_op_backend", f"--version={version}", f"--output_dir={out}/",
             f"--source_yaml={config / 'op_plugin_functions.yaml'}",
             f"--deprecate_yaml={root / 'op_plugin/config/deprecated.yaml'}", f"--impl_path={root}/torch_npu/csrc/aten"],
            ["torchnpugen.struct.gen_struct_opapi", f"--output_dir={out / 'opapi'}/",
             f"--native_yaml={config / 'op_plugin_functions.yaml'}",
             f"--struct_yaml={root / 'op_plugin/config/op_plugin_functions.yaml'}"]]
    (out / "opapi").mkdir(exist_ok=True)
    for step in steps:
        done = subprocess.run([sys.executable, "-m", *step], cwd=root, env=env, capture_output=True, text=True,
                              timeout=600, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{step[0]} failed:\n{done.stderr[-3000:]}")
    return config


# --- what the spec added -----------------------------------------------------------------------------------


def spec_entries(spec: Path):
    from opgen.op_plugin.model import plugin_ops
    from opgen.spec.load import load_spec

    return plugin_ops(load_spec(str(spec)))


def _declaration(header: str, name: str) -> str | None:
    for line in header.splitlines():
        if re.search(rf"\b{re.escape(name)}\(", line) and line.startswith("OP_PLUGIN_HIDDEN"):
            return line
    return None


def _normal(signature: str) -> str:
    """A C++ declaration without defaults, spaces, `OP_PLUGIN_HIDDEN` and a leading `::` (for comparing)."""
    text = signature.replace("OP_PLUGIN_HIDDEN", "").rstrip(" ;{")
    text = re.sub(r"\s*=\s*(\{\}|c10::nullopt|\"[^\"]*\"|[^,()]+)(?=[,)])", "", text)
    return re.sub(r"\s+", "", text).replace("::std::", "std::")


def check_generator(report: Report, root: Path, entries, pythonpath: str, work: Path) -> None:
    from opgen.op_plugin import kernel

    try:
        config = gencode(root, pythonpath, TORCH, work / "gencode")
    except RuntimeError as error:
        report.check("torchnpugen's gencode.sh steps accept the checkout", False, str(error))
        return
    report.check("torchnpugen's gencode.sh steps accept the checkout", True, f"torch {TORCH}")
    kept = (config / "op_plugin_functions.yaml").read_text(encoding="utf-8")
    report.check("the version filter keeps every op", all(f"func: {e.func}" in kept for e in entries))
    header = (work / "gencode" / "OpApiInterface.h").read_text(encoding="utf-8")
    for entry in entries:
        declared = _declaration(header, entry.schema.name)
        ours = " ".join(kernel.signature_lines(entry.schema)).replace("(    ", "(")
        report.check(f"OpApiInterface.h declares {entry.name} as its kernel does", declared is not None and _normal(
            declared) == _normal(ours), declared or "not declared")
    struct = "\n".join(p.read_text(encoding="utf-8") for p in sorted((work / "gencode" / "opapi").glob("*_*.cpp")))
    for entry in (e for e in entries if e.kernel == "gen_opapi"):
        body = struct[struct.find(f" {entry.schema.name}("):][:3000]
        report.check(f"gen_opapi writes {entry.name}'s kernel", f"EXEC_NPU_CMD({entry.aclnn}, " in body)
        for conversion in entry.conversions:
            report.check(f"{entry.name}: {conversion.argument} reaches aclnn converted",
                         f"auto {conversion.local} = {conversion.value};" in body and f", {conversion.local}" in body)


# --- test_compatibility.py's JSON checks ---------------------------------------------------------------------


def _params(signature: str) -> tuple[list[str], str]:
    head, _, tail = signature.partition("->")
    return [p for p in head.strip()[1:-1].split(",")], tail.strip()


def incompatible(base: str, now: str) -> bool:
    """What test_compatibility.py calls not compatible: other outputs, a parameter gone or changed, a new one
    without a default, or the positional ones reordered."""
    (old, old_out), (new, new_out) = _params(base), _params(now)
    if old_out != new_out or set(old) - set(new):
        return True
    if any("=" not in p for p in set(new) - set(old)):
        return True
    old_positional = [p for p in old if "=" not in p]
    new_positional = [p for p in new if "=" not in p]
    return new_positional[:len(old_positional)] != old_positional


def _covers(versions: list[str], version: str) -> bool:
    """The test's reading of a JSON version list: all_version, the version itself, or [first, "newest"]."""
    if "all_version" in versions or version in versions:
        return True
    if "newest" not in versions or versions.index("newest") == 0:
        return False
    first = versions[versions.index("newest") - 1]
    return first in ALL_VERSIONS and ALL_VERSIONS.index(first) <= ALL_VERSIONS.index(version)


def check_compatibility(report: Report, root: Path, entries, pythonpath: str, work: Path) -> None:
    schema = json.loads((root / compat.SCHEMA_JSON).read_text(encoding="utf-8"))
    ours = {e.name for e in entries}
    public = {e.schema.name for e in entries if e.twin_of is None and (e.config.exposed or e.config.public_api)}
    theirs = 0
    # the torch versions whose public API the JSON tracks (its op_api forms cover them; v2.3 and v2.4 not)
    tracked = {v for _, versions in compat.read_forms(json.dumps(schema)) for v in ALL_VERSIONS
               if _covers(list(versions), v)}
    report.numbers["torch versions the JSON's op_api keys track"] = sorted(tracked, key=ALL_VERSIONS.index)
    for version in (v for v in ALL_VERSIONS if v not in SKIPPED_BY_THE_TEST):
        config = gencode(root, pythonpath, version[1:] + ".0", work / f"compat-{version}", full=False)
        functions = {}
        for line in (config / "op_plugin_functions.yaml").read_text(encoding="utf-8").splitlines():
            if " func:" in line or line.startswith("- func:"):
                text = line.split("func:", 1)[1].strip()
                functions[text.split("(", 1)[0]] = text[len(text.split("(", 1)[0]):]
        base = {}
        for key, value in schema.items():
            if not key.startswith("op_api:") and _covers(value["version"], version):
                name = key.split("(", 1)[0].removeprefix("func: ")
                base.setdefault(name, key[len("func: ") + len(name):])
        for name in sorted(set(functions) | set(base)):
            problem = ("is new" if name not in base else "has been deleted" if name not in functions
                       else "is not compatible" if incompatible(base[name], functions[name]) else None)
            if problem and name in ours:
                report.check(f"test_op_func_compatibility on torch {version}: {name}", False, problem)
            elif problem:
                theirs += 1
        keyed = {k.split("(", 1)[0].removeprefix("op_api: torch_npu.") for k, v in schema.items()
                 if k.startswith("op_api:") and _covers(v["version"], version)}
        exists = {e.schema.name for e in entries if version in compat.version_set(e.config.versions)}
        for name in exists if version in tracked else ():
            if (name in public) != (name in keyed):
                report.check(f"test_op_api_compatibility on torch {version}: {name}", False,
                             "public without its op_api key" if name in public else "an op_api key for no public op")
    report.check("test_compatibility.py's JSON checks pass for every op added", not any(
        "compatibility on torch" in name for name, ok, _ in report.checks if not ok))
    report.numbers["pre-existing compatibility findings of the checkout (all versions)"] = theirs


# --- the diff a reviewer reads -----------------------------------------------------------------------------


def check_diff(report: Report, root: Path, entries) -> None:
    diff = git(root, "diff", "--unified=0")
    removed = [line for line in diff.splitlines() if line.startswith("-") and not line.startswith("---")]
    added = {line[1:] for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")}
    commas = [line for line in removed if line[1:] + "," in added]
    report.check("git diff only adds lines (a JSON member's comma aside)", len(removed) == len(commas),
                 "\n".join(r for r in removed if r not in commas)[:2000])
    functions = (root / "op_plugin/config/op_plugin_functions.yaml").read_text(encoding="utf-8")
    for entry in entries:
        start = functions.index(f"  - func: {entry.func}")
        report.check(f"{entry.name}'s entry has a blank line before it", functions[:start].endswith("\n\n"))
        block = functions[start:functions.find("\n\n", start)]
        values = [line.split(":", 1)[1] for line in block.splitlines()[1:] if ":" in line]
        report.check(f"{entry.name}'s entry quotes as the repo does (single quotes)", not any('"' in v for v in values))
    new_cpp = [root / p for p in git(root, "ls-files", "--others", "--exclude-standard").split() if p.endswith(".cpp")]
    program = executable()
    if program is None:
        report.check("clang-format is installed (pip install clang-format)", False)
        return
    for path in new_cpp:
        done = subprocess.run([program, f"--style=file:{root / '.clang-format'}", "--dry-run", "--Werror", str(path)],
                              capture_output=True, text=True, check=False)
        report.check(f"clang-format changes nothing in {path.name}", done.returncode == 0, done.stderr[:1500])


def check_python(report: Report, root: Path) -> None:
    import ast

    for path in git(root, "diff", "--name-only").split() + git(root, "ls-files", "--others", "--exclude-standard").split():
        if path.endswith(".py"):
            try:
                ast.parse((root / path).read_text(encoding="utf-8"))
            except SyntaxError as error:
                report.check(f"{path} parses", False, f"line {error.lineno}: {error.msg}")


def check_re_adding(report: Report, root: Path, spec: Path, work: Path, entries) -> None:
    again = opgen_add(root, spec)
    report.check("a second opgen add changes nothing", again.returncode == 0 and "nothing to do" in again.stdout,
                 again.stderr[-1500:])
    main = next(e for e in entries if e.twin_of is None and e.source.doc)
    shown = dict(main.config.docs).get("description") or main.source.doc  # what the docs print (op_plugin.docs first)
    edited = work / "doc-changed.yaml"
    text = spec.read_text(encoding="utf-8")
    edited.write_text(text.replace(shown.strip().splitlines()[0], shown.strip().splitlines()[0] + " (changed)", 1),
                      encoding="utf-8")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "opgen add")
    done = opgen_add(root, edited)
    changed = git(root, "diff", "--name-only").split()
    docs = (root / "codegen/templates/_op_plugin_docs.py").read_text(encoding="utf-8")
    report.check("a doc-only change re-added updates the docs in place", done.returncode == 0 and changed and all(
        "docs" in p or p.endswith("_op_plugin_docs.py") for p in changed), f"changed: {changed}")
    report.check("one docstring per op after the doc change", docs.count(f'_add_torch_npu_docstr(\n    "{main.name}",')
                 + docs.count(f'_add_torch_npu_docstr(\r\n    "{main.name}",') == 1 and "(changed)" in docs)
    numbers = git(root, "diff", "--numstat").split()
    report.numbers["lines the doc change touches (added, removed)"] = (
        sum(int(n) for n in numbers[0::3]), sum(int(n) for n in numbers[1::3]))


# --- the checkout's own conventions, measured ---------------------------------------------------------------


def measure(report: Report, root: Path) -> None:
    import yaml

    from opgen.op_plugin import kernel
    from opgen.op_plugin.yaml_edit import SectionEditor

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    text = (root / "op_plugin/config/op_plugin_functions.yaml").read_text(encoding="utf-8")
    data = yaml.load(text, Loader=loader)
    schema = json.loads((root / compat.SCHEMA_JSON).read_text(encoding="utf-8"))
    agree = total = 0
    for entry in data["custom"]:
        specs = [entry[k] for k in ("op_api", "acl_op") if k in entry]
        key = f"func: {entry['func']}"
        if key in schema and specs:
            covered = sorted({v for s in specs for v in compat.version_set(s)}, key=ALL_VERSIONS.index)
            total += 1
            agree += compat.json_versions(covered) == schema[key]["version"]
    report.numbers["custom: entries whose JSON versions opgen's rule writes alike"] = f"{agree} of {total}"
    report.numbers["op_api signature forms read from the JSON"] = compat.read_forms(
        (root / compat.SCHEMA_JSON).read_text(encoding="utf-8"))
    editor = SectionEditor()
    for path, section in (("op_plugin/config/op_plugin_functions.yaml", "custom"),
                          ("op_plugin/config/derivatives.yaml", "backward")):
        content = (root / path).read_text(encoding="utf-8")
        found = editor.entries(content, section)
        lines = content.split("\n")
        gaps = [any(not lines[n].strip() for n in range(a[2] + 1, b[1])) for a, b in itertools.pairwise(found)]
        report.numbers[f"{section}: entries followed by a blank line"] = f"{sum(gaps)} of {len(gaps)}"
    quoted = re.findall(r"^\s+(?:size|dtype|\w+): (['\"])", text, re.MULTILINE)
    report.numbers["quoted YAML values, single / double"] = (quoted.count("'"), quoted.count('"'))
    execs = re.findall(r"^\s+exec: (.*)$", text, re.MULTILINE)
    report.numbers["gen_opapi exec: the aclnn name alone"] = f"{sum(',' not in e for e in execs)} of {len(execs)}"
    kernels = sorted((root / "op_plugin/ops/opapi").glob("*.cpp"))
    header = re.escape(kernel.LICENCE).replace(r"\{year\}", r"\d{4}")
    report.numbers["opapi kernels starting with opgen's licence header"] = (
        f"{sum(bool(re.match(header, p.read_text(encoding='utf-8', errors='replace'))) for p in kernels)} of "
        f"{len(kernels)}")
    program = executable()
    if program is not None:
        clean = sum(subprocess.run([program, f"--style=file:{root / '.clang-format'}", "--dry-run", "--Werror", str(p)],
                                   capture_output=True, check=False).returncode == 0 for p in kernels)
        report.numbers["opapi kernels clang-format leaves as they are"] = f"{clean} of {len(kernels)}"
    docs = (root / "codegen/templates/_op_plugin_docs.py").read_text(encoding="utf-8").replace("\r\n", "\n")
    calls = re.findall(r'_add_torch_npu_docstr\(\n    "[^"]+",\n    """\n.*?\n"""\n\)', docs, re.DOTALL)
    report.numbers["docstring calls in the form opgen writes"] = f"{len(calls)} of {docs.count('_add_torch_npu_docstr(')- 1}"
    tests = sorted((root / "test/test_custom_ops").glob("test_*.py"))
    report.numbers["custom-op tests with @SupportedDevices / `import torch_npu`"] = (
        sum("@SupportedDevices" in p.read_text(encoding="utf-8", errors="replace") for p in tests),
        sum("\nimport torch_npu\n" in p.read_text(encoding="utf-8", errors="replace") for p in tests), len(tests))


def run(source: Path, spec: Path, with_measure: bool) -> Report:
    report = Report()
    entries = spec_entries(spec)
    with tempfile.TemporaryDirectory(prefix="opgen-op-plugin-") as temp:
        work = Path(temp)
        root = clone(source, work)
        if with_measure:
            measure(report, root)
        done = opgen_add(root, spec)
        if not report.check("opgen add succeeds", done.returncode == 0, done.stderr[-3000:]):
            return report
        pythonpath, which = torchnpugen_path(root, work)
        report.numbers["torchnpugen"] = which
        check_diff(report, root, entries)
        check_python(report, root)
        check_generator(report, root, entries, pythonpath, work)
        check_compatibility(report, root, entries, pythonpath, work)
        check_re_adding(report, root, spec, work, entries)
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=os.environ.get("OPGEN_OP_PLUGIN_ROOT"),
                        help="an op-plugin checkout or bare git directory (default: $OPGEN_OP_PLUGIN_ROOT)")
    parser.add_argument("--spec", default=str(NEW_OPS), help="the ops to add (default: tests/op_plugin/new_ops.yaml)")
    parser.add_argument("--measure", action="store_true", help="also measure the checkout's own conventions")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args()
    if not args.root:
        print("no checkout: give --root or set OPGEN_OP_PLUGIN_ROOT", file=sys.stderr)
        return 2
    report = run(Path(args.root), Path(args.spec), args.measure)
    if args.json:
        print(json.dumps({"checks": report.checks, "numbers": report.numbers}, indent=1, ensure_ascii=False,
                         default=str))
    else:
        for name, ok, detail in report.checks:
            print(f"{'ok  ' if ok else 'FAIL'} {name}" + (f"\n     {detail}" if detail and not ok else ""))
        for name, value in report.numbers.items():
            print(f"     {name}: {value}")
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
