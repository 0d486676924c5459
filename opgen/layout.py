"""What a generated package looks like: where each op's files are, and the names its code binds.

One home for these facts: the template context, the templates' file names (through the context), the drift
check and the spec loader (which refuses argument names that would shadow a binding) all read them here.
"""

from __future__ import annotations

from dataclasses import dataclass

# Names the generated code (ops.py, the kernels, the tests) reads inside functions whose parameters are an op's
# arguments: an argument must not shadow them. Names starting with "_" are refused too.
BOUND_NAMES = frozenset({"torch", "lib", "pytest", "math"})
# Project files opgen creates and then leaves to the user: the project's metadata (its version, dependencies and
# tool settings are the user's to change; opgen's own settings live in its pytest plugin, not there).
USER_PROJECT_FILES = frozenset({"pyproject.toml"})


@dataclass(frozen=True)
class OpFiles:
    """The files of one op in a generated package: paths from the project root, function names."""

    package: str
    stem: str  # the op's name, with its overload: `scatter_update_`, `add_out`
    device: str  # "npu", "cuda" or "cpu"
    todo_fake: bool  # the spec cannot describe the fake: the user writes it

    @property
    def cpu_kernel(self) -> str:
        """The CPU kernel's function (and module) name."""
        return f"{self.stem}_cpu"

    @property
    def device_kernel(self) -> str | None:
        return f"{self.stem}_{self.device}" if self.device != "cpu" else None

    @property
    def fake(self) -> str:
        return f"{self.stem}_fake"

    @property
    def cpu_kernel_path(self) -> str:
        return f"{self.package}/kernels/{self.cpu_kernel}.py"

    @property
    def device_kernel_path(self) -> str | None:
        return f"{self.package}/kernels/{self.device_kernel}.py" if self.device_kernel else None

    @property
    def fake_path(self) -> str:
        return f"{self.package}/fakes/{self.stem}.py"

    def owned(self) -> list[tuple[str, str]]:
        """(path, function name) of every function of the op that the user owns (opgen never rewrites them)."""
        files = [(self.cpu_kernel_path, self.cpu_kernel)]
        if self.device_kernel:
            files.append((self.device_kernel_path, self.device_kernel))
        if self.todo_fake:
            files.append((self.fake_path, self.fake))
        return files


def op_stem(schema) -> str:
    """The op's name with its overload (`add.out` -> `add_out`): its files and functions are named after it."""
    return schema.name + (f"_{schema.overload}" if schema.overload else "")


def op_files(spec, op) -> OpFiles:
    """The files of `op` (an OpSpec) in the package of `spec` (a ProjectSpec)."""
    return OpFiles(spec.package, op_stem(op.schema), spec.device, bool(op.missing_semantics))
