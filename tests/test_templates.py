"""The cookiecutter templates on their own: plain `cookiecutter templates/<style> --no-input` renders
the demo op (RMS norm) exactly as `opgen new` does (whose tests tests/test_examples.py runs)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from demo_contexts import demo_contexts, render_json
from new_helpers import REPO, opgen, snapshot

from opgen.render.context import project_context
from opgen.render.templates import OP_TEMPLATE, PROJECT_TEMPLATE, STYLE_TEMPLATES
from opgen.spec.load import load_spec

TEMPLATES = REPO / "templates"


def test_demo_contexts_are_in_sync_with_the_context_code():
    for directory, context in demo_contexts(REPO).items():
        on_disk = (TEMPLATES / directory / "cookiecutter.json").read_text(encoding="utf-8")
        assert on_disk == render_json(context), f"run `python tests/demo_contexts.py` ({directory} is stale)"


def test_every_context_has_exactly_the_demo_keys():
    """cookiecutter merges extra_context INTO the demo dict: a key only the demo has would leak through. The
    parts that only opgen and the hook render hold empty dicts, so nothing of a demo can leak from them."""
    for directory in STYLE_TEMPLATES.values():
        demo = json.loads((TEMPLATES / directory / "cookiecutter.json").read_text())
        for spec in sorted((REPO / "examples").glob("*.yaml")):
            context = project_context(load_spec(str(spec)))
            assert set(context["_opgen"]) == set(demo["_opgen"]), spec
            for op in context["_opgen"]["ops"]:
                assert set(op) == set(demo["_opgen"]["ops"][0]), spec
    for part in (PROJECT_TEMPLATE, OP_TEMPLATE):
        context = json.loads((TEMPLATES / part / "cookiecutter.json").read_text())
        assert {key: value for key, value in context.items() if isinstance(value, dict) and value} == {
            "_jinja2_env_vars": {"lstrip_blocks": True, "trim_blocks": True}}, part


def test_style_templates_hold_only_a_demo_context():
    """One registration module (branching on the style) and one hook, in project_files: a style template is
    its demo context plus links to them."""
    for directory in STYLE_TEMPLATES.values():
        template = TEMPLATES / directory
        assert sorted(p.name for p in template.iterdir()) == ["cookiecutter.json", "hooks",
                                                               "{{cookiecutter.project_dir}}"], directory
        assert os.readlink(template / "hooks") == f"../{PROJECT_TEMPLATE}/hooks"
        assert os.readlink(template / "{{cookiecutter.project_dir}}") == f"../{PROJECT_TEMPLATE}/{{{{cookiecutter.project_slug}}}}"


@pytest.mark.parametrize("style", ["custom_op", "library"])
@pytest.mark.slow
def test_plain_cookiecutter_renders_the_demo_like_opgen(tmp_path, style):
    config = tmp_path / "config.yaml"
    config.write_text(f"replay_dir: {tmp_path / 'replay'}\ncookiecutters_dir: {tmp_path / 'cc'}\n")
    out = tmp_path / "out"  # TMPDIR below: cookiecutter leaves the hook script it ran there
    done = subprocess.run([sys.executable, "-m", "cookiecutter", f"templates/{STYLE_TEMPLATES[style]}",
                           "--no-input", "-o", str(out)], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "COOKIECUTTER_CONFIG": str(config), "TMPDIR": str(tmp_path)}, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    project = out / f"myops_{style}"
    reference = tmp_path / "reference"
    assert opgen("new", "examples/rms_norm.yaml", "-o", str(reference), "--style", style,
                 cwd=REPO).returncode == 0
    expected = {k: v for k, v in snapshot(reference).items() if not k.startswith(".opgen/")}
    # byte for byte what opgen writes, whose tests tests/test_examples.py runs in both styles
    assert snapshot(project) == expected


def test_both_demos_render_side_by_side_and_plain_opgen_new_adopts_them(tmp_path):
    """The two style templates render into their own directories, and the README's `opgen new` (no
    arguments) regenerates such a project: its files are exactly what opgen would write, so it is no
    foreign directory."""
    config = tmp_path / "config.yaml"
    config.write_text(f"replay_dir: {tmp_path / 'replay'}\ncookiecutters_dir: {tmp_path / 'cc'}\n")
    # TMPDIR: cookiecutter leaves the rendered hook script it ran in the temp directory
    env = {**os.environ, "COOKIECUTTER_CONFIG": str(config), "TMPDIR": str(tmp_path)}
    for directory in ("custom_op", "library_op"):
        done = subprocess.run([sys.executable, "-m", "cookiecutter", str(TEMPLATES / directory), "--no-input"],
                              cwd=tmp_path, capture_output=True, text=True, env=env, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
    for style in ("custom_op", "library"):
        project = tmp_path / f"myops_{style}"
        before = snapshot(project)
        done = opgen("new", cwd=project)
        assert done.returncode == 0, done.stderr
        assert (project / ".opgen" / "manifest.json").is_file()
        assert {k: v for k, v in snapshot(project).items() if not k.startswith(".opgen/")} == before


def test_templates_have_no_stray_files():
    names = {p.name for p in TEMPLATES.rglob("*")}
    assert not {n for n in names if n.endswith((".pyc", ".orig", ".rej")) or n == "__pycache__"}
    from opgen.op_plugin.render import OP_TEMPLATE as OP_PLUGIN_OP
    from opgen.op_plugin.render import PROJECT_TEMPLATE as OP_PLUGIN

    assert sorted(p.name for p in TEMPLATES.iterdir()) == sorted([*STYLE_TEMPLATES.values(), PROJECT_TEMPLATE, OP_TEMPLATE,
                                                                  OP_PLUGIN, OP_PLUGIN_OP])


def test_templates_dir_is_found():
    from opgen.render.templates import templates_dir

    assert Path(templates_dir()).resolve() == TEMPLATES.resolve()


def test_tool_caches_left_inside_a_template_are_no_template(tmp_path):
    """ruff or pytest run on a template file in a checkout leave a cache beside it (binary files): rendering
    ignores it, as the wheel build leaves it out."""
    from opgen.render.templates import render_package

    templates = tmp_path / "templates"
    shutil.copytree(TEMPLATES, templates, symlinks=True)
    spec = load_spec(str(REPO / "examples" / "rms_norm.yaml"))
    clean = [(f.path, f.content) for f in render_package(spec, templates)]
    for name in (".ruff_cache", ".pytest_cache", "__pycache__"):
        cache = templates / PROJECT_TEMPLATE / "{{cookiecutter.project_slug}}" / "tests" / name / "0.1"
        cache.mkdir(parents=True)
        (cache / "12345").write_bytes(b"\x80\x81\xff binary")
    assert [(f.path, f.content) for f in render_package(spec, templates)] == clean


def test_compiled_templates_are_kept_on_disk_and_a_torn_or_unwritable_cache_only_costs_a_compile(tmp_path, monkeypatch):
    """`opgen new` keeps jinja's compiled templates in `<opgen cache>/templates/`: a later process loads them instead
    of compiling; a torn cache file is compiled again (the same files come out), an unwritable cache is no error."""
    cache = tmp_path / "cache"
    spec = str(REPO / "examples" / "rms_norm.yaml")
    monkeypatch.setenv("OPGEN_CACHE_DIR", str(cache))
    assert opgen("new", spec, "-o", str(tmp_path / "first")).returncode == 0
    kept = sorted((cache / "templates").glob("jinja2-*/*"))
    assert len(kept) >= 10, kept
    # a new process (nothing in memory) compiles none of the templates: it loads each from disk
    assert _templates_compiled_by_opgen_new(spec, tmp_path / "second") == 0
    # planted: the kept file torn (as a machine going down leaves it): compiled again, the same project comes out
    for path in kept:
        path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])
    assert opgen("new", spec, "-o", str(tmp_path / "torn")).returncode == 0
    assert snapshot(tmp_path / "torn") == snapshot(tmp_path / "first")
    assert _templates_compiled_by_opgen_new(spec, tmp_path / "third") == 0, "the torn files were not written again"
    # a cache folder that cannot be made (a file where it would be): no error, the same project
    blocked = tmp_path / "blocked"
    blocked.write_text("not a folder")
    monkeypatch.setenv("OPGEN_CACHE_DIR", str(blocked))
    done = opgen("new", spec, "-o", str(tmp_path / "blocked_out"))
    assert done.returncode == 0, done.stderr
    assert snapshot(tmp_path / "blocked_out") == snapshot(tmp_path / "first")


def _templates_compiled_by_opgen_new(spec: str, out: Path) -> int:
    """How many templates (not file names) jinja compiled in one new process running `opgen new SPEC -o OUT`."""
    script = ("import jinja2, sys\nfrom opgen.cli import main\ncompiled = []\noriginal = jinja2.Environment.compile\n"
              "def compile(self, source, name=None, filename=None, *args, **kwargs):\n"
              "    compiled.append(filename)\n    return original(self, source, name, filename, *args, **kwargs)\n"
              "jinja2.Environment.compile = compile\n"
              "try:\n    main(sys.argv[1:], prog_name='opgen')\nexcept SystemExit as done:\n    assert not done.code\n"
              "print(sum(1 for name in compiled if name), file=sys.__stdout__)\n")
    done = subprocess.run([sys.executable, "-c", script, "new", spec, "-o", str(out)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split()[-1])
