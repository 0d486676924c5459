"""Tier 2 with `autograd:`: opcheck with requires_grad=True and gradcheck of the backward formula.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.autograd.gradcheck import GradcheckError

from .compiled import opcheck
from .failures import CheckFailed, skip
from .input_variants import variants
from .op import Call, Op
from .values import clone, tensor_map, tensors


def _floating(call: Call) -> bool:
    return any(t.is_floating_point() for t in tensors(call))



def _differentiable(op: Op, calls: Sequence[Call]) -> list[Call]:
    found = [call for call in calls if _floating(call)]
    if not found:
        skip(f"no example of {op.qualname} has a floating-point tensor input, so there is nothing to differentiate: "
             f"add one to {op.field}.examples")
    return found



def assert_backward_raises_without_formula(op: Op, calls: Sequence[Call], writes_tracked: bool) -> None:
    """Without `autograd:`, backward from what a gradient reaches (the fresh outputs, and with `writes_tracked`
    (Library style) the written arguments) raises torch's "no autograd formula was registered": no kernel, CPU or
    device, may be differentiated (a Python CPU kernel made of torch ops silently would be). Compiled with inputs
    requiring grad, the op raises it too, as custom_op does (AOT autograd would otherwise detach its outputs)."""
    call = _differentiable(op, calls)[0]
    if _backward_raises_in_eager(op, call, writes_tracked):
        _assert_compiled_raises_without_formula(op, call)



def _grad_leaves(op: Op, call: Call) -> Call:
    def grad_leaf(name: str, t: torch.Tensor) -> torch.Tensor:
        leaf = t.detach().clone().requires_grad_(t.is_floating_point() or t.is_complex())
        return leaf.clone() if name in op.written else leaf  # written in place: not a leaf
    return {name: tensor_map(lambda t, name=name: grad_leaf(name, t), value) for name, value in call.items()}



def _backward_raises_in_eager(op: Op, call: Call, writes_tracked: bool) -> bool:
    """The eager half of assert_backward_raises_without_formula; whether a fresh output carried a gradient (then
    the compiled op is tried too)."""
    call = _grad_leaves(op, call)
    try:
        result = op(call)
    except RuntimeError as error:  # torch refuses the call itself: an out= op given inputs requiring grad
        if "don't support automatic differentiation" in str(error):
            return False
        raise
    written = tensors([call[name] for name in op.written])
    outputs = [t for t in tensors(result) if not any(t is w for w in written)]  # not a returned argument
    reached = [t for t in outputs + (written if writes_tracked else []) if t.requires_grad]
    if not reached:
        skip(f"no output of {op.qualname} can carry a gradient ({_why_no_gradient(outputs, written, writes_tracked)})")
    try:
        torch.autograd.backward(reached, [torch.ones_like(t) for t in reached])
    except RuntimeError as error:
        if "no autograd formula was registered" in str(error):
            return any(t.requires_grad for t in outputs)
        raise CheckFailed(f"backward through {op.qualname} raised {error}, not torch's \"no autograd formula was "
                          "registered\"") from error
    raise CheckFailed(f"{op.qualname} has no backward ({op.field}.autograd in opgen.yaml), but a backward through it "
                      "ran: its CPU kernel was differentiated through its torch ops, which a device kernel would not "
                      "be; regenerate ops.py with `opgen new`")


def _why_no_gradient(outputs: list, written: list, writes_tracked: bool) -> str:
    why = []
    untracked = sorted({str(t.dtype).removeprefix("torch.") for t in outputs
                        if not (t.is_floating_point() or t.is_complex())})
    if untracked:
        why.append(f"it returns {' and '.join(untracked)} tensors, which carry none")
    if written and not writes_tracked:
        why.append("custom_op attaches none to written arguments")
    return "; ".join(why) or "none of its outputs requires grad"


def _assert_compiled_raises_without_formula(op: Op, call: Call) -> None:
    """torch.compile (aot_eager, fullgraph) of the op on inputs requiring grad raises "no autograd formula was
    registered", as the eager backward does: AOT autograd traces an op below a fallthrough at Autograd with no input
    requiring grad, and would silently detach its outputs (no gradient, no error)."""
    torch.compiler.reset()
    compiled = torch.compile(op.as_declared(), backend="aot_eager", fullgraph=True)
    try:
        result = compiled(**_grad_leaves(op, call))
    except Exception as error:  # Dynamo wraps it (TorchRuntimeError, BackendCompilerFailed)
        if "no autograd formula was registered" in str(error) or not _fake_runs(op, call):
            return  # (a fake that fails without gradients too, a TODO fake: the fake tiers say so)
        raise CheckFailed(f"torch.compile of {op.qualname} on inputs requiring grad raised {type(error).__name__}: "
                          f"{error}, not torch's \"no autograd formula was registered\"") from error
    finally:
        torch.compiler.reset()
    detached = not any(t.requires_grad for t in tensors(result))
    raise CheckFailed(f"{op.qualname} has no backward ({op.field}.autograd in opgen.yaml), but torch.compile of it on "
                      "inputs requiring grad ran" + (" and detached its outputs (a silent zero gradient)" if detached
                                                     else "") + ": regenerate the package with `opgen new`")



def _fake_runs(op: Op, call: Call) -> bool:
    """The op's fake function takes `call` (fake copies of its tensors, none requiring grad)."""
    with FakeTensorMode() as mode:
        try:
            op(tensor_map(mode.from_tensor, call))
        except Exception:  # noqa: BLE001  (any error: the fake cannot trace this call)
            return False
    return True



