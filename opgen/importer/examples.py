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


OTHER_DTYPES = ("int8", "int32", "uint8", "float16", "bfloat16")
RETYPED_SHAPES = 24  # shape combinations tried in each other dtype


def retyped(examples: list[Example]) -> list[Example]:
    """The first examples with one tensor, or every tensor, in another dtype: for a fake that checks
    `A.dtype == torch.int8` (quantised weights, int32 accumulators)."""
    found = []
    for example in examples[:RETYPED_SHAPES]:
        names = [n for n, v in example.values.items() if isinstance(v, TensorValue) and v.shape is not None]
        for dtype in OTHER_DTYPES:
            for chosen in [[n] for n in names] + ([names] if len(names) > 1 else []):
                values = {n: TensorValue(dtype, shape=v.shape) if n in chosen else v for n, v in example.values.items()}
                found.append(Example(values, derived=True))
    return found


def telling(examples: list[Example], accepts) -> list[Example]:
    """Of the examples `accepts` (an example -> bool) takes, the one whose tensors have the most distinct shapes
    (rules derived where two inputs share a shape cannot tell their sizes apart), and the best at other ranks (a rule
    seen at one rank only cannot say how it grows with the rank)."""
    chosen: dict[tuple, tuple[int, Example]] = {}
    for example in examples:
        shapes = [v.shape for v in example.values.values() if isinstance(v, TensorValue) and v.shape is not None]
        ranks = tuple(len(shape) for shape in shapes)
        score = len(set(shapes)) * 100 + len(set(ranks))
        if score > chosen.get(ranks, (-1, None))[0] and accepts(example):
            chosen[ranks] = (score, example)
    best = sorted(chosen.values(), key=lambda item: -item[0])
    return [example for _, example in best[:2]]


def make_call(example: Example, seed: int = 0) -> dict:
    from ..check.worker import _make

    generator = torch.Generator().manual_seed(seed)
    return {name: _make(value, generator) for name, value in example.values.items()}
