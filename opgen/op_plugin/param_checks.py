"""The parameter checks an op's output rules imply, for the kernel (`TORCH_CHECK`) and the Meta (`torch._check`).

op-plugin's pull-request checklist asks for parameter checks; the rules say which: `x.shape[1]` needs a rank of
at least 2, `replace_size(x.shape, dim, k)` or `x.size(dim)` a dim in range, `n // parts` a non-zero `parts`,
`from_code(dst_type)` a code of the spec's `dtype_codes`.
Only arguments are checked (an earlier output's value is the kernel's own), each once, in the rules' order.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..spec.semantics_ir import BinOp, Const, FromCode, Name, SizeAt, SizeEdit, TensorAttr

OPS_ERROR = "OPS_ERROR(ErrCode::PARAM)"  # op-plugin's error suffix for a bad parameter


@dataclass(frozen=True)
class ParamCheck:
    cpp: str  # the condition in C++
    py: str  # the condition in Python
    message: str

    def torch_check(self, op: str) -> str:
        return f'TORCH_CHECK({self.cpp}, "{op}: {self.message}" + {OPS_ERROR});'

    def meta_check(self, op: str) -> str:
        """The statement, wrapped within 120 columns in a function body (later lines carry their indentation)."""
        from ..render.pyformat import call, string_value

        message = f"{op}: {self.message}"
        return call("torch._check", [self.py, "lambda: " + string_value(message, "        ", "lambda: ", ",")], "    ")


def param_checks(outputs) -> list[ParamCheck]:
    """The checks of every rule of `outputs` (OutputSpecs): ranks first (a dim check reads the rank), then the rest."""
    ranks: dict[str, int] = {}
    others: list[ParamCheck] = []
    for out in outputs:
        for rule in out.rules:
            for node in rule.node.walk():
                _visit(node, ranks, others)
    found = [ParamCheck(f"{t}.dim() >= {n}", f"{t}.dim() >= {n}", f"{t} must have at least {n} dimension"
                        + ("s" if n > 1 else "")) for t, n in ranks.items()]
    for check in others:
        if check not in found:
            found.append(check)
    return found


def _visit(node, ranks: dict[str, int], others: list[ParamCheck]) -> None:
    if isinstance(node, SizeAt):
        _dim_use(node.obj, node.index, ranks, others)
    elif isinstance(node, SizeEdit) and node.edit != "insert" and isinstance(node.shape, TensorAttr) and (
            node.shape.attr == "shape"):
        _dim_use(node.shape.obj, node.dim, ranks, others)
    elif isinstance(node, FromCode) and _argument(node.code, "int"):
        others.append(_code_check(node))
    elif isinstance(node, BinOp) and node.op in ("//", "%", "/") and _argument(node.right, "int"):
        name = node.right.name
        others.append(ParamCheck(f"{name} != 0", f"{name} != 0", f"{name} must not be 0 (the output size divides "
                                                                     "by it)"))


def _code_check(node: FromCode) -> ParamCheck:
    """The code is one the spec's `dtype_codes` lists; an optional one (read where present) may also be None."""
    name, codes = node.code.name, [code for code, _ in node.table]
    listed = ", ".join(f"{code} ({dtype})" for code, dtype in node.table)
    value = f"{name}.value()" if node.code.deref else name
    cpp = " || ".join(f"{value} == {code}" for code in codes)
    py = f"{name} in ({', '.join(map(str, codes))}{',' if len(codes) == 1 else ''})"
    if node.code.deref:
        cpp, py = f"!{name}.has_value() || {cpp}", f"{name} is None or {py}"
    return ParamCheck(cpp, py, f"{name} must be one of the dtype codes {listed}")


def _dim_use(tensor, dim, ranks: dict[str, int], others: list[ParamCheck]) -> None:
    """`tensor`'s size at `dim`: a constant dim needs a rank, an int argument a dim in range."""
    if not _argument(tensor, "tensor"):
        return
    t = tensor.name
    if isinstance(dim, Const) and isinstance(dim.value, int) and not isinstance(dim.value, bool):
        need = dim.value + 1 if dim.value >= 0 else -dim.value
        ranks[t] = max(ranks.get(t, 0), need)
    elif _argument(dim, "int"):
        d = dim.name
        others.append(ParamCheck(f"{d} >= -{t}.dim() && {d} < {t}.dim()", f"-{t}.dim() <= {d} < {t}.dim()",
                                 f"{d} must be a dim of {t} (in [-{t}.dim(), {t}.dim()))"))


def _argument(node, kind: str) -> bool:
    """An argument (not an earlier output) of that kind, always present."""
    return (isinstance(node, Name) and not node.output and node.ty.kind == kind and not node.ty.optional)
