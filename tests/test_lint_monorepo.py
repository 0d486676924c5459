"""Issue 28: lint on a monorepo and on code never seen. Rule state is per op, never per run: a finding
about op A depends only on what the linted paths say about A, so linting trees together gives exactly the
union of their findings alone; every registration form torch accepts is read. Each case is a minimal
reproduction written here, what opgen lint says about it, what torch 2.13 does with it (the oracle), and a
correct look-alike. Every op lives in its own `t28_*` namespace (the registrations stay in this process).
"""

from __future__ import annotations

import runpy
import textwrap
from pathlib import Path

import pytest

from opgen.lint.config import LintConfig
from opgen.lint.engine import lint_paths

torch = pytest.importorskip("torch")


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"))


def lint(root: Path, paths=None, select=()) -> set[tuple[str, int, str]]:
    targets = [str(root / p) for p in paths] if paths else [str(root)]
    result = lint_paths(targets, LintConfig(root=str(root)), select=select)
    assert not result.internal_errors
    return {(Path(d.path).relative_to(root).as_posix(), d.line, d.code) for d in result.diagnostics}


def run_module(root: Path, name: str) -> dict:
    return runpy.run_path(str(root / name))


# -- item 1: trees linted together give the union of their findings alone ----------------------------------

TREES = {
    # a: fakes registered in a loop (names read at run time), and ops marked side-effecting the same way
    "pkg_a/__init__.py": "",
    "pkg_a/ops.py": """
        import torch
        from torch.fx.node import has_side_effect

        lib = torch.library.Library("t28_a", "FRAGMENT")
        lib.define("scale(Tensor x) -> Tensor")
        lib.define("shift(Tensor x) -> Tensor")
        lib.define("log(Tensor x) -> ()")
        lib.impl("scale", lambda x: x * 2, "CPU")
        lib.impl("shift", lambda x: x + 1, "CPU")
        lib.impl("log", lambda x: None, "CPU")


        def _fake(x):
            return torch.empty_like(x)


        for name in ("scale", "shift"):
            torch.library.register_fake(f"t28_a::{name}")(_fake)
        for op in (torch.ops.t28_a.log.default,):
            has_side_effect(op)
    """,
    # b: an op with a CPU kernel and no fake (OPG208), a side-effect-only op (OPG104), and look-alikes
    "pkg_b/__init__.py": "",
    "pkg_b/ops.py": """
        import torch

        lib = torch.library.Library("t28_b", "FRAGMENT")
        lib.define("rows(Tensor x) -> Tensor")
        lib.impl("rows", lambda x: x[: int(x.sum())].clone(), "CPU")
        lib.define("cols(Tensor x) -> Tensor")
        lib.impl("cols", lambda x: x.sum(0), "CPU")
        lib.define("log(Tensor x) -> ()")
        lib.impl("log", lambda x: None, "CPU")


        @torch.library.register_fake("t28_b::cols")
        def _(x):
            return x.new_empty(x.shape[1:])
    """,
    # c defines only the .out overload of t28_c::norm; d (another package) registers a kernel for the
    # default overload, which its own package does not define (torch's C++ would): not a lost overload
    "pkg_c/__init__.py": "",
    "pkg_c/ops.py": """
        import torch

        lib = torch.library.Library("t28_c", "FRAGMENT")
        lib.define("norm.out(Tensor x, *, Tensor(a!) out) -> ()")
        lib.impl("norm.out", lambda x, *, out: out.copy_(x / x.norm()), "CPU")
    """,
    "pkg_d/__init__.py": "",
    "pkg_d/patch.py": """
        import torch

        lib = torch.library.Library("t28_c", "IMPL")
        lib.impl("norm", lambda x: x / x.norm(), "CPU")
    """,
}
EXPECTED_ALONE = {"pkg_a": set(), "pkg_b": {("pkg_b/ops.py", 4, "OPG208"), ("pkg_b/ops.py", 8, "OPG208"),
                                           ("pkg_b/ops.py", 8, "OPG104")},
                  "pkg_c": set(), "pkg_d": set()}


