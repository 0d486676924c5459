"""Render the per-op files (kernels, TODO fakes) for a plain `cookiecutter` run.

cookiecutter renders one file per template file, so the files that exist once per op come from the
sibling template `op_files`, rendered once per op into this project. (`opgen new` does the same itself
and does not run this hook.)
"""

import json
import os
import tempfile

from cookiecutter.main import cookiecutter

TEMPLATES = os.path.dirname({{ cookiecutter._repo_dir | tojson }})
CONTEXT = json.loads({{ cookiecutter | tojson | tojson }})


def main() -> None:
    project = os.getcwd()
    extra = {"project_slug": CONTEXT["project_slug"], "_opgen": CONTEXT["_opgen"]}
    with tempfile.TemporaryDirectory() as tmp:
        config = {"replay_dir": os.path.join(tmp, "replay"), "cookiecutters_dir": os.path.join(tmp, "cc")}
        for op in CONTEXT["_opgen"]["ops"]:
            cookiecutter(os.path.join(TEMPLATES, "op_files"), no_input=True, extra_context={**extra, "_op": op},
                         output_dir=os.path.dirname(project), overwrite_if_exists=True, default_config=config)


if __name__ == "__main__":
    main()
