"""The shape of the house: ruff-clean, no import cycles between opgen's modules, and no function too complex to
read (cyclomatic complexity above 25 as radon counts it: boolean operators and conditional expressions included,
which ruff's mccabe check, C901, leaves out)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "opgen"
MAX_COMPLEXITY = 25


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph() -> dict[str, set[str]]:
    """Module -> the opgen modules it imports, at any depth of the file (a function-level import is an
    edge too: it still ties the two modules together)."""
    modules = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")
                    anchor = anchor[:len(anchor) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name and target != "opgen":
                    edges.add(target)
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_import_graph_finder_sees_a_planted_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_opgen_has_no_import_cycle():
    graph = import_graph()
    assert "opgen.cli" in graph and "opgen.console" in graph["opgen.new"]
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def complexities(source: str) -> list[tuple[str, int, int]]:
    """(name, line, radon's cyclomatic complexity) of every function, method and nested function."""
    from radon.complexity import cc_visit

    found, pending = set(), list(cc_visit(source))
    while pending:
        block = pending.pop()
        if hasattr(block, "methods"):  # a class: its methods (a top-level class's are blocks too) and inner classes
            pending += [*block.methods, *block.inner_classes]
            continue
        found.add((block.fullname, block.lineno, block.complexity))
        pending += block.closures
    return sorted(found, key=lambda item: item[1])


def test_the_complexity_measure_counts_boolean_operators_and_conditional_expressions():
    planted = "def pick(a, b, c):\n    return (a and b or c) if a else (b if c else a)\n"
    assert complexities(planted) == [("pick", 1, 5)]  # 1 + two boolean operators + two conditional expressions
    twin = "def pick(a, b, c):\n    return a\n"
    assert complexities(twin) == [("pick", 1, 1)]


def test_no_function_is_too_complex():
    too_complex = [f"{path.relative_to(REPO)}:{line} {name} ({value})" for path in sorted(PACKAGE.rglob("*.py"))
                   for name, line, value in complexities(path.read_text(encoding="utf-8")) if value > MAX_COMPLEXITY]
    assert not too_complex, f"functions above cyclomatic complexity {MAX_COMPLEXITY} (radon):\n" + "\n".join(too_complex)


def test_opgen_its_tests_and_benchmarks_pass_ruff():
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "opgen", "tests", "benchmarks"],
                          cwd=REPO, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


RULE_CODE = re.compile(r"OPG\d{3}")
RULE_DEFINERS = {"rule", "lint_rule"}  # the calls that define a rule: its code is their first argument


def stray_rule_codes(tree: ast.AST) -> list[int]:
    """Lines of string literals that are a rule code, outside the first argument of a rule definition."""
    defining = {id(node.args[0]) for node in ast.walk(tree) if isinstance(node, ast.Call) and node.args
                and getattr(node.func, "id", getattr(node.func, "attr", None)) in RULE_DEFINERS}
    return [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and RULE_CODE.fullmatch(node.value) and id(node) not in defining]


def test_the_rule_code_finder_sees_a_planted_literal():
    assert stray_rule_codes(ast.parse('X = rule("OPG101", "name")\nSKIP = {"OPG106"}\n')) == [2]
    assert stray_rule_codes(ast.parse('Y = lint_rule("OPG201", "n")\nZ = Y.code\n')) == []


def test_rule_codes_are_written_only_where_the_rule_is_defined():
    stray = {str(path.relative_to(REPO)): lines for path in sorted(PACKAGE.rglob("*.py"))
             if (lines := stray_rule_codes(ast.parse(path.read_text(encoding="utf-8"))))}
    assert not stray, f"rule codes as literals outside their rule's definition (use the Rule's .code): {stray}"