def test_trees_linted_together_give_the_union_of_their_findings_alone(tmp_path):
    write(tmp_path, TREES)
    alone = {tree: lint(tmp_path, [tree]) for tree in EXPECTED_ALONE}
    assert alone == EXPECTED_ALONE
    assert lint(tmp_path) == set().union(*alone.values())
    # before: pkg_a's dynamic names turned OPG208 and OPG104 off for every op of the run, and pkg_c's
    # definition made pkg_d's registration an OPG203 "overload lost"
    from torch._subclasses.fake_tensor import FakeTensorMode

    run_module(tmp_path, "pkg_a/ops.py")
    run_module(tmp_path, "pkg_b/ops.py")
    with FakeTensorMode():
        x = torch.ones(2, 3)
        assert torch.ops.t28_a.scale(x).shape == x.shape and torch.ops.t28_b.cols(x).shape == (3,)
        from torch._subclasses.fake_tensor import UnsupportedOperatorException

        with pytest.raises(UnsupportedOperatorException):  # no fake: it cannot be traced
            torch.ops.t28_b.rows(x)


# Two unrelated trees (each its own import root, as two wheels are) defining `_C::awq_gemm` differently: one as a
# C++ op with a Python fake, the other as a Python custom_op. Neither judges the other's.
SAME_NAME_TREES = {
    "tree_cpp/quant/__init__.py": "",
    "tree_cpp/quant/fakes.py": """
        import torch


        @torch.library.register_fake("_C::awq_gemm")
        def _(input, qweight, scales, qzeros, split_k_iters):
            return input.new_empty((input.shape[0], qweight.shape[1] * 8))
    """,
    "tree_py/kernels/__init__.py": "",
    "tree_py/kernels/awq.py": """
        import torch


        @torch.library.custom_op("_C::awq_gemm", mutates_args=())
        def awq_gemm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            return x @ w


        @awq_gemm.register_fake
        def _(x, w):
            return x.new_empty((x.shape[0], w.shape[1]))
    """,
}


def test_two_trees_defining_the_same_qualified_name_never_judge_each_other(tmp_path):
    write(tmp_path, SAME_NAME_TREES)
    alone = {tree: lint(tmp_path, [tree]) for tree in ("tree_cpp", "tree_py")}
    assert alone == {"tree_cpp": set(), "tree_py": set()}
    # before: tree_cpp's five-parameter fake was judged against tree_py's two-argument custom_op (OPG305)
    assert lint(tmp_path) == set()
    planted = dict(SAME_NAME_TREES)  # the look-alike of the twin: the same fake in tree_py's own tree is wrong
    planted["tree_py/kernels/fakes.py"] = SAME_NAME_TREES["tree_cpp/quant/fakes.py"]
    write(tmp_path, planted)
    assert ("tree_py/kernels/fakes.py", 5, "OPG305") in lint(tmp_path, ["tree_py"])


def test_an_unreadable_name_makes_only_the_ops_it_may_name_unknown(tmp_path):
    write(tmp_path, {"pkg/__init__.py": "", "pkg/ops.py": """
        import torch

        lib = torch.library.Library("t28_u", "FRAGMENT")
        lib.define("fwd_a(Tensor x) -> Tensor")
        lib.define("bwd_a(Tensor x) -> Tensor")
        lib.impl("fwd_a", lambda x: x * 2, "CPU")
        lib.impl("bwd_a", lambda x: x * 2, "CPU")
        for kind in ("a",):
            torch.library.register_fake(f"t28_u::fwd_{kind}")(lambda x: torch.empty_like(x))
    """})
    # the fake may be fwd_a's, never bwd_a's: bwd_a has no fake
    assert lint(tmp_path) == {("pkg/ops.py", 5, "OPG208")}


def codes(found) -> set[tuple[int, str]]:
    return {(line, code) for _path, line, code in found}


