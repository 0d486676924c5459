"""Two compiled (C++) operators torch itself ships, with CPU kernels that compute over raw data pointers and no fake:
quantization::_FloatToBfloat16Quantized (float32 [n, m] -> bfloat16 bits in a float16 [n, m]) and its inverse
quantization::_Bfloat16QuantizedToFloat (torch/csrc/distributed/c10d/quantization/quantization.cpp). Importing this
module registers a fake for each, as a third-party package adds one to a C++ op: the first correct, the second planted
with a wrong output dtype (float16, where the kernel returns float32)."""

from __future__ import annotations

import torch

TO_BF16 = torch.ops.quantization._FloatToBfloat16Quantized.default
FROM_BF16 = torch.ops.quantization._Bfloat16QuantizedToFloat.default


@torch.library.register_fake("quantization::_FloatToBfloat16Quantized")
def _to_bf16_fake(input: torch.Tensor) -> torch.Tensor:
    return input.new_empty(input.shape, dtype=torch.float16)


@torch.library.register_fake("quantization::_Bfloat16QuantizedToFloat")
def _from_bf16_fake(input: torch.Tensor) -> torch.Tensor:
    return input.new_empty(input.shape, dtype=torch.float16)  # planted: the kernel returns float32
