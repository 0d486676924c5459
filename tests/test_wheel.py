"""A wheel built from the repository carries the templates: installed into a fresh virtual
environment, its `opgen new` generates a project (without the repository on the path)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from new_helpers import REPO, snapshot

SOURCES = ("opgen", "templates", "examples", "setup.py", "pyproject.toml", "MANIFEST.in", "README.md")


def run(*command, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run([str(c) for c in command], cwd=cwd, capture_output=True, text=True, timeout=600,
                          env=env, check=False)
    assert done.returncode == 0, f"{command}:\n{done.stdout}\n{done.stderr}"
    return done


@pytest.mark.slow
def test_wheel_in_a_fresh_venv_runs_opgen_new(tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    for name in SOURCES:
        item = REPO / name
        if item.is_dir():
            shutil.copytree(item, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(item, source / name)
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", tmp_path / "dist",
        source, cwd=tmp_path)
    wheel = next((tmp_path / "dist").glob("opgen-*.whl"))

    venv = tmp_path / "venv"
    # a venv of its own: the wheel's declared dependencies come from the package index, nothing from outside
    run(sys.executable, "-m", "venv", venv, cwd=tmp_path)
    bin_dir = venv / ("Scripts" if os.name == "nt" else "bin")
    python = bin_dir / "python"
    run(python, "-m", "pip", "install", "-q", wheel, cwd=tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    where = run(python, "-c", "import opgen.render.templates as t; print(t.__file__); print(t.templates_dir())", cwd=tmp_path,
                env=env).stdout.split()
    assert Path(where[0]).is_relative_to(venv), where  # the wheel's opgen, not the checkout's
    assert Path(where[1]) == Path(where[0]).parents[1] / "_templates"

    out = tmp_path / "project"
    run(bin_dir / "opgen", "new", REPO / "examples" / "rms_norm.yaml", "-o", out, cwd=tmp_path, env=env)
    files = snapshot(out)
    assert {"myops/ops.py", "myops/kernels/rms_norm_cpu.py", "tests/test_myops.py"} <= set(files)
    reference = tmp_path / "reference"
    run(sys.executable, "-m", "opgen", "new", REPO / "examples" / "rms_norm.yaml", "-o", reference, cwd=REPO)
    assert snapshot(reference) == files

    # a dependency removed after the install is an installation problem that names the package, not a bug
    run(python, "-m", "pip", "uninstall", "-q", "-y", "cookiecutter", cwd=tmp_path)
    broken = subprocess.run([str(bin_dir / "opgen"), "new", str(REPO / "examples" / "rms_norm.yaml"), "-o",
                             str(tmp_path / "again")], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=120, check=False)
    assert broken.returncode == 2, broken.stdout + broken.stderr
    assert "opgen is not installed correctly: it needs the package 'cookiecutter'" in broken.stderr
    assert "pip install cookiecutter" in broken.stderr and "bug in opgen" not in broken.stderr
    assert "Traceback" not in broken.stderr and not (tmp_path / "again").exists()
    # commands that do not need it still work
    run(bin_dir / "opgen", "explain", "ns::f(Tensor x) -> Tensor", cwd=tmp_path, env=env)
