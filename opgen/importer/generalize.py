"""One shape rule for an output from its sizes on several examples (torch-free): each example gives the output's
sizes as semantics expressions of that example's input sizes (`x.shape[0]`, `1`), and the rule must give all of them
at each example's ranks. Tried in order: the sizes alike everywhere (`[x.shape[0], 1]`, `x.shape`), then an input's
leading sizes followed by sizes counted from the end (`x.shape[:-1] + [x.shape[-1] // 2]`), then a prefix as long
as one input's rank is shorter than another's (`x.shape[:x.dim() - gamma.dim()] + [1] * gamma.dim()`), each
after an optional head (`[len(xs)] + xs[0].shape`). None when no form fits every example."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

_SIZE = re.compile(r"\b(?P<tensor>[A-Za-z_]\w*(?:\[\d+\])?)\.shape\[(?P<index>-?\d+)\]")


@dataclass(frozen=True)
class Sizes:
    """One example's output sizes, and the ranks of its tensors and lengths of its tensor lists."""

    dims: tuple[str, ...]
    ranks: dict  # "x" or "xs[0]" -> rank
    lengths: dict  # "xs" -> number of tensors
    shapes: dict = field(default_factory=dict)  # "x" -> its sizes on the example (for the numeric forms)
    out: tuple | None = None  # the output's sizes on the example


def shape_rule(examples: list[Sizes]) -> str | None:
    examples = _ones_unified(examples)
    examples = [_lengths_named(sizes) for sizes in examples] if _differ(examples) else examples
    if not _differ(examples):
        return _compact(examples[0])
    for tensor in examples[0].ranks:
        for head in (0, 1):
            rule = _prefixed(examples, tensor, head)
            if rule is not None:
                return rule
    return _broadcast(examples)


def _broadcast(examples: list[Sizes]) -> str | None:
    """`broadcast(a.shape, b.shape)`, or its leading sizes then `[1] * c.dim()`, checked on each example's numbers
    (symbolic sizes of a broadcast come back as guards, not as one expression)."""
    if any(sizes.out is None for sizes in examples):
        return None
    names = [name for name in examples[0].shapes if "[" not in name]
    for first in names:
        for second in names[names.index(first) + 1:]:
            bases = [_broadcast_shapes(sizes.shapes.get(first), sizes.shapes.get(second)) for sizes in examples]
            if None in bases or all(s.shapes[first] == s.shapes[second] for s in examples):
                continue
            rule = f"broadcast({first}.shape, {second}.shape)"
            if all(tuple(base) == tuple(sizes.out) for base, sizes in zip(bases, examples, strict=True)):
                return rule
            for other in names:
                if all(tuple(base[:len(base) - len(s.shapes[other])]) + (1,) * len(s.shapes[other]) == tuple(s.out)
                       for base, s in zip(bases, examples, strict=True)):
                    return f"{rule}[:-{other}.dim()] + [1] * {other}.dim()"
    return None


def _broadcast_shapes(a, b) -> list[int] | None:
    if a is None or b is None:
        return None
    found = []
    for index in range(1, max(len(a), len(b)) + 1):
        x = a[-index] if index <= len(a) else 1
        y = b[-index] if index <= len(b) else 1
        if x != y and 1 not in (x, y):
            return None
        found.append(y if x == 1 else x)
    return found[::-1]


def _ones_unified(examples: list[Sizes]) -> list[Sizes]:
    """A size the fake specialised to 1 (an input size of 1 it guarded on) written as that input size where the other
    examples of the same rank say which one it is."""
    found = []
    for sizes in examples:
        dims = list(sizes.dims)
        for position, dim in enumerate(dims):
            if dim != "1":
                continue
            others = {other.dims[position] for other in examples
                      if len(other.dims) == len(dims) and other.dims[position] != "1"}
            match = _SIZE.fullmatch(next(iter(others))) if len(others) == 1 else None
            if match and (sizes.shapes.get(match.group("tensor")) or ())[int(match.group("index")):][:1] == (1,):
                dims[position] = match.group(0)
        found.append(replace(sizes, dims=tuple(dims)))
    return found


def _differ(examples: list[Sizes]) -> bool:
    return len({sizes.dims for sizes in examples}) > 1