def opcheck_with_requires_grad(op: Op, calls: Sequence[Call]) -> None:
    """opcheck with requires_grad=True on every floating-point tensor (fresh leaves): the Autograd registration."""
    opcheck(op, [tensor_map(lambda t: t.detach().clone().requires_grad_(t.is_floating_point()), call)
                 for call in _differentiable(op, calls)])



GRADCHECK_ELEMENTS = 4096  # the most floating elements of a variant gradcheck takes (it costs a call per element)



def gradcheck(op: Op, examples: Callable[[int], list[Call]] | Sequence[Call]) -> None:
    """torch.autograd.gradcheck of the backward formula in float64, every floating-point tensor an input, on every
    example and (`examples` the examples function) on its variants with a defaulted scalar moved or a size changed
    (input_variants) that the kernel takes: a formula ignoring a scalar, or right at one size only, fails. Then, on
    each example, the backward with a non-contiguous grad_output and with each subset of the inputs requiring grad
    (a frozen weight) must give the gradients it gives with all of them and a contiguous one."""
    if callable(examples):
        calls = [(f"examples[{number}]", call, False) for number, call in enumerate(examples(0))]
        calls += [(variant.label, variant.call, True) for variant in variants(op, examples)
                  if variant.kind in ("default", "size", "size-edge") and _small_and_nonempty(variant.call)]
    else:
        calls = [(f"examples[{number}]", call, False) for number, call in enumerate(examples)]
    differentiable = {id(call) for call in _differentiable(op, [call for _, call, _ in calls])}
    for label, call, variant in calls:
        if id(call) not in differentiable:
            continue
        if variant and not _takes(op, call):  # not an input of the op: the oracle tier judges that
            continue
        try:
            torch.autograd.gradcheck(*_gradcheck_inputs(op, call))
        except GradcheckError as error:
            raise CheckFailed(f"the backward formula of {op.field}.autograd in opgen.yaml disagrees with finite "
                              f"differences on {op.field}.{label}: {error}", "wrong-gradient") from error
    for label, call, variant in calls:
        if not variant and id(call) in differentiable:
            _assert_backward_on_subsets(op, label, call)



SUBSET_INPUTS = 4  # the most differentiable inputs whose subsets requiring grad are each tried