# -- item 2: every registration form torch accepts is read ----------------------------------------------

FORMS = """
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    _custom_op = torch.library.custom_op
    register_fake = getattr(torch.library, "register_fake", None)


    @_custom_op("t28_forms::via_alias", mutates_args=(), device_types="cpu")
    def via_alias(x: torch.Tensor) -> torch.Tensor:
        return x * 2


    @_custom_op("t28_forms::via_alias_ok", mutates_args=(), device_types="cpu")
    def via_alias_ok(x: torch.Tensor) -> torch.Tensor:
        return x * 2


    @register_fake("t28_forms::via_alias_ok")
    def _(x):
        return torch.empty_like(x)


    def cols(x: torch.Tensor) -> torch.Tensor:
        return x.sum(0)


    cols_op = torch.library.custom_op("t28_forms::cols", mutates_args=(), device_types="cpu")(cols)


    @cols_op.register_fake
    def _(x, dim):
        return x.new_empty(x.shape[1:])


    def rows(x: torch.Tensor) -> torch.Tensor:
        return x.sum(1)


    torch.library.custom_op("t28_forms::rows", mutates_args=(), device_types="cpu")(rows)


    @register_fake("t28_forms::rows")
    def _(x):
        return x.new_empty(x.shape[:1])
"""


def test_every_registration_form_torch_accepts_is_read(tmp_path):
    # planted: the alias's op has no fake (OPG208), the call form's fake cannot take its arguments (OPG305);
    # look-alikes: the same forms done right. Before, none of these ops was read.
    write(tmp_path, {"forms.py": FORMS})
    assert codes(lint(tmp_path)) == {(8, "OPG208"), (31, "OPG305")}
    module = run_module(tmp_path, "forms.py")
    ops = torch.ops.t28_forms
    with module["FakeTensorMode"]():
        x = torch.ones(2, 3)
        assert ops.via_alias_ok(x).shape == x.shape and ops.rows(x).shape == (2,)
        with pytest.raises(Exception, match="no fake impl"):
            ops.via_alias(x)
        with pytest.raises(TypeError, match="dim"):
            ops.cols(x)


TAGGED = """
    import torch


    @torch.library.custom_op("t28_tag::rotary_", mutates_args=("q",), tags=torch.Tag.inplace)
    def rotary_(q: torch.Tensor, cos: torch.Tensor) -> torch.Tensor:
        q.mul_(cos)
        return q
"""


def test_an_inplace_tagged_custom_op_returning_its_input_is_what_torch_infers(tmp_path):
    # before: lint inferred `-> Tensor` ignoring the tag and reported OPG112 and OPG308 (torch generates the
    # fake of a Tag.inplace op, so none is needed)
    write(tmp_path, {"tagged.py": TAGGED})
    assert lint(tmp_path) == set()
    import torch._functorch.config

    run_module(tmp_path, "tagged.py")
    op = torch.ops.t28_tag.rotary_.default
    assert str(op._schema) == "t28_tag::rotary_(Tensor(a0!) q, Tensor cos) -> Tensor(a0!)"
    with torch._functorch.config.patch(error_on_custom_op_aliasing=True):
        compiled = torch.compile(lambda q, c: op(q, c) + 1, backend="aot_eager", fullgraph=True)
        q = torch.ones(3)
        assert torch.equal(compiled(q, torch.full((3,), 2.0)), torch.full((3,), 3.0)) and torch.equal(q, 2 * q.new_ones(3))


TAG_CASES = [
    ("def f(q: torch.Tensor, c: torch.Tensor) -> torch.Tensor: ...", ("q",), "inplace"),
    ("def f(q: torch.Tensor, c: torch.Tensor) -> torch.Tensor: ...", (), "inplace"),  # torch refuses
    ("def f(q: torch.Tensor, c: torch.Tensor) -> torch.Tensor: ...", ("c",), "inplace"),  # torch refuses
    ("def f(q: int, c: torch.Tensor) -> torch.Tensor: ...", ("c",), "inplace"),  # torch refuses
    ("def f(x: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor: ...", ("out",), "out"),
    ("def f(x: torch.Tensor, *, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]: ...",
     ("a", "b"), "out"),
    ("def f(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor: ...", ("out",), "out"),  # torch refuses
]