def _lengths_named(sizes: Sizes) -> Sizes:
    """A size equal to a list's length, written `len(xs)` (only where the examples' sizes differ: one example
    cannot tell a constant 3 from three tensors)."""
    names = {str(length): f"len({name})" for name, length in sizes.lengths.items()}
    return replace(sizes, dims=tuple(names.get(dim, dim) for dim in sizes.dims))


def _compact(sizes: Sizes) -> str:
    dims = list(sizes.dims)
    for tensor, rank in sizes.ranks.items():
        if rank and dims == _whole(tensor, rank):
            return f"{tensor}.shape"
    for tensor, rank in sizes.ranks.items():  # the input's sizes with its last ones replaced (a keepdim reduction)
        if rank >= 2 and len(dims) == rank and dims[:1] == _whole(tensor, 1):
            return _prefixed([sizes], tensor, 0)
    return _list(dims)


def _whole(tensor: str, rank: int) -> list[str]:
    return [f"{tensor}.shape[{i}]" for i in range(rank)]


def _from_end(text: str, ranks: dict) -> str:
    """`x.shape[2]` as `x.shape[-1]` where x has rank 3: the same size at any rank."""
    def negative(match: re.Match) -> str:
        rank = ranks.get(match.group("tensor"))
        index = int(match.group("index"))
        return match.group(0) if rank is None or index < 0 else f"{match.group('tensor')}.shape[{index - rank}]"
    return _SIZE.sub(negative, text)


def _taken(sizes: Sizes, tensor: str, head: int) -> int:
    """How many of `tensor`'s leading sizes the output's sizes hold after `head` sizes."""
    dims, taken = sizes.dims, 0
    while taken < sizes.ranks[tensor] and head + taken < len(dims) and dims[head + taken] == f"{tensor}.shape[{taken}]":
        taken += 1
    return taken


def _prefixed(examples: list[Sizes], tensor: str, head: int) -> str | None:
    """`[head] + tensor.shape[:...] + [rest]` fitting every example, or None."""
    if any(sizes.ranks.get(tensor) is None or len(sizes.dims) < head for sizes in examples):
        return None
    taken = [_taken(sizes, tensor, head) for sizes in examples]
    heads = {sizes.dims[:head] for sizes in examples}
    cuts = [sizes.ranks[tensor] - count for sizes, count in zip(examples, taken, strict=True)]
    rests = [sizes.dims[head + count:] for sizes, count in zip(examples, taken, strict=True)]
    from_end = {tuple(_from_end(dim, sizes.ranks) for dim in rest) for sizes, rest in zip(examples, rests, strict=True)}
    if len(heads) != 1 or not any(taken):
        return None
    start = f"{_list(list(next(iter(heads))))} + " if head else ""
    if len(set(cuts)) == 1 and len(from_end) == 1:
        rest = list(next(iter(from_end)))
        prefix = f"{tensor}.shape[:-{cuts[0]}]" if cuts[0] else f"{tensor}.shape"
        return start + prefix + (f" + {_list(rest)}" if rest else "")
    for other in examples[0].ranks:
        if other != tensor and all(sizes.ranks.get(other) == cut for sizes, cut in zip(examples, cuts, strict=True)):
            rule = _cut_by_rank(tensor, other, from_end, rests, examples)
            if rule is not None:
                return start + rule
    return None


def _cut_by_rank(tensor: str, other: str, from_end: set, rests: list, examples: list[Sizes]) -> str | None:
    """`tensor.shape[:tensor.dim() - other.dim()]` then the same sizes, or one size `other.dim()` times."""
    prefix = f"{tensor}.shape[:{tensor}.dim() - {_dim(other)}]"
    if len(from_end) == 1:
        rest = list(next(iter(from_end)))
        return prefix + (f" + {_list(rest)}" if rest else "")
    repeated = {rest[0] if rest and len(set(rest)) == 1 else None for rest in rests}
    if len(repeated) == 1 and None not in repeated and all(
            len(rest) == sizes.ranks[other] for rest, sizes in zip(rests, examples, strict=True)):
        return prefix + f" + [{next(iter(repeated))}] * {_dim(other)}"
    return None


def _dim(tensor: str) -> str:
    return f"{tensor}.dim()"


def _list(dims: list[str]) -> str:
    return "[" + ", ".join(dims) + "]"
