"""A wheel built from the repository carries the templates: installed into a fresh virtual
environment, its `opgen new` generates a project (without the repository on the path)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from new_helpers import REPO, snapshot

SOURCES = ("opgen", "templates", "examples", "setup.py", "pyproject.toml", "MANIFEST.in", "README.md")


def run(*command, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run([str(c) for c in command], cwd=cwd, capture_output=True, text=True, timeout=600,
                          env=env, check=False)
    assert done.returncode == 0, f"{command}:\n{done.stdout}\n{done.stderr}"
    return done


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
    # system site packages provide opgen's dependencies (click, cookiecutter, ...) without a download
    run(sys.executable, "-m", "venv", "--system-site-packages", venv, cwd=tmp_path)
    python = venv / ("Scripts" if os.name == "nt" else "bin") / "python"
    run(python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--force-reinstall", wheel, cwd=tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    where = run(python, "-c", "import opgen.new as n; print(n.__file__); print(n.templates_dir())", cwd=tmp_path,
                env=env).stdout.split()
    assert Path(where[0]).is_relative_to(venv), where  # the wheel's opgen, not the checkout's
    assert Path(where[1]) == Path(where[0]).parent / "_templates"

    opgen = venv / ("Scripts" if os.name == "nt" else "bin") / "opgen"
    out = tmp_path / "project"
    run(opgen, "new", REPO / "examples" / "rms_norm.yaml", "-o", out, cwd=tmp_path, env=env)
    files = snapshot(out)
    assert {"myops/ops.py", "myops/kernels/rms_norm_cpu.py", "tests/test_graph_entry.py"} <= set(files)
    reference = tmp_path / "reference"
    run(sys.executable, "-m", "opgen", "new", REPO / "examples" / "rms_norm.yaml", "-o", reference, cwd=REPO)
    assert snapshot(reference) == files
