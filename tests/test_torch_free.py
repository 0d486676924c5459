"""The schema core and `opgen explain` work where torch cannot be imported at all."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

HIDDEN = ("torch", "torchgen")


@pytest.fixture
def no_torch_env(tmp_path):
    """PYTHONPATH with `torch` and `torchgen` packages that refuse to import, ahead of site-packages."""
    for name in HIDDEN:
        package = tmp_path / name
        package.mkdir()
        (package / "__init__.py").write_text(f"raise ImportError('{name} is hidden by opgen test_torch_free')\n")
    env = {key: value for key, value in os.environ.items() if key != "OPGEN_DEBUG"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path), env.get("PYTHONPATH")]))
    return env


def run_python(code: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env,
                          timeout=120, check=False)


def test_the_shim_really_hides_torch(no_torch_env):
    result = run_python("import torch", no_torch_env)
    assert result.returncode == 1
    assert "torch is hidden by opgen test_torch_free" in result.stderr


def test_parse_contract_and_explain_without_torch(no_torch_env):
    result = run_python("""
        import sys
        import opgen, opgen.cli, opgen.contract, opgen.explain, opgen.catalogue
        from opgen.schema import parse_schema
        from opgen.schema.types import cpp_type, python_annotation
        from opgen.contract import check_schema, mutates_args

        schema = parse_schema("ns::scale_(Tensor(a!) x, float s=1e-06) -> Tensor(a!)")
        assert str(schema) == "ns::scale_(Tensor(a!) x, float s=1e-06) -> Tensor(a!)"
        assert mutates_args(schema) == ["x"]
        assert [d.code for d in check_schema(schema)] == ["OPG102"]
        assert python_annotation(schema.arguments[0].type) == "torch.Tensor"
        assert cpp_type(schema.arguments[0]) == "at::Tensor &"
        opgen.explain.describe(schema)
        opgen.catalogue.all_rules()
        assert "torch" not in sys.modules and "torchgen" not in sys.modules
        print("ok")
    """, no_torch_env)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ok\n"


@pytest.mark.parametrize("args", [
    ["explain", "f(Tensor(a!) x, SymInt[2] k=1) -> ()"],
    ["explain", "--json", "f(Tensor(a!) x, SymInt[2] k=1) -> ()"],
    ["explain", "--code", "OPG102"],
])
def test_opgen_explain_command_without_torch(no_torch_env, args):
    # Run the real entry point in-process so that sys.modules can be inspected after it exits.
    result = run_python(f"""
        import runpy, sys
        sys.argv = ["opgen", *{args!r}]
        try:
            runpy.run_module("opgen", run_name="__main__", alter_sys=True)
        except SystemExit as done:
            code = done.code
        leaked = [name for name in ("torch", "torchgen") if name in sys.modules]
        print("exit", code, "leaked", leaked, file=sys.stderr)
    """, no_torch_env)
    assert "exit 0 leaked []" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    if "--json" in args:
        assert json.loads(result.stdout)["mutates_args"] == ["x"]
    elif "--code" not in args:
        assert result.stdout.startswith("f(Tensor(a!) x, SymInt[2] k=1) -> ()\n")


def test_python_dash_m_opgen_without_torch(no_torch_env):
    result = subprocess.run([sys.executable, "-m", "opgen", "explain", "--json", "-"], input="f(Tensor x) -> Tensor\n",
                            capture_output=True, text=True, env=no_torch_env, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["canonical"] == "f(Tensor x) -> Tensor"


def test_the_checks_library_its_plugin_and_loader_import_without_torch(no_torch_env):
    """opgen.testing imports its checks (and torch) on first use only: the pytest plugin loads in every pytest
    session of an environment holding opgen, and `opgen npugraph-ex` uses its loader."""
    result = run_python("""
        import sys
        import opgen.testing, opgen.testing.plugin, opgen.testing.npugraph_ex_cpu
        from opgen.npugraph_ex import loader

        assert "assert_matches_reference" in dir(opgen.testing) and loader() is opgen.testing.npugraph_ex_cpu
        assert "torch" not in sys.modules
        try:
            opgen.testing.Op
        except ImportError as error:
            assert "torch is hidden" in str(error)
        print("ok")
    """, no_torch_env)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ok\n"
