"""Dispatch keys and device types as torch 2.13 names them (`torch._C.DispatchKey`, `torch.device` types),
kept here as data so lint needs no torch; tests/test_lint_outside.py compares them with the installed torch.

A registration names either a dispatch key (`Library.impl(..., "CPU")`) or a device type (`custom_op(...,
device_types="cuda")`). What the rules need to know about one: is it a device kernel (a backend: CPU, CUDA,
PrivateUse1, a quantized or sparse variant), a kernel that also runs on fake tensors (Meta, the composite
keys), or a functionality key (Autograd, Python, BackendSelect, ...). A key torch does not list is the
name of a renamed PrivateUse1 backend (`torch.utils.rename_privateuse1_backend("tpu")` makes "TPU" parse,
as torch_npu does for "NPU"): a backend.
"""

from __future__ import annotations

# Backends with a dense kernel, in torch's order (StartOfDenseBackends .. EndOfDenseBackends, less Meta).
BACKENDS = ("CPU", "CUDA", "HIP", "XLA", "MPS", "IPU", "XPU", "HPU", "VE", "Lazy", "MTIA", "MAIA",
            "PrivateUse1", "PrivateUse2", "PrivateUse3")
# Per-backend functionality keys torch builds as <functionality><backend> (QuantizedCPU, SparseCUDA, ...).
BACKEND_FUNCTIONALITIES = ("Quantized", "Sparse", "SparseCsr", "NestedTensor")
_PER_BACKEND = ("Quantized", "Sparse", "SparseCsr", "NestedTensor", "Autograd")
# Every other key of torch.DispatchKey (runtime keys and the alias keys registrations may name).
OTHER_KEYS = (
    "Undefined", "CompositeExplicitAutogradNonFunctional", "CompositeExplicitAutograd",
    "CompositeImplicitAutogradNestedTensor", "CompositeImplicitAutograd", "AutogradNestedTensor", "AutogradOther",
    "Autograd", "Conjugate", "ZeroTensor", "Negative", "BackendSelect", "ADInplaceOrView", "PythonTLSSnapshot",
    "Python", "FuncTorchDynamicLayerFrontMode", "FuncTorchDynamicLayerBackMode", "FuncTorchBatchedDecomposition",
    "FuncTorchBatched", "FuncTorchVmapMode", "FuncTorchGradWrapper", "PythonDispatcher", "PreDispatch",
    "Functionalize", "AutocastCPU", "AutocastMPS", "AutocastXPU", "AutocastHPU", "AutocastIPU", "AutocastCUDA",
    "AutocastPrivateUse1", "Dense", "Meta", "Quantized", "QuantizedMeta", "Sparse", "SparseMeta", "SparseCsr",
    "SparseCsrMeta", "NestedTensor", "NestedTensorMeta", "AutogradFunctionality", "AutogradMeta",
)
# The range markers of the enum, listed by torch but never a registration's key.
MARKERS = tuple(f"{edge}Of{kind}Backends" for kind in ("Dense", "Quantized", "Sparse", "SparseCsr", "NestedTensor",
                                                        "AutogradFunctionality") for edge in ("Start", "End"))

BACKEND_KEYS = frozenset(BACKENDS) | frozenset(f + b for f in BACKEND_FUNCTIONALITIES for b in BACKENDS)
TORCH_KEYS = BACKEND_KEYS | frozenset(OTHER_KEYS) | frozenset("Autograd" + b for b in BACKENDS) | frozenset(MARKERS)
# Kernels at these keys also run on fake tensors, so the op needs no separate fake.
FAKE_CAPABLE_KEYS = frozenset({"CompositeExplicitAutograd", "CompositeImplicitAutograd",
                               "CompositeExplicitAutogradNonFunctional", "Meta", "fake"})

# torch.device types and the key `torch._C._dispatch_key_for_device` gives each; "default" is
# torch.library's word for CompositeExplicitAutograd. Any other type is a renamed PrivateUse1 backend.
DEVICE_TYPE_KEYS = {
    "cpu": "CPU", "cuda": "CUDA", "hip": "HIP", "xla": "XLA", "mps": "MPS", "ipu": "IPU", "xpu": "XPU",
    "hpu": "HPU", "ve": "VE", "lazy": "Lazy", "mtia": "MTIA", "maia": "MAIA", "meta": "Meta",
    "privateuseone": "PrivateUse1", "vulkan": "Vulkan", "fpga": "FPGA", "default": "CompositeExplicitAutograd",
}


_BACKENDS_BY_FOLD = {key.lower(): key for key in BACKEND_KEYS}


def key_of_device_type(device_type: str) -> str:
    """The key a device type registers at; `torch.library.impl` also takes a dispatch key there, kept as it is
    (torch parses it as a key first). Any other word is a renamed PrivateUse1 backend ("npu", "tpu")."""
    if device_type in TORCH_KEYS or not device_type.islower():
        return device_type
    return DEVICE_TYPE_KEYS.get(device_type, "PrivateUse1")


def is_backend_key(key: str) -> bool:
    """A device kernel's key: one of torch's backends (or a per-backend variant), or a key torch does not list
    (a renamed PrivateUse1 backend: "NPU", "TPU"), but not `AutogradNPU` and the like."""
    if key in BACKEND_KEYS:
        return True
    if key in TORCH_KEYS or key.startswith(_PER_BACKEND) or key.startswith("Autocast"):
        return False
    return key[:1].isupper()


def device_of_key(key: str) -> str | None:
    """The device type a backend key's kernel runs on ("cuda" for CUDA and HIP; "npu" for PrivateUse1, the
    backend opgen targets; "tpu" for a renamed "TPU"), None for other keys."""
    for functionality in BACKEND_FUNCTIONALITIES:
        if key.startswith(functionality) and key[len(functionality):] in BACKENDS:
            key = key[len(functionality):]
    key = _BACKENDS_BY_FOLD.get(key.lower(), key)  # "cuda" where a key belongs (OPG204) still means CUDA
    if key == "PrivateUse1":
        return "npu"
    if key == "HIP":
        return "cuda"
    return key.lower() if is_backend_key(key) else None
