"""Put on PYTHONPATH by bench_import.py only: the modules an NPU package imports that a CPU machine lacks (torch_npu,
vllm and its GPU/NPU stack) become permissive stubs, so that the package's own registrations run. vLLM's
`direct_register_custom_op` is the real thing (a Library define, the kernel at its dispatch key, the fake); every
other name is a stub class: callable, subclassable, indexable, a decorator that keeps what it decorates."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
import types

STUBBED = tuple(filter(None, os.environ.get("OPGEN_BENCH_STUBS", "").split(",")))


class _Meta(type):
    def __getattr__(cls, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _stub_class(name)

    def __getitem__(cls, item):
        return cls

    def __or__(cls, other):
        return cls

    __ror__ = __or__

    def __iter__(cls):
        return iter(())

    def __bool__(cls):
        return False


class _Stub(metaclass=_Meta):
    def __init__(self, *args, **kwargs):
        pass

    def __new__(cls, *args, **kwargs):
        if len(args) == 1 and not kwargs and (callable(args[0]) or isinstance(args[0], type)):
            return args[0]  # used as a decorator: keep the decorated function or class
        return super().__new__(cls)

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _stub_class(name)

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]
        return _Stub()

    def __iter__(self):
        return iter(())

    def __bool__(self):
        return False

    def __getitem__(self, item):
        return _Stub()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _stub_class(name: str) -> type:
    return _Meta(str(name), (_Stub,), {})


def direct_register_custom_op(op_name, op_func, mutates_args=None, fake_impl=None, target_lib=None,
                              dispatch_key=None, tags=()):
    import torch

    schema = torch.library.infer_schema(op_func, mutates_args=mutates_args or [])
    library = target_lib or _vllm_library()
    library.define(op_name + schema, tags=tags)
    library.impl(op_name, op_func, dispatch_key=dispatch_key or "PrivateUse1")
    if fake_impl is not None:
        library._register_fake(op_name, fake_impl)


_LIBRARY = []


def _vllm_library():
    import torch

    if not _LIBRARY:
        _LIBRARY.append(torch.library.Library("vllm", "FRAGMENT"))
    return _LIBRARY[0]


class _Module(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        if name == "direct_register_custom_op":
            return direct_register_custom_op
        return _stub_class(name)


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if fullname.split(".")[0] in STUBBED:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _Module(spec.name)
        module.__path__ = []
        module.__version__ = os.environ.get(f"OPGEN_BENCH_VERSION_{spec.name.split('.')[0].upper()}", "0.0.0")
        return module

    def exec_module(self, module):
        if module.__name__ == "torch_npu":  # torch_npu adds torch.npu (streams, events, devices)
            import torch

            torch.npu = _stub_class("npu")


if STUBBED:
    sys.meta_path.insert(0, _Finder())