@pytest.mark.parametrize(("source", "mutates", "tag"), TAG_CASES)
def test_the_schema_inferred_under_a_tag_is_torchs(source, mutates, tag):
    import ast

    from opgen.lint.collect.facts import params
    from opgen.schema import parse_schema
    from opgen.schema.infer import infer_schema

    namespace = {"torch": torch}
    exec(source, namespace)  # noqa: S102 (the case's own source)
    try:
        expected = parse_schema("f" + torch.library.infer_schema(namespace["f"], mutates_args=mutates,
                                                                 tags=getattr(torch.Tag, tag)))
    except ValueError:
        expected = None
    node = ast.parse(source).body[0]

    class Values:
        @staticmethod
        def value(default):
            return ast.literal_eval(default)

    ours = infer_schema("f", params(node, Values), ast.unparse(node.returns), mutates, (tag,))
    if expected is None:  # torch refuses: the schema opgen infers breaks the tag's contract (OPG112)
        from opgen.contract import tag_contract_problems

        assert ours is None or tag_contract_problems(ours, tag), ours
    else:
        assert ours is not None and _same_aliasing(ours, expected), (str(ours), str(expected))


def _same_aliasing(ours, expected) -> bool:
    """The same types, with returns aliasing the same arguments (torch names alias sets a0, a1...)."""
    def shape(schema):
        letters = {a.alias.before[0]: a.name for a in schema.arguments if a.alias}
        return ([(a.name, str(a.type).split("(")[0], a.is_write) for a in schema.arguments],
                [letters.get(r.alias.before[0]) if r.alias else None for r in schema.returns])

    return shape(ours) == shape(expected)


# -- item 2: re-bound parameters are followed ------------------------------------------------------------

REBOUND = """
    import torch

    lib = torch.library.Library("t28_flow", "FRAGMENT")
    lib.define("attn(Tensor q, Tensor k) -> Tensor")
    lib.define("attn_ok(Tensor q, Tensor k) -> Tensor")
    lib.impl("attn", lambda q, k: q[: int(q.sum())] @ k.T, "CPU")
    lib.impl("attn_ok", lambda q, k: q @ k.T, "CPU")


    def maybe_contiguous(x):
        return x.contiguous() if x.stride(-1) != 1 else x


    @torch.library.register_fake("t28_flow::attn")
    def _(q, k):
        q, k = [maybe_contiguous(t) for t in (q, k)]
        n = int(q.sum().item())
        return q.new_empty(n, k.shape[0])


    @torch.library.register_fake("t28_flow::attn_ok")
    def _(q, k):
        q, k = [t.contiguous() for t in (q, k)]
        return q.new_empty(q.shape[0], k.shape[0])
"""


def test_a_parameter_re_bound_through_a_comprehension_is_still_the_input(tmp_path):
    # before: `q` re-bound was no longer the parameter, and the data read was lost
    write(tmp_path, {"flow.py": REBOUND})
    assert codes(lint(tmp_path)) == {(17, "OPG302")}
    run_module(tmp_path, "flow.py")
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q = torch.ones(2, 3)
        assert torch.ops.t28_flow.attn_ok(q, q).shape == (2, 2)
        with pytest.raises(Exception, match="_local_scalar_dense"):  # .item() of a fake: no data to read
            torch.ops.t28_flow.attn(q, q)


# -- item 4: host tensors the code makes are no device sync ------------------------------------------------

