"""The demo contexts in the templates' cookiecutter.json files, made from examples/rms_norm.yaml.

`python -m opgen.render.demo` rewrites them after a change to the context; a test checks they match,
so `cookiecutter templates/custom_op --no-input` always renders what `opgen new` would.
"""

from __future__ import annotations

import json
from pathlib import Path

JINJA = {"trim_blocks": True, "lstrip_blocks": True}
DEMO_SPEC = "examples/rms_norm.yaml"


def demo_contexts(repo: Path) -> dict[str, dict]:
    """cookiecutter.json content per template directory name."""
    from ..new import OP_TEMPLATE, PROJECT_TEMPLATE, STYLE_TEMPLATES
    from ..spec.load import load_spec_text
    from .context import project_context

    text = (repo / DEMO_SPEC).read_text(encoding="utf-8")
    contexts = {}
    for style, directory in sorted(STYLE_TEMPLATES.items()):
        context = project_context(load_spec_text(text, DEMO_SPEC, style=style))
        # the outer directory of a plain `cookiecutter` run, one per style, so both demos fit side by side
        contexts[directory] = {**context, "project_dir": f"{context['project_slug']}_{style}", "_jinja2_env_vars": JINJA}
        if style == "library":
            contexts[PROJECT_TEMPLATE] = {**context, "_jinja2_env_vars": JINJA}
            contexts[OP_TEMPLATE] = {**context, "_op": context["_opgen"]["ops"][0], "_jinja2_env_vars": JINJA}
    return contexts


def render_json(context: dict) -> str:
    return json.dumps(context, indent=2, sort_keys=True) + "\n"


def main() -> None:
    repo = Path(__file__).resolve().parents[2]
    for directory, context in demo_contexts(repo).items():
        (repo / "templates" / directory / "cookiecutter.json").write_text(render_json(context), encoding="utf-8")


if __name__ == "__main__":
    main()
