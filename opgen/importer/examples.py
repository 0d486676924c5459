"""Inputs for an op that its fake accepts: the `--inputs` file's (opgen check's format), or made up by trying
small shapes for its tensors until the fake takes one (opgen.spec.examples.derive_example for the rest)."""

from __future__ import annotations

import itertools

import torch

from ..spec.examples import derive_example
from ..spec.model import Example, TensorValue

SHAPES = ((4, 8), (8,), (2, 4, 8), (4,), (8, 8), (2, 4, 4, 8))
MOST_TRIES = 400


def candidates(schema) -> list[Example]:
    """Examples to try, the plainest first (empty when opgen cannot make one up for this schema)."""
    base = derive_example(schema)
    if base is None:
        return []
    shaped = [name for name, value in base.values.items()
              if isinstance(value, TensorValue) and value.shape is not None]
    found = []
    for shapes in itertools.islice(itertools.product(SHAPES, repeat=len(shaped)), MOST_TRIES):
        values = dict(base.values)
        for name, shape in zip(shaped, shapes, strict=True):
            values[name] = TensorValue(values[name].dtype, shape=shape)
        found.append(Example(values, derived=True))
    return found


def accepted(examples: list[Example], accepts) -> Example | None:
    """The first example `accepts` (a call -> bool) takes."""
    for example in examples:
        if accepts(example):
            return example
    return None


def make_call(example: Example, seed: int = 0) -> dict:
    from ..check.worker import _make

    generator = torch.Generator().manual_seed(seed)
    return {name: _make(value, generator) for name, value in example.values.items()}
