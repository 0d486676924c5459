"""The templates' cookiecutter.json files. A user-facing template (a style, op_plugin) holds a demo context,
so that plain `cookiecutter templates/<name> --no-input` renders a demo op exactly as opgen would render
it; the parts that opgen (or a style template's hook) renders with a full context hold only its keys.

    python tests/demo_contexts.py     # rewrite them after a change to a template context

tests/test_templates.py and tests/test_op_plugin.py check that the files on disk match.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from opgen.op_plugin import render as op_plugin
from opgen.render.context import project_context
from opgen.render.templates import OP_TEMPLATE, PROJECT_TEMPLATE, STYLE_TEMPLATES
from opgen.spec.load import load_spec_text

JINJA = {"trim_blocks": True, "lstrip_blocks": True}
# the op_plugin demo's kernel carries a licence year: the demo is rendered as of this date (reproducible-builds
# convention, opgen.op_plugin.kernel.licence_year), and tests compare opgen's output under the same
DEMO_EPOCH = "1767225600"  # 2026-01-01
EXTENSIONS = ["opgen.render.pyformat.PythonFormat"]  # the templates' Python formatter
PACKAGE_DEMO = "examples/rms_norm.yaml"
OP_PLUGIN_DEMO = "examples/op_plugin/rms_norm.yaml"


def demo_contexts(repo: Path = REPO) -> dict[str, dict]:
    """cookiecutter.json content per template directory name."""
    text = (repo / PACKAGE_DEMO).read_text(encoding="utf-8")
    contexts = {}
    for style, directory in sorted(STYLE_TEMPLATES.items()):
        context = project_context(load_spec_text(text, PACKAGE_DEMO, style=style))
        # the outer directory of a plain `cookiecutter` run, one per style, so both demos fit side by side
        contexts[directory] = {**context, "project_dir": f"{context['project_slug']}_{style}", "_jinja2_env_vars": JINJA,
                               "_extensions": EXTENSIONS}
    # cookiecutter merges extra_context into these dicts: empty ones leave nothing of a demo to leak through
    contexts[PROJECT_TEMPLATE] = {"project_slug": "", "_opgen": {}, "_jinja2_env_vars": JINJA, "_extensions": EXTENSIONS}
    contexts[OP_TEMPLATE] = {"project_slug": "", "_opgen": {}, "_op": {}, "_jinja2_env_vars": JINJA,
                             "_extensions": EXTENSIONS}
    text = (repo / OP_PLUGIN_DEMO).read_text(encoding="utf-8")
    saved = os.environ.get("SOURCE_DATE_EPOCH")
    os.environ["SOURCE_DATE_EPOCH"] = DEMO_EPOCH
    try:
        context = op_plugin.project_context(load_spec_text(text, OP_PLUGIN_DEMO))
    finally:
        if saved is None:
            del os.environ["SOURCE_DATE_EPOCH"]
        else:
            os.environ["SOURCE_DATE_EPOCH"] = saved
    contexts[op_plugin.PROJECT_TEMPLATE] = {**context, "_jinja2_env_vars": JINJA}
    contexts[op_plugin.OP_TEMPLATE] = {**context, "_op": context["_opgen"]["ops"][0], "_jinja2_env_vars": JINJA}
    return contexts


def render_json(context: dict) -> str:
    return json.dumps(context, indent=2, sort_keys=True) + "\n"


def main() -> None:
    for directory, context in demo_contexts().items():
        (REPO / "templates" / directory / "cookiecutter.json").write_text(render_json(context), encoding="utf-8")


if __name__ == "__main__":
    main()
