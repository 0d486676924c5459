import itertools

import torch
import torch_npu
from torch_npu.testing.common_utils import SupportedDevices
from torch_npu.testing.testcase import TestCase, run_tests

# (op name, positions of the arguments it writes, positions of the arguments a functional twin copies, is it an
#  in-place op's twin)
OPS = [
{% for row in cookiecutter._op.npu_ops_table %}
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
    """The calls the op is tested with: ((positional...), {keyword: ...}) each."""
    g = torch.Generator().manual_seed(seed)
    return [
{% for line in cookiecutter._op.example_lines %}
        {{ line }}
{% endfor %}
    ]


def _npu_op(name):
    """torch_npu.<op> (an overload of it for `name.overload`), as the tests of op-plugin call ops."""
    base, _, overload = name.partition(".")
    return getattr(getattr(torch_npu, base), overload or "default")


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


class {{ cookiecutter._op.class_name }}(TestCase):
{% if cookiecutter._op.has_reference %}

    def supported_op_exec(self, *args, **kwargs):
        """The CPU reference the NPU kernel is compared with."""
        return _reference(*args, **kwargs)

    def supported_twin_exec(self, cloned, inplace_twin, *args, **kwargs):
        """A functional twin on CPU: the reference applied to copies of the mutated arguments."""
        args = [a.clone() if i in cloned else a for i, a in enumerate(args)]
        result = _reference(*args, **kwargs)
        if inplace_twin:
            return args[cloned[0]]
        return (*_outputs(result), *[args[i] for i in cloned])
{% endif %}

    def custom_op_exec(self, name, *args, **kwargs):
        return _npu_op(name)(*args, **kwargs)

    def _calling(self, name, kwargs):
        """A plain function calling the op, for torch.compile to trace."""

        def call(*inputs):
            return self.custom_op_exec(name, *inputs, **kwargs)

        return call

    def setUp(self):
        super().setUp()
        torch.npu.set_compile_mode(jit_compile=False)
        torch.npu.config.allow_internal_format = False

    def _assert_close(self, got, want):
        for out, ref in zip(_outputs(got), _outputs(want)):
            tolerance = 1e-2 if ref.dtype in (torch.float16, torch.bfloat16) else 1e-4
            self.assertEqual(out.cpu(), ref, atol=tolerance, rtol=tolerance)
{% if cookiecutter._op.has_reference %}

    @SupportedDevices({{ cookiecutter._op.devices }})
    def test_{{ cookiecutter._op.file_stem }}_matches_cpu_golden(self):
        for (name, written, cloned, inplace_twin), (args, kwargs) in itertools.product(OPS, _calls()):
            cpu_args = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
            if cloned:
                golden = self.supported_twin_exec(cloned, inplace_twin, *cpu_args, **kwargs)
            else:
                golden = self.supported_op_exec(*cpu_args, **kwargs)
            npu_args = _to(list(args), "npu")
            self._assert_close(self.custom_op_exec(name, *npu_args, **kwargs), golden)
            for position in written:  # what the op writes is compared as its outputs are
                self._assert_close(npu_args[position], cpu_args[position])
{% endif %}

    @SupportedDevices({{ cookiecutter._op.devices }})
    def test_{{ cookiecutter._op.file_stem }}_opcheck(self):
        for (name, _, _, _), (args, kwargs) in itertools.product(OPS, _calls()):
            torch.library.opcheck(_npu_op(name), _to(list(args), "npu"), kwargs,
                                  test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_dynamic"))

    @SupportedDevices({{ cookiecutter._op.devices }})
    def test_{{ cookiecutter._op.file_stem }}_npugraph_ex_fullgraph(self):
        for (name, written, _, _), (args, kwargs) in itertools.product(OPS, _calls()):
            if written:
                continue  # a captured graph runs the functional twin
            call = self._calling(name, kwargs)
            compiled = torch.compile(call, backend="npugraph_ex", fullgraph=True, dynamic=True)
            inputs = _to(list(args), "npu")
            self._assert_close(compiled(*inputs), _outputs(call(*inputs)))

    @SupportedDevices({{ cookiecutter._op.devices }})
    def test_{{ cookiecutter._op.file_stem }}_npugraph_capture_replay(self):
        for (name, written, _, _), (args, kwargs) in itertools.product(OPS, _calls()):
            if written:
                continue
            inputs = _to(list(args), "npu")
            self.custom_op_exec(name, *inputs, **kwargs)  # warm up outside the capture
            graph = torch.npu.NPUGraph()
            with torch.npu.graph(graph):
                captured = self.custom_op_exec(name, *inputs, **kwargs)
            graph.replay()
            torch.npu.synchronize()
            self._assert_close(captured, _outputs(self.custom_op_exec(name, *inputs, **kwargs)))
{% if cookiecutter._op.has_reference %}


{{ cookiecutter._op.reference_def }}
    """The CPU reference the NPU kernel is compared with."""
{% for line in cookiecutter._op.reference_body %}
    {{ line }}
{% endfor %}
{% endif %}


if __name__ == "__main__":
    run_tests()
