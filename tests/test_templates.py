"""The cookiecutter templates on their own: plain `cookiecutter templates/<style> --no-input` renders
the demo op (RMS norm) exactly as `opgen new` does, and the rendered project's tests pass."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from new_helpers import REPO, opgen, run_generated_tests, snapshot

from opgen.new import OP_TEMPLATE, PROJECT_TEMPLATE, STYLE_TEMPLATES
from opgen.render.context import project_context
from opgen.render.demo import demo_contexts, render_json
from opgen.spec.load import load_spec

TEMPLATES = REPO / "templates"


def test_demo_contexts_are_in_sync_with_the_context_code():
    for directory, context in demo_contexts(REPO).items():
        on_disk = (TEMPLATES / directory / "cookiecutter.json").read_text(encoding="utf-8")
        assert on_disk == render_json(context), f"run `python -m opgen.render.demo` ({directory} is stale)"


def test_every_context_has_exactly_the_demo_keys():
    """cookiecutter merges extra_context INTO the demo dict: a key only the demo has would leak through."""
    demo = json.loads((TEMPLATES / OP_TEMPLATE / "cookiecutter.json").read_text())
    for spec in sorted((REPO / "examples").glob("*.yaml")):
        context = project_context(load_spec(str(spec)))
        assert set(context["_opgen"]) == set(demo["_opgen"]), spec
        for op in context["_opgen"]["ops"]:
            assert set(op) == set(demo["_op"]), spec


def test_style_templates_hold_only_the_registration_module():
    """Everything the styles share lives once, in project_files; the hooks are the same script."""
    hooks = set()
    for directory in STYLE_TEMPLATES.values():
        files = sorted(k for k in snapshot(TEMPLATES / directory))
        assert files == ["cookiecutter.json", "hooks/post_gen_project.py",
                         "{{cookiecutter.project_slug}}/{{cookiecutter.project_slug}}/ops.py"], directory
        hooks.add((TEMPLATES / directory / "hooks" / "post_gen_project.py").read_text())
    assert len(hooks) == 1


@pytest.mark.parametrize("style", ["custom_op", "library"])
def test_plain_cookiecutter_renders_the_demo_like_opgen_and_its_tests_pass(tmp_path, style):
    config = tmp_path / "config.yaml"
    config.write_text(f"replay_dir: {tmp_path / 'replay'}\ncookiecutters_dir: {tmp_path / 'cc'}\n")
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "cookiecutter", f"templates/{STYLE_TEMPLATES[style]}",
                           "--no-input", "-o", str(out)], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "COOKIECUTTER_CONFIG": str(config)}, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    project = out / "myops"
    reference = tmp_path / "reference"
    assert opgen("new", "examples/rms_norm.yaml", "-o", str(reference), "--style", style,
                 cwd=REPO).returncode == 0
    expected = {k: v for k, v in snapshot(reference).items() if not k.startswith(".opgen/")}
    assert snapshot(project) == expected
    results = run_generated_tests([project], tmp_path / "junit.xml")
    outcomes = sorted(r["outcome"] for r in results.values())
    # 4 tiers + opcheck with requires_grad + gradcheck (the demo's `autograd:`); NPU and CUDA skip here
    assert outcomes == ["passed"] * 11 + ["skipped"] * 2, results


def test_templates_have_no_stray_files():
    names = {p.name for p in TEMPLATES.rglob("*")}
    assert not {n for n in names if n.endswith((".pyc", ".orig", ".rej")) or n == "__pycache__"}
    assert sorted(p.name for p in TEMPLATES.iterdir()) == sorted([*STYLE_TEMPLATES.values(), PROJECT_TEMPLATE, OP_TEMPLATE])


def test_templates_dir_is_found():
    from opgen.new import templates_dir

    assert Path(templates_dir()).resolve() == TEMPLATES.resolve()