def _assert_backward_on_subsets(op: Op, label: str, call: Call) -> None:
    """The gradients with every floating input requiring grad and contiguous grad_outputs, against those with a
    non-contiguous grad_output and each non-empty subset of the inputs requiring grad (the others frozen): a
    backward that `.view`s its grad_output, or takes another path for a frozen weight, shows."""
    fn, inputs = _gradcheck_inputs(op, call)
    if len(inputs) > SUBSET_INPUTS:
        return
    g = torch.Generator().manual_seed(0)
    outputs = tensors(fn(*inputs))
    carried = [k for k, t in enumerate(outputs) if t.requires_grad]
    if not carried:
        return
    strided = {k: _non_contiguous_like(outputs[k], g) for k in carried}
    full = torch.autograd.grad([outputs[k] for k in carried], inputs, [strided[k].contiguous() for k in carried],
                               allow_unused=True)
    names = _input_names(call)
    for mask in range(1, 2 ** len(inputs)):
        chosen = [i for i in range(len(inputs)) if mask >> i & 1]
        leaves = [t.detach().requires_grad_(i in chosen) for i, t in enumerate(inputs)]
        where = (f"{op.field}.{label} with a non-contiguous grad_output and only "
                 f"{', '.join(names[i] for i in chosen)} requiring grad" if len(chosen) < len(inputs)
                 else f"{op.field}.{label} with a non-contiguous grad_output")
        try:
            found = tensors(fn(*leaves))
            pairs = [(found[k], strided[k]) for k in carried if found[k].requires_grad]
            got = torch.autograd.grad([out for out, _ in pairs], [leaves[i] for i in chosen],
                                      [grad for _, grad in pairs], allow_unused=True) if pairs else [None] * len(chosen)
        except Exception as error:
            raise CheckFailed(f"the backward formula of {op.field}.autograd in opgen.yaml raises on {where}: "
                              f"{type(error).__name__}: {error}", "wrong-gradient") from error
        for i, grad in zip(chosen, got, strict=True):
            if not _same_gradient(grad, full[i], inputs[i]):
                raise CheckFailed(f"the backward formula of {op.field}.autograd in opgen.yaml gives another gradient "
                                  f"of {names[i]} on {where} than with every input requiring grad "
                                  "and a contiguous grad_output", "wrong-gradient")



def _same_gradient(a: torch.Tensor | None, b: torch.Tensor | None, like: torch.Tensor) -> bool:
    """None is a zero gradient."""
    a = torch.zeros_like(like) if a is None else a
    b = torch.zeros_like(like) if b is None else b
    return a.shape == b.shape and torch.allclose(a, b, rtol=1e-7, atol=1e-9)



def _input_names(call: Call) -> list[str]:
    """The names of the differentiated tensors of `call`, in `_gradcheck_inputs`' order (`xs[1]` in a list)."""
    def floating(t) -> bool:
        return isinstance(t, torch.Tensor) and t.is_floating_point()
    names = [name for name, value in call.items() if floating(value)]
    return names + [f"{name}[{position}]" for name, value in call.items() if isinstance(value, (list, tuple))
                    for position, item in enumerate(value) if floating(item)]



def _non_contiguous_like(t: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """Random values of `t`'s shape and dtype, transposed in memory (its last two dims swapped), or for one dim in
    every other element of a wider buffer; a scalar is contiguous."""
    if not t.dim():
        return torch.randn((), generator=g, dtype=torch.float64).to(t.dtype)
    if t.dim() >= 2:
        swapped = (*t.shape[:-2], t.shape[-1], t.shape[-2])
        return torch.randn(swapped, generator=g, dtype=torch.float64).to(t.dtype).transpose(-1, -2)
    return torch.randn(2 * t.shape[0], generator=g, dtype=torch.float64).to(t.dtype)[::2]



def _takes(op: Op, call: Call) -> bool:
    """The CPU kernel runs on `call` without raising."""
    try:
        op(clone(call))
    except Exception:  # noqa: BLE001  (any error: the call is not one the op takes)
        return False
    return True



def _small_and_nonempty(call: Call) -> bool:
    floating = [t for t in tensors(call) if t.is_floating_point()]
    return all(t.numel() for t in tensors(call)) and sum(t.numel() for t in floating) <= GRADCHECK_ELEMENTS



def _gradcheck_inputs(op: Op, call: Call) -> tuple[Callable, tuple]:
    """(function of the floating tensors, those tensors in float64 requiring grad) for torch.autograd.gradcheck."""
    # (argument, position in its list or None): where each differentiated tensor goes
    slots = [(name, None) for name, value in call.items()
             if isinstance(value, torch.Tensor) and value.is_floating_point()]
    slots += [(name, position) for name, value in call.items() if isinstance(value, (list, tuple))
              for position, item in enumerate(value) if isinstance(item, torch.Tensor) and item.is_floating_point()]

    def fn(*inputs):
        values = {name: list(value) if isinstance(value, (list, tuple)) else value for name, value in call.items()}
        for (name, position), value in zip(slots, inputs, strict=True):
            if position is None:
                values[name] = value
            else:
                values[name][position] = value
        return op(values)

    inputs = tuple((call[name] if position is None else call[name][position]).detach().to(torch.float64)
                   .requires_grad_() for name, position in slots)
    return fn, inputs
