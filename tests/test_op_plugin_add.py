"""`opgen add --op-plugin-root ROOT SPEC` on a fixture tree shaped like op-plugin (tests/fixtures/op_plugin_root,
written for these tests in op-plugin's file formats: every file an op-add pull request touches)."""

from __future__ import annotations

import difflib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from forked_python import run_pytest
from new_helpers import REPO, opgen, snapshot
from op_plugin_helpers import EXAMPLES, extract_torchnpugen, needs_wheel, run_torchnpugen

FIXTURE = REPO / "tests" / "fixtures" / "op_plugin_root"
EDITED = ["codegen/templates/_op_plugin_docs.py", "op_plugin/config/derivatives.yaml",
          "op_plugin/config/op_plugin_functions.yaml", "op_plugin/python/meta/_meta_registrations.py",
          "test/core_tests/test_fake_tensor.py", "test/core_tests/torch_npu_OpApi_schema_all.json"]
RECORD = ".opgen/op_plugin_add.json"  # outside git, opgen add keeps its record in the checkout's .opgen/


@pytest.fixture
def root(tmp_path) -> Path:
    return Path(shutil.copytree(FIXTURE, tmp_path / "op-plugin"))


def add(root: Path, *args: str):
    return opgen("add", "--op-plugin-root", str(root), *args)


def tree(root: Path) -> dict[str, bytes]:
    return {k: v for k, v in snapshot(root).items() if k != RECORD}


def only_added(before: str, after: str) -> list[str]:
    """The lines `after` adds to `before`; fails if any line of `before` changed, moved or went (except a JSON
    line that gains the comma joining it to a new member)."""
    old, new = before.splitlines(keepends=True), after.splitlines(keepends=True)
    ops = difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes()
    comma = [op for op in ops if op[0] == "replace" and op[2] - op[1] == 1
             and new[op[3]].rstrip("\r\n") == old[op[1]].rstrip("\r\n") + ","]
    bad = [op for op in ops if op[0] not in ("equal", "insert") and op not in comma]
    assert not bad, bad
    return [line for tag, _, _, j1, j2 in ops if tag in ("insert", "replace") for line in after.splitlines()[j1:j2]]


@pytest.mark.slow
def test_adds_three_examples_with_only_added_lines_and_twice_changes_nothing(root):
    before = snapshot(root)
    for spec in EXAMPLES:
        done = add(root, str(spec))
        assert done.returncode == 0, done.stderr
    after = tree(root)
    assert set(before) <= set(after)
    added_files = sorted(set(after) - set(before))
    assert added_files == ["op_plugin/ops/opapi/KvCacheUpdateKernelNpuOpApi.cpp",
                           "op_plugin/ops/opapi/RmsNormKernelNpuOpApi.cpp",
                           "test/test_custom_ops/test_npu_add_rms_norm.py",
                           "test/test_custom_ops/test_npu_kv_cache_update.py", "test/test_custom_ops/test_npu_rms_norm.py"]
    changed = sorted(p for p in before if before[p] != after[p])
    assert changed == EDITED
    added = {p: only_added(before[p].decode(), after[p].decode()) for p in changed}
    yaml_added = added["op_plugin/config/op_plugin_functions.yaml"]
    assert [line for line in yaml_added if "- func:" in line] == [
        "  - func: npu_add_rms_norm(Tensor x1, Tensor x2, Tensor gamma, float epsilon=1e-06) -> (Tensor, Tensor, Tensor)",
        ("  - func: npu_kv_cache_update(Tensor(a!) key_cache, Tensor(b!) value_cache, Tensor key, Tensor value, "
        "Tensor slot_mapping) -> Tensor"),
        ("  - func: npu_kv_cache_update_functional(Tensor key_cache, Tensor value_cache, Tensor key, Tensor value, "
        "Tensor slot_mapping) -> (Tensor, Tensor, Tensor)"),
        "  - func: npu_rms_norm(Tensor self, Tensor gamma, float epsilon=1e-06) -> (Tensor, Tensor)"]  # spec order
    # placed after the last custom: entry, before the section's trailing comment
    text = after["op_plugin/config/op_plugin_functions.yaml"].decode()
    assert text.index("exposed: all_version   # in-place") < text.index("npu_add_rms_norm(") < text.index(
        "# a trailing comment of the custom section")
    # derivatives.yaml keeps its own (dash at column 0) indentation; a blank line before the entry
    assert added["op_plugin/config/derivatives.yaml"][0].startswith("- name: npu_rms_norm(")
    assert "version: all_version\n\n- name: npu_rms_norm(" in after["op_plugin/config/derivatives.yaml"].decode()
    # the fixture's custom: entries have no blank line between them, and opgen's none either
    assert "" not in yaml_added
    meta = after["op_plugin/python/meta/_meta_registrations.py"].decode()
    assert not any(line.startswith(("import", "from")) for line in added["op_plugin/python/meta/_meta_registrations.py"])
    assert meta.index('@impl(m, "npu_meta_only")') < meta.index('@impl(m, "npu_add_rms_norm")') < meta.index(
        '@impl(m_aten, "abs")')  # after the last @impl(m, ...), before other code
    for spec in EXAMPLES:
        done = add(root, str(spec))
        assert done.returncode == 0 and "nothing to do" in done.stdout, done.stderr
    assert tree(root) == after


