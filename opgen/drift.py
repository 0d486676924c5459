"""Drift between the spec and the files the user owns: a kernel or TODO fake whose function no longer
takes the schema's arguments (an argument added, renamed or removed in opgen.yaml after the file was
created). opgen never rewrites those files; `opgen new` warns, and the generated test fails likewise."""

from __future__ import annotations

import ast
from pathlib import Path

from .layout import op_files
from .spec.model import OpSpec, ProjectSpec


def schema_parameters(op: OpSpec) -> str:
    """The parameters the schema asks for, as `(x, bias, *, alpha)`."""
    positional = [a.name for a in op.schema.positional]
    keyword = [a.name for a in op.schema.kwarg_only]
    return "(" + ", ".join(positional + (["*"] + keyword if keyword else [])) + ")"


def drift_warnings(out_dir: str | Path, spec: ProjectSpec, spec_name: str) -> list[str]:
    """One warning per existing user-owned function whose parameters differ from its op's schema."""
    warnings = []
    for op in spec.ops:
        want = schema_parameters(op)
        for path, name in op_files(spec, op).owned():
            try:
                tree = ast.parse((Path(out_dir) / path).read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
                continue  # absent (created now) or unreadable: nothing to compare
            function = next((node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == name),
                            None)
            if function is None:
                continue
            arguments = function.args
            positional = [a.arg for a in arguments.posonlyargs + arguments.args]
            keyword = [a.arg for a in arguments.kwonlyargs]
            have = "(" + ", ".join(positional + (["*"] + keyword if keyword else [])) + ")"
            if have != want:
                warnings.append(f"{path}: def {name}{have} no longer matches ops[{op.index}].schema in {spec_name}, "
                                f"which takes {want}: kept yours; update its signature")
    return warnings
