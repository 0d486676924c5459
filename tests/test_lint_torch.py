"""The installed torch package is mostly correct registration code: opgen lint must read all of it
without a crash, and every finding must be one we reviewed (a new one is a false positive until
someone reads it and adds it here with the reason)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

torch_spec = pytest.importorskip("importlib.util").find_spec("torch")
ROOT = Path(__file__).resolve().parents[1]

# (path inside the torch package, code): reviewed findings in torch 2.13.0, each a real instance of its rule.
REVIEWED = {
    # the fake of semi_structured::cusparselt_mm has no default for should_transpose_dense (schema: False):
    # torch omits an argument equal to its default, so the fake raises TypeError under FakeTensorMode
    ("sparse/semi_structured.py", "OPG305"),
    # `-> Tensor(a)` view op defined without a tag (contract rule OPG102): torch.compile of a caller raises
    ("_functorch/_activation_offloading/offload_ops.py", "OPG102"),
    # kernel and Meta kernel both return an input (a narrow of it) through a non-aliased return
    ("distributed/fsdp/_fully_shard/_fsdp_collectives.py", "OPG303"),
}


def _torch_dir() -> Path:
    return Path(torch_spec.origin).parent


def test_whole_torch_package_lints_without_crash_and_only_reviewed_findings():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    result = subprocess.run([sys.executable, "-m", "opgen", "lint", str(_torch_dir()), "--output-format", "json"],
                            capture_output=True, text=True, env=env, timeout=600, check=False)
    assert result.returncode in (0, 1), result.stderr
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    diagnostics = json.loads(result.stdout)
    found = {(Path(d["filename"]).relative_to(_torch_dir()).as_posix(), d["code"]) for d in diagnostics}
    assert found <= REVIEWED, sorted(found - REVIEWED)
    assert not any(d["code"] in ("OPG001", "OPG200") for d in diagnostics), "torch's schemas all parse"
    assert len(diagnostics) <= 4


def test_native_functions_yaml_parses_and_keeps_aten_conventions(tmp_path):
    yaml_path = _torch_dir().parent / "torchgen" / "packaged" / "ATen" / "native" / "native_functions.yaml"
    if not yaml_path.exists():
        pytest.skip("torchgen's native_functions.yaml is not installed")
    shutil.copy(yaml_path, tmp_path / "native_functions.yaml")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    result = subprocess.run([sys.executable, "-m", "opgen", "lint", "native_functions.yaml", "--statistics"],
                            cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300, check=False)
    assert result.returncode == 1, result.stderr
    counts = {line.split("\t")[1]: int(line.split("\t")[0]) for line in result.stdout.splitlines()}
    # No invalid schema, no .out convention break, no aliased-return complaint on ATen's `-> Tensor(a!)`
    # convention. What remains are contract rules (OPG105 dropout/dropout_ with input vs self,
    # OPG111 _cudnn_attention_forward's returns named like its arguments).
    assert set(counts) <= {"OPG105", "OPG111"}, counts
    assert sum(counts.values()) <= 9