@pytest.mark.slow
def test_opgen_checks_run_the_added_meta_functions_on_cpu(root, tmp_path):
    """opgen_checks/ (of `opgen new`, never added to the checkout) runs the checkout's Meta functions after
    `opgen add`, found through OPGEN_OP_PLUGIN_ROOT."""
    checks = tmp_path / "checks"
    for spec in EXAMPLES:
        assert add(root, str(spec)).returncode == 0
        assert opgen("new", str(spec), "--target", "op_plugin", "-o", str(tmp_path / spec.stem)).returncode == 0
        shutil.copytree(tmp_path / spec.stem / "opgen_checks", checks, dirs_exist_ok=True)
    assert not (root / "opgen_checks").exists()
    done = run_pytest(["-q", "-p", "no:cacheprovider", str(checks)], cwd=tmp_path,
                      env={**os.environ, "OPGEN_OP_PLUGIN_ROOT": str(root)}, timeout=600)
    assert done.returncode == 0 and "9 passed" in done.stdout, done.stdout[-3000:]


@needs_wheel
def test_torchnpugen_reads_the_edited_tree(root, tmp_path):
    for spec in EXAMPLES:
        assert add(root, str(spec)).returncode == 0
    report = run_torchnpugen(extract_torchnpugen(tmp_path / "wheel"), root / "op_plugin/config/op_plugin_functions.yaml",
                             tmp_path / "tng")
    assert sorted(report["gen_opapi"]) == ["npu_add_rms_norm", "npu_swiglu"]
    assert {"functional": "npu_kv_cache_update_functional", "mutable": "npu_kv_cache_update"} in [
        g["members"] for g in report["groups"]]


def _spec(tmp_path: Path, schema: str) -> str:
    path = tmp_path / "spec.yaml"
    path.write_text(f'namespace: npu\nops:\n  - schema: "{schema}"\n'
                    '    outputs: {out0: {shape: "self.shape", dtype: "self.dtype"}}\n')
    return str(path)


@pytest.mark.parametrize(("schema", "where"), [
    ("npu_fast_gelu(Tensor self) -> Tensor", "npu_fast_gelu (op_plugin/config/op_plugin_functions.yaml:23)"),
    ("npu_meta_only(Tensor self) -> Tensor", "npu_meta_only (op_plugin/python/meta/_meta_registrations.py:23)"),
])
def test_refuses_an_existing_op_naming_where_and_writes_nothing(root, tmp_path, schema, where):
    before = snapshot(root)
    done = add(root, _spec(tmp_path, schema))
    assert done.returncode == 2 and where in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert snapshot(root) == before