HOST = """
    import torch

    lib = torch.library.Library("t28_host", "FRAGMENT")
    lib.define("pick(Tensor x, int n) -> Tensor")
    lib.define("pick_bad(Tensor x, int n) -> Tensor")


    def _host_lens(n):
        return torch.zeros(n, dtype=torch.int32, device="cpu") + 1


    def pick(x, n):
        lens = _host_lens(n)
        total = int(lens.sum().item())
        first = torch.tensor([0, 1])[0].item()
        copied = x.cpu()
        last = copied[-1].item()
        return x[first:total] * last


    def pick_bad(x, n):
        x = x.contiguous()
        total = int(x.sum().item())
        return x[:total]


    lib.impl("pick", pick, "CUDA")
    lib.impl("pick_bad", pick_bad, "CUDA")
    lib._register_fake("pick", lambda x, n: x.new_empty(n))
    lib._register_fake("pick_bad", lambda x, n: x.new_empty(n))
    lib.define("dispatch(Tensor x) -> (Tensor, Tensor)")
    lib.define("combine(Tensor x, Tensor handle_id, Tensor scale) -> Tensor")


    def _next_handle_id():
        return torch.tensor([7], dtype=torch.int64, device="cpu")


    def dispatch(x):
        handle_id = _next_handle_id()
        return x * 2, handle_id


    def combine(x, handle_id, scale):
        handles = {7: 1.0}
        return x * handles[handle_id.item()] * scale.item()


    lib.impl("dispatch", dispatch, "CUDA")
    lib.impl("combine", combine, "CUDA")
    lib._register_fake("dispatch", lambda x: (torch.empty_like(x), torch.empty(1, dtype=torch.int64)))
    lib._register_fake("combine", lambda x, handle_id, scale: torch.empty_like(x))
"""


def test_item_of_a_host_tensor_made_in_the_code_is_no_capture_sync(tmp_path):
    # planted: .item() of the (re-bound) input in a CUDA kernel, and of `scale`; look-alikes: a helper's
    # device="cpu" tensor, torch.tensor(...) without a device, a .cpu() copy (the .cpu() itself is the sync,
    # reported once), and the CPU handle one op's kernel makes and returns for the next op
    write(tmp_path, {"host.py": HOST})
    assert codes(lint(tmp_path)) == {(16, "OPG307"), (23, "OPG307"), (46, "OPG307")}
    module = run_module(tmp_path, "host.py")
    # torch says where each tensor lives: on an input off the CPU (meta stands in for the device), the host
    # reads work and the planted one is a read of the input's device memory
    x = torch.ones(4, device="meta")
    assert module["_host_lens"](3).device.type == "cpu"
    with pytest.raises(Exception, match="meta"):
        module["pick_bad"](x, 2)
    _, handle_id = module["dispatch"](x)
    assert handle_id.device.type == "cpu"
    with pytest.raises(Exception, match="meta"):
        module["combine"](x, handle_id, torch.ones((), device="meta"))  # the scale is a device read


# -- item 3: OPG304 for Meta kernels always, and for device-generic kernels; OPG308 for Library kernels ----

DEVICES = """
    import torch
    from torch.library import Library, impl

    lib = Library("t28_dev", "FRAGMENT")
    lib.define("rows(Tensor x) -> Tensor")
    lib.define("rows_ok(Tensor x) -> Tensor")
    lib.impl("rows", lambda x: x.sum(1), "CPU")
    lib.impl("rows_ok", lambda x: x.sum(1), "CPU")
    meta_lib = Library("t28_dev", "IMPL", "Meta")


    @impl(meta_lib, "rows")
    def rows_meta(x):
        return torch.empty(x.shape[0], dtype=x.dtype)


    @impl(meta_lib, "rows_ok")
    def rows_ok_meta(x):
        return torch.empty(x.shape[0], dtype=x.dtype, device=x.device)


    @torch.library.custom_op("t28_dev::gather", mutates_args=())
    def gather(weight: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
        return weight[indices]


    @gather.register_fake
    def _(weight, indices):
        return torch.empty(indices.shape[0], weight.shape[1], dtype=weight.dtype)


    @torch.library.custom_op("t28_dev::gather_ok", mutates_args=())
    def gather_ok(weight: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
        return weight[indices]


    @gather_ok.register_fake
    def _(weight, indices):
        return weight.new_empty(indices.shape[0], weight.shape[1])
"""


