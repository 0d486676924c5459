"""opgen's CPU check of {{ cookiecutter._op.name }}'s Meta function(s) ({{ cookiecutter._op.spec_op }} of opgen.yaml);
not part of the op-plugin contribution (`opgen add` does not copy opgen_checks/).

It runs anywhere, without torch_npu: it takes the Meta function(s) out of
op_plugin/python/meta/_meta_registrations.py (above this file, or under $OPGEN_OP_PLUGIN_ROOT: an op-plugin
checkout after `opgen add`), checks their argument names and defaults against the schemas, registers them
on a scratch copy of each schema and checks the shapes and dtypes they return against the CPU reference on
the spec's examples (opcheck: schema and fake-tensor tests).
"""

import ast
import inspect
import itertools
import os
import unittest
from pathlib import Path

import torch


def _find_meta_file() -> Path:
    roots = [Path(os.environ["OPGEN_OP_PLUGIN_ROOT"])] if os.environ.get("OPGEN_OP_PLUGIN_ROOT") else []
    for parent in roots + list(Path(__file__).resolve().parents):
        candidate = parent / "op_plugin" / "python" / "meta" / "_meta_registrations.py"
        if candidate.is_file():
            return candidate
    raise FileNotFoundError("op_plugin/python/meta/_meta_registrations.py not found above " + __file__)


META_FILE = _find_meta_file()
SCRATCH = "{{ cookiecutter._op.scratch_namespace }}"
# (op name, schema in op_plugin_functions.yaml, Meta function name, positions of mutated arguments,
#  positions of the arguments the functional twin copies, is it an in-place op's twin)
OPS = [
{% for row in cookiecutter._op.ops_table %}
    {{ row }}
{% endfor %}
]


def _random(shape, dtype, g):
    """Random values of any dtype from a seeded generator (small integers for integer dtypes)."""
    if dtype.is_floating_point or dtype.is_complex:
        return torch.randn(shape, generator=g, dtype=torch.float32).to(dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    return torch.randint(0, 8, shape, generator=g).to(dtype)


def _calls(seed=0):
    """The spec's examples: ((positional...), {keyword: ...}) per call."""
    g = torch.Generator().manual_seed(seed)
    return [
{% for line in cookiecutter._op.example_lines %}
        {{ line }}
{% endfor %}
    ]


{% if cookiecutter._op.has_reference %}
{{ cookiecutter._op.reference_def }}
    """The CPU reference from the spec (`reference:`)."""
{% for line in cookiecutter._op.reference_body %}
    {{ line }}
{% endfor %}


def _twin_reference(cloned, inplace_twin):
    """The functional twin on CPU: the reference applied to copies of the mutated arguments."""

    def run(*args, **kwargs):
        args = [a.clone() if i in cloned else a for i, a in enumerate(args)]
        result = _reference(*args, **kwargs)
        if inplace_twin:
            return args[cloned[0]]
        outs = () if result is None else (result if isinstance(result, tuple) else (result,))
        return (*outs, *[args[i] for i in cloned])

    return run


{% endif %}
def _meta_function(name):
    """The Meta function registered for `name` in _meta_registrations.py, compiled on its own with torch only."""
    tree = ast.parse(META_FILE.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and any(
            isinstance(d, ast.Call) and len(d.args) == 2 and isinstance(d.args[1], ast.Constant)
            and d.args[1].value == name for d in node.decorator_list
        ):
            node.decorator_list = []
            module = ast.Module(body=[node], type_ignores=[])
            scope = {"torch": torch}
            exec(compile(module, str(META_FILE), "exec"), scope)  # noqa: S102 (the fragment's own code)
            return scope[node.name]
    raise AssertionError(f"no @impl(m, {name!r}) Meta function in {META_FILE}")


def _outputs(result):
    if result is None:
        return []
    return list(result) if isinstance(result, (tuple, list)) else [result]


def _to(value, device):
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (list, tuple)):
        return type(value)(_to(v, device) for v in value)
    return value


_LIBRARIES = []
_COUNTER = itertools.count()


def _scratch_op(name, func, meta, cpu):
    """`func` defined in a fresh scratch namespace, with `meta` as its Meta kernel and `cpu` as its CPU one."""
    namespace = f"{SCRATCH}_{next(_COUNTER)}"
    lib = torch.library.Library(namespace, "FRAGMENT")
    _LIBRARIES.append(lib)
    lib.define(func)
    lib.impl(name, meta, "Meta")
    if cpu is not None:
        lib.impl(name, cpu, "CPU")
    packet = getattr(torch.ops, namespace)
    base, _, overload = name.partition(".")
    return getattr(getattr(packet, base), overload or "default")


class TestMeta{{ cookiecutter._op.camel }}(unittest.TestCase):
    """Runs on CPU: the Meta functions against the schemas and the spec's reference."""

    def test_meta_signature_equals_schema(self):
        for name, func, meta_name, _, _, _ in OPS:
            schema = torch._C.parse_schema(func)
            meta = _meta_function(name)
            self.assertEqual(meta.__name__, meta_name)
            params = list(inspect.signature(meta).parameters.values())
            self.assertEqual([p.name for p in params], [a.name for a in schema.arguments], name)
            for param, arg in zip(params, schema.arguments):
                self.assertEqual(param.kind == inspect.Parameter.KEYWORD_ONLY, arg.kwarg_only, arg.name)
                if arg.default_value is None and not arg.has_default_value():
                    self.assertIs(param.default, inspect.Parameter.empty, arg.name)
                else:
                    self.assertEqual(param.default, arg.default_value, arg.name)

{% if cookiecutter._op.has_reference and cookiecutter._op.has_examples %}
    def test_meta_matches_reference_on_examples(self):
        for name, func, _, _, cloned, inplace_twin in OPS:
            reference = _twin_reference(cloned, inplace_twin) if cloned else _reference
            op = _scratch_op(name, func, _meta_function(name), reference)
            for args, kwargs in _calls():
                expected = _outputs(reference(*[_to(a, "cpu") for a in args], **kwargs))
                got = _outputs(op(*_to(list(args), "meta"), **kwargs))
                self.assertEqual(len(got), len(expected), name)
                for out, want in zip(got, expected):
                    self.assertEqual(out.device.type, "meta", name)
                    self.assertEqual((tuple(out.shape), out.dtype), (tuple(want.shape), want.dtype), name)

    def test_opcheck_schema_and_fake_tensor(self):
        for name, func, _, _, cloned, inplace_twin in OPS:
            reference = _twin_reference(cloned, inplace_twin) if cloned else _reference
            op = _scratch_op(name, func, _meta_function(name), reference)
            for args, kwargs in _calls():
                torch.library.opcheck(op, args, kwargs, test_utils=("test_schema", "test_faketensor"))
{% else %}
    @unittest.skip("{{ cookiecutter._op.spec_op }} has no `reference:` or no examples: nothing to compare the Meta with")
    def test_meta_matches_reference_on_examples(self):
        pass
{% endif %}


if __name__ == "__main__":
    unittest.main()