def test_refuses_to_overwrite_a_different_kernel_file(root):
    kernel = root / "op_plugin/ops/opapi/RmsNormKernelNpuOpApi.cpp"
    kernel.write_text("// someone's own kernel\n")
    before = snapshot(root)
    done = add(root, str(REPO / "examples/op_plugin/rms_norm.yaml"))
    assert done.returncode == 2 and "RmsNormKernelNpuOpApi.cpp already exists" in done.stderr
    assert snapshot(root) == before  # the YAML and Meta insertions were planned but not written


def test_dry_run_prints_a_unified_diff_and_writes_nothing(root):
    before = snapshot(root)
    done = add(root, str(REPO / "examples/op_plugin/rms_norm.yaml"), "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "--- a/op_plugin/config/op_plugin_functions.yaml\n+++ b/op_plugin/config/op_plugin_functions.yaml" in done.stdout
    assert "+  - func: npu_rms_norm(Tensor self, Tensor gamma, float epsilon=1e-06) -> (Tensor, Tensor)" in done.stdout
    assert "--- /dev/null\n+++ b/op_plugin/ops/opapi/RmsNormKernelNpuOpApi.cpp" in done.stdout
    assert not any(line.startswith("-") and not line.startswith("---") for line in done.stdout.splitlines())
    assert snapshot(root) == before


def test_adds_missing_meta_imports_once(root):
    meta = root / "op_plugin/python/meta/_meta_registrations.py"
    text = meta.read_text().replace("import torch\nfrom torch.library import Library, impl\n", "")
    meta.write_text(text)
    assert add(root, str(REPO / "examples/op_plugin/rms_norm.yaml")).returncode == 0
    added = only_added(text, meta.read_text())
    assert added[:2] == ["import torch", "from torch.library import Library, impl"]
    assert sum(line.startswith(("import", "from")) for line in added) == 2


def test_not_an_op_plugin_root(tmp_path):
    done = add(tmp_path, str(REPO / "examples/op_plugin/rms_norm.yaml"))
    assert done.returncode == 2 and "op_plugin_functions.yaml does not exist" in done.stderr


def test_without_clang_format_the_kernel_keeps_opgens_layout_and_says_so(root, tmp_path):
    blocker = tmp_path / "block"
    (blocker / "clang_format").mkdir(parents=True)
    (blocker / "clang_format" / "__init__.py").write_text("raise ImportError('blocked for the test')\n")
    done = subprocess.run([sys.executable, "-m", "opgen", "add", "--op-plugin-root", str(root),
                           str(REPO / "examples/op_plugin/kv_cache_update.yaml")], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{blocker}:{REPO}"}, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "clang-format is not installed" in done.stderr and "pip install 'opgen[op_plugin]'" in done.stderr
    kernel = (root / "op_plugin/ops/opapi/KvCacheUpdateKernelNpuOpApi.cpp").read_text()
    assert "at::Tensor npu_kv_cache_update(\n    at::Tensor& key_cache,\n" in kernel  # by construction


def test_crlf_files_keep_their_line_endings(root):
    """op-plugin's _op_plugin_docs.py uses CRLF: the inserted lines follow the file, no other byte changes."""
    for relative in ("codegen/templates/_op_plugin_docs.py", "op_plugin/config/op_plugin_functions.yaml",
                     "op_plugin/python/meta/_meta_registrations.py"):
        path = root / relative
        path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))
    before = snapshot(root)
    assert add(root, str(REPO / "examples/op_plugin/kv_cache_update.yaml")).returncode == 0
    after = tree(root)
    for relative in ("codegen/templates/_op_plugin_docs.py", "op_plugin/config/op_plugin_functions.yaml",
                     "op_plugin/python/meta/_meta_registrations.py"):
        old, new = before[relative], after[relative]
        assert new.count(b"\n") == new.count(b"\r\n"), relative  # every line still ends in CRLF
        assert len(only_added(old.decode().replace("\r\n", "\n"), new.decode().replace("\r\n", "\n"))) > 3
    assert add(root, str(REPO / "examples/op_plugin/kv_cache_update.yaml")).stdout.startswith("nothing to do")
    assert tree(root) == after