def test_a_meta_kernel_or_a_composite_ops_fake_allocating_on_the_default_device(tmp_path):
    # the regression of issue 28: a Meta kernel allocating without device= whatever the other kernels; and a
    # fake next to a device-generic kernel (a custom_op without device_types returns on the input's device)
    write(tmp_path, {"devices.py": DEVICES})
    assert codes(lint(tmp_path)) == {(14, "OPG304"), (29, "OPG304")}
    run_module(tmp_path, "devices.py")
    from torch._subclasses.fake_tensor import FakeTensorMode

    ops = torch.ops.t28_dev
    meta = torch.ones(2, 3, device="meta")
    assert ops.rows_ok(meta).device.type == "meta" and ops.rows(meta).device.type == "cpu"
    with FakeTensorMode(), pytest.raises(AssertionError, match="device must be"):
        ops.rows(torch.ones(2, 3))
    # the kernel serves every device (CompositeExplicitAutograd: weight[indices] is on the input's device);
    # for an input off the CPU (meta stands in for one) the planted fake says CPU
    assert torch._C._dispatch_has_kernel_for_dispatch_key("t28_dev::gather", "CompositeExplicitAutograd")
    weight, indices = torch.ones(4, 3, device="meta"), torch.zeros(2, dtype=torch.long, device="meta")
    with FakeTensorMode() as mode:
        weight, indices = mode.from_tensor(weight), mode.from_tensor(indices)
        assert ops.gather_ok(weight, indices).device.type == "meta"
        assert ops.gather(weight, indices).device.type == "cpu"


ALIASING = """
    import torch

    lib = torch.library.Library("t28_alias", "FRAGMENT")
    lib.define("ident(Tensor x) -> Tensor")
    lib.define("ident_ok(Tensor x) -> Tensor")
    lib.define("ident_implicit(Tensor x) -> Tensor")


    def ident(x):
        return x


    def ident_ok(x):
        return x.clone()


    lib.impl("ident", ident, "CPU")
    lib.impl("ident_ok", ident_ok, "CPU")
    lib.impl("ident_implicit", ident, "CompositeImplicitAutograd")
    lib._register_fake("ident", lambda x: torch.empty_like(x))
    lib._register_fake("ident_ok", lambda x: torch.empty_like(x))


    def all_reduce(x: torch.Tensor) -> torch.Tensor:
        torch.distributed.all_reduce(x)
        return x


    lib.define("reduce(Tensor x) -> Tensor")
    lib.impl("reduce", all_reduce, "CUDA")
    lib._register_fake("reduce", lambda x: torch.empty_like(x))
"""


def test_a_library_kernel_returning_its_input_without_an_alias(tmp_path):
    # planted: ident returns x for `-> Tensor` (OPG308); reduce writes x through all_reduce and returns it
    # (OPG301 at the hand-off, OPG308 at the return); look-alikes: a clone, and a CompositeImplicitAutograd
    # kernel (decomposed before torch's check)
    write(tmp_path, {"aliasing.py": ALIASING})
    assert codes(lint(tmp_path)) == {(10, "OPG308"), (25, "OPG301"), (26, "OPG308")}
    import torch._functorch.config

    run_module(tmp_path, "aliasing.py")
    ops = torch.ops.t28_alias
    with torch._functorch.config.patch(error_on_custom_op_aliasing=True):
        for op, fails in ((ops.ident, True), (ops.ident_ok, False), (ops.ident_implicit, False)):
            torch._dynamo.reset()
            compiled = torch.compile(lambda x, op=op: op(x) + 1, backend="aot_eager", fullgraph=True)
            if fails:
                with pytest.raises(Exception, match="must not also be an input"):
                    compiled(torch.ones(2))
            else:
                assert torch.equal(compiled(torch.ones(2)), torch.full((2,), 2.0))
