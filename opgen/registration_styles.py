"""The two registration styles opgen generates, as a table of what each can do. Rules and templates ask the
table (`STYLES[name].keyword_only_tensors`), never compare style names."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RegistrationStyle:
    name: str
    api: str  # what the generated ops.py registers with
    demo_template: str  # the plain-cookiecutter template (templates/<demo_template>) that demonstrates it
    keyword_only_tensors: bool  # registers keyword-only Tensor arguments (custom_op: only a torch.Tag.out op)
    infers_schema: bool  # the schema is inferred from type hints unless spelled out (custom_op's schema=)
    mutation_declared_by: str  # where a hand-written registration declares a written argument


STYLES = {
    "library": RegistrationStyle("library", "torch.library.Library (FRAGMENT)", "library_op",
                                 keyword_only_tensors=True, infers_schema=False,
                                 mutation_declared_by="Tensor(a!) in the schema"),
    "custom_op": RegistrationStyle("custom_op", "torch.library.custom_op", "custom_op",
                                   keyword_only_tensors=False, infers_schema=True,
                                   mutation_declared_by="mutates_args"),
}
DEFAULT_STYLE = "library"
