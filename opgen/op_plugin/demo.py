"""The demo contexts in templates/op_plugin*/cookiecutter.json, made from examples/op_plugin/rms_norm.yaml.

`python -m opgen.op_plugin.demo` rewrites them after a change to the context; a test checks they match,
so `cookiecutter templates/op_plugin --no-input` renders what `opgen new --target op_plugin` would.
"""

from __future__ import annotations

from pathlib import Path

from ..render.demo import JINJA, render_json

DEMO_SPEC = "examples/op_plugin/rms_norm.yaml"
from .render import OP_TEMPLATE, PROJECT_TEMPLATE


def demo_contexts(repo: Path) -> dict[str, dict]:
    from ..spec.load import load_spec_text
    from .render import project_context

    text = (repo / DEMO_SPEC).read_text(encoding="utf-8")
    context = project_context(load_spec_text(text, DEMO_SPEC))
    return {PROJECT_TEMPLATE: {**context, "_jinja2_env_vars": JINJA},
            OP_TEMPLATE: {**context, "_op": context["_opgen"]["ops"][0], "_jinja2_env_vars": JINJA}}


def main() -> None:
    repo = Path(__file__).resolve().parents[2]
    for directory, context in demo_contexts(repo).items():
        (repo / "templates" / directory / "cookiecutter.json").write_text(render_json(context), encoding="utf-8")


if __name__ == "__main__":
    main()
