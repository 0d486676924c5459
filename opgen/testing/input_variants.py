"""The inputs opgen's generated tests try (opgen.testing; standard library and torch).

A call is a dict of an op's arguments by name. `variants(op, examples)` gives every example of the spec with three
seeds, then each example changed in one way at a time, within what the spec allows (`ops[i].inputs` in opgen.yaml:
a `Domain` per argument):

  dtype      the floating inputs in each dtype of the sweep (`ops[i].dtypes`), and in float64
  size       each size (sizes equal in the example stay equal) at 1, at 0, odd and larger, a leading one of the first
             example at 1537 (rows or tokens in blocks of 1024 get a partial last block) and, for a last dim, above
             the tile sizes kernels use (1537 = 1024 + 513 and 9729 = 2 * 4096 + 1537: odd, partial last tiles of 1024
             and of 4096; half of 9729 is still past 4096 with a partial tile); a size the spec's `checks:` refuse
             moves to the nearest one above that they allow (an even last dim of a gated activation: 9730)
  size-separate  a size several dims share, changed at one dim position only (counted from the last dim), so
             that two sizes a kernel could confuse differ
  value      the floating inputs scaled towards their dtype's range, with a NaN, with infinities, all negative, and
             each with a row of zeros
  dim        every valid value of an int dim argument (-rank .. rank-1)
  scalar     each int/float/Scalar argument at 0, negative, positive, moved and (an int) doubled, a bool flipped, a
             defaulted one moved
  optional   the `Tensor?` arguments the example gives left out (None), every subset of them
  promote    each input whose dtype the semantics promote (`promote(a, b)`) in another dtype than the others
  defaults   the defaulted arguments the example gives left out, so that each default is used once
  index-dtype  each int64 or int32 tensor (indices, slots, block tables) in the other one
  offset     every tensor a view one element into a larger buffer (a storage offset, unaligned)
  rank       one more leading dim (2) on the inputs of the highest rank, where the reference takes it
  duplicate  an index tensor (exact, or drawn into a size) with its first index repeated, unless `unique`
  extreme    the first example's floating inputs with each row's largest value in its first element (the smallest in
             its last), and the other way round at the odd and first tile size variants of the row's size: along
             the `dim` argument, else the last dim (a row max or norm that skips a 1-element tail, or its head, shows;
             random data puts the extreme there once in a row's length)

A variant is an input of the op when its reference (the oracle) accepts it and its fake's `checks:` hold (a size, scalar
or dim variant outside them is left out: the kernel need not take it); the checks skip the others. Nothing here
is random beyond seeded generators: the same project tries the same inputs on every run.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

Call = dict[str, Any]

SWEPT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)  # every example runs in each (and in float64)
# |values| the `value` variant scales random floating inputs to (at most 4x this): past what half-precision
# arithmetic holds (65504 for float16, so bfloat16 through float16 overflows), but not so far that float32
# arithmetic on them (a square, a sum of squares) would: a kernel then matches its reference, whatever the dtype.
LARGE = {torch.float16: 1e4, torch.bfloat16: 1e5, torch.float32: 1e5, torch.float64: 1e5}
# last dims past the tile sizes kernels use (1024, 4096), odd, with a partial last tile of each; the half of 9729 (the
# output of a gated activation, 4865) is still past 4096, with partial tiles too
TILE_SIZES = (1537, 9729)
MAX_ELEMENTS = 1 << 20  # a size variant making some tensor larger than this shrinks the other sizes, or is left out
# the kinds of variant that may leave the spec's `checks:` (left out where they do): a dtype check
# (`qweight.dtype == int32`, AWQ's packed weight) is as much the op's contract as a size check
CHECKED_KINDS = ("size", "size-edge", "size-tile", "size-separate", "rank", "duplicate", "scalar", "default", "dim",
                 "dtype", "float64", "promote", "index-dtype")
# the message of a generated fake's `checks:` (opgen/render/fakes.py): the input is outside the op's declared contract
DECLARED_CHECK = re.compile(r"(ops\[\d+\]\.checks\[\d+\]) in opgen\.yaml does not hold")
DIM_NAMES = ("dim", "axis", "dimension")  # an int argument so named (or dim0, axis1, ...) indexes a dimension


class Unsatisfiable(Exception):
    """The call's sizes leave no values in an argument's domain (more unique indices than rows)."""


@dataclass(frozen=True)
class Domain:
    """Where an argument's values live (`ops[i].inputs.<name>` in opgen.yaml). `low`/`high`: a closed range (None:
    unbounded); `index_into`: integers in [0, index_into(**call)); `unique`: no value twice; `finite`: no NaN or
    infinity; `nonempty`: no size of it is 0; `values` (a scalar): the only values it takes."""

    low: float | None = None
    high: float | None = None
    index_into: Callable[..., int] | None = None
    unique: bool = False
    finite: bool = False
    nonempty: bool = False
    values: tuple | None = None

    def allows(self, value: float) -> bool:
        if self.values is not None:
            return value in self.values
        if math.isnan(value) or math.isinf(value):
            return not self.finite and self.low is None and self.high is None and self.index_into is None
        if self.index_into is not None:
            return value >= 0
        return (self.low is None or value >= self.low) and (self.high is None or value <= self.high)

    @property
    def bounded(self) -> bool:
        return self.low is not None or self.high is not None or self.index_into is not None


@dataclass(frozen=True)
class Draw:
    """A random tensor of an argument with a `Domain`, drawn once the call is complete (its bounds may read the call's
    other arguments): see `drawn`."""

    shape: tuple[int, ...]
    dtype: torch.dtype


@dataclass(frozen=True)
class Variant:
    """One call of the tiers that explore the inputs: an example, or an example changed in one way. `label` says how
    (`examples[0] with its size 16 as 1537`); `kind` is the kind of change (the module docstring), `example` which
    example it came from, `names` the arguments changed."""

    label: str
    call: Call
    kind: str = "example"
    example: int = 0
    names: tuple[str, ...] = ()
    hint: str = ""  # where the spec says this input is not one of the op's (`ops[i].inputs.x: {finite: true}`)
    exact: frozenset = frozenset()  # the arguments of the example that hold exact values (never drawn anew)


# --- drawing values ------------------------------------------------------------------------------------------------


def random_tensor(shape: tuple[int, ...], dtype: torch.dtype, g: torch.Generator) -> torch.Tensor:
    """Random values of any dtype from a seeded generator (small integers for integer dtypes)."""
    if dtype.is_floating_point or dtype.is_complex:
        return torch.randn(shape, generator=g, dtype=torch.float32).to(dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    return torch.randint(0, 8, shape, generator=g).to(dtype)


def draw(shape: tuple[int, ...], dtype: torch.dtype, g: torch.Generator, domain: Domain | None, call: Call
         ) -> torch.Tensor:
    """Random values of `shape` and `dtype` in `domain` (whose `index_into` reads `call`); Unsatisfiable when none."""
    if domain is None:
        return random_tensor(shape, dtype, g)
    count = math.prod(shape)
    if domain.index_into is not None:
        rows = int(domain.index_into(**call))
        if count and (rows <= 0 or (domain.unique and count > rows)):
            raise Unsatisfiable(f"{count} indices into {rows} rows" + (", unique" if domain.unique else ""))
        values = (torch.randperm(rows, generator=g)[:count] if domain.unique
                  else torch.randint(0, max(rows, 1), (count,), generator=g))
        return values.reshape(shape).to(dtype)
    if dtype.is_floating_point:
        values = torch.randn(shape, generator=g, dtype=torch.float64)
        if domain.low is not None and domain.high is not None:
            values = domain.low + (domain.high - domain.low) * torch.rand(shape, generator=g, dtype=torch.float64)
        elif domain.low is not None:
            values = domain.low + values.abs()
        elif domain.high is not None:
            values = domain.high - values.abs()
        return values.to(dtype)
    low = int(domain.low) if domain.low is not None else 0
    high = int(domain.high) if domain.high is not None else low + 7
    if domain.unique:
        if count > high - low + 1:
            raise Unsatisfiable(f"{count} unique values in [{low}, {high}]")
        return (low + torch.randperm(high - low + 1, generator=g)[:count]).reshape(shape).to(dtype)
    return torch.randint(low, high + 1, shape, generator=g).to(dtype)


def drawn(domains: dict, calls: list[Call], g: torch.Generator) -> list[Call]:
    """`calls` with every `Draw` replaced by values from its argument's domain (`domains`: name -> Domain), drawn in
    argument order after the rest of the call exists."""
    def resolve(call: Call) -> Call:
        done = dict(call)
        for name, value in call.items():
            done[name] = _map(lambda item, name=name: draw(item.shape, item.dtype, g, domains.get(name), done)
                              if isinstance(item, Draw) else item, value)
        return done
    return [resolve(call) for call in calls]


def _map(fn: Callable, value):
    if isinstance(value, (list, tuple)):
        return type(value)(_map(fn, item) for item in value)
    return fn(value)


def _tensors(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in _tensors(item)]
    return []


def _tensor_map(fn: Callable[[torch.Tensor], Any], value):
    return _map(lambda item: fn(item) if isinstance(item, torch.Tensor) else item, value)


def _same(a, b) -> bool:
    ta, tb = _tensors(a), _tensors(b)
    return len(ta) == len(tb) and all(
        x.shape == y.shape and x.dtype == y.dtype and bool(((x == y) | (x.isnan() & y.isnan())
                                                             if x.is_floating_point() else x == y).all())
        for x, y in zip(ta, tb, strict=True))


# --- the variants --------------------------------------------------------------------------------------------------


@dataclass
class _Example:
    """One example being varied: its call at seed 0, which arguments hold exact values (the same at every seed), and
    how to draw a tensor of an argument anew."""

    op: Any
    index: int
    call: Call
    exact: set[str]
    seed: int = 0
    found: list[Variant] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"examples[{self.index}]"

    def domain(self, name: str) -> Domain | None:
        return (self.op.inputs or {}).get(name)

    def random(self, name: str) -> bool:
        return name not in self.exact

    def add(self, kind: str, label: str, call: Call | None, names: Sequence[str] = (), hint: str = "") -> None:
        if call is not None and not (kind in CHECKED_KINDS and self.op.checked and refused_by_checks(self.op, call)):
            self.found.append(Variant(f"{self.where} {label}", call, kind, self.index, tuple(names), hint,
                                      frozenset(self.exact)))

    def redrawn(self, call: Call, change: Callable[[str, torch.Tensor], torch.Tensor | None]) -> Call | None:
        """`call` with each random tensor `change(name, t)` gives (None: unchanged), then the tensors of arguments with
        a domain drawn anew (their bounds may have changed); None when a domain cannot be met."""
        self.seed += 1
        g = torch.Generator().manual_seed(1000 + self.seed)
        out = {}
        for name, value in call.items():
            if not self.random(name):
                out[name] = value
                continue
            out[name] = _tensor_map(lambda t, name=name: _or(change(name, t), t), value)
        for name, value in out.items():
            domain = self.domain(name)
            if domain is not None and self.random(name) and domain.index_into is not None:
                try:
                    out[name] = _tensor_map(lambda t, domain=domain: draw(tuple(t.shape), t.dtype, g, domain, out),
                                            value)
                except Unsatisfiable:
                    return None
        return out

    def fresh(self, name: str, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """A random tensor of argument `name` (one with an `index_into` domain is drawn by `redrawn` afterwards)."""
        self.seed += 1
        domain = self.domain(name)
        if domain is not None and domain.index_into is not None:
            return torch.zeros(shape, dtype=dtype)
        return draw(shape, dtype, torch.Generator().manual_seed(2000 + self.seed), domain, {})


def refused_by_checks(op, call: Call) -> str:
    """The field of the spec's check (`ops[0].checks[1]`) that the op's fake refuses `call` by, traced on fake tensors
    (no kernel runs); "" when the fake takes it or fails otherwise (the fake tier reports that)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    with FakeTensorMode(shape_env=ShapeEnv()) as mode:
        try:
            op({name: _tensor_map(lambda t: mode.from_tensor(t, static_shapes=True), value)
                for name, value in call.items()})
        except Exception as error:  # noqa: BLE001  (only a declared check's message counts)
            found = DECLARED_CHECK.search(str(error))
            return found.group(1) if found else ""
    return ""


def _or(value, default):
    return default if value is None else value


_RECENT: dict = {}  # the variants of the last ops asked for: several tests of one op share them


def variants(op, examples: Callable[[int], list[Call]]) -> list[Variant]:
    """Every example with three seeds (exact index tensors permuted), then changed one way at a time (the module
    docstring). `op` is opgen.testing.Op. The calls are shared: a caller clones a call before running the op on it."""
    key = (op.overload, op.field, examples)
    if key not in _RECENT:
        if len(_RECENT) >= 2:
            _RECENT.pop(next(iter(_RECENT)))
        _RECENT[key] = _variants(op, examples)
    return _RECENT[key]


def _variants(op, examples: Callable[[int], list[Call]]) -> list[Variant]:
    by_seed = [examples(seed) for seed in (0, 1, 2)]
    found: list[Variant] = []
    for index, base in enumerate(by_seed[0]):
        exact = {name for name, value in base.items() if _same(value, by_seed[1][index][name])}
        exact_tensors = any(_tensors(base[name]) for name in exact)
        for seed in (0, 1, 2):
            permuted = ", index tensors permuted" if seed and exact_tensors else ""
            call = _permuted_indices(by_seed[seed][index], exact, seed)
            found.append(Variant(f"examples[{index}], seed {seed}{permuted}", call, "example", index,
                                 exact=frozenset(exact)))
        example = _Example(op, index, base, exact)
        for kind in (_dtype_variants, _size_variants, _value_variants, _dim_variants, _scalar_variants,
                     _optional_variants, _promote_variants, _defaults_used_variants, _index_dtype_variants,
                     _offset_variants, _rank_variants, _duplicate_index_variants, _extreme_variants,
                     _leading_tile_variants):  # (new kinds go last: the draws of the others stay as they were)
            kind(example)
        found += example.found
    return found


def _permuted_indices(call: Call, exact: set, seed: int) -> Call:
    """Exact integer tensors of distinct values (slots, indices) in another order per seed: still distinct and in
    range, so a kernel that froze or reordered them shows."""
    def permute(t: torch.Tensor) -> torch.Tensor:
        if seed == 0 or t.dim() != 1 or t.numel() < 2 or t.is_floating_point() or t.dtype == torch.bool:
            return t
        if t.unique().numel() != t.numel():
            return t
        return t[torch.randperm(t.numel(), generator=torch.Generator().manual_seed(seed))]
    return {name: _tensor_map(permute, value) if name in exact else value for name, value in call.items()}


def main_dtype(call: Call) -> torch.dtype | None:
    return next((t.dtype for t in _tensors(list(call.values())) if arithmetic(t)), None)


def arithmetic(t: torch.Tensor) -> bool:
    """A floating tensor torch computes with on CPU: float8 ones (a quantised result buffer) are only cast to and
    from, so no value or dtype variant changes them."""
    return t.is_floating_point() and t.element_size() > 1


def _dtype_variants(example: _Example) -> None:
    """The example's floating tensors (those of its first one's dtype) in each swept dtype and in float64: random
    ones drawn anew in it (a float16 draw cast up would hide float16 arithmetic), exact ones cast."""
    main = main_dtype(example.call)
    if main is None:
        return
    swept = example.op.dtypes or (*SWEPT_DTYPES, torch.float64)
    for dtype in swept:
        if dtype == main:
            continue

        def change(name, t, dtype=dtype):
            return example.fresh(name, tuple(t.shape), dtype) if t.dtype == main else None
        call = example.redrawn(example.call, change)
        if call is not None:
            call = {name: _tensor_map(lambda t, d=dtype: t.to(d) if t.dtype == main else t, value)
                    if not example.random(name) else value for name, value in call.items()}
        hint = (f"{example.op.field}.dtypes: the floating dtypes the op takes" if dtype == torch.float64 else "")
        example.add("float64" if dtype == torch.float64 else "dtype", f"in {_dtype_name(dtype)}", call, hint=hint)


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _size_variants(example: _Example) -> None:
    """Each size of the example's random tensors (one size symbol: the sizes equal to it change together) at 1, at 0,
    odd and larger, and a last dim at each TILE_SIZES; sizes an exact tensor has stay."""
    frozen = {size for name in example.exact for t in _tensors(example.call[name]) for size in t.shape}
    random = [t for name, value in example.call.items() if example.random(name) for t in _tensors(value)]
    sizes = sorted({size for t in random for size in t.shape} - frozen - {0})
    last = {t.shape[-1] for t in random if t.dim()}
    nonempty = [name for name, domain in (example.op.inputs or {}).items() if domain.nonempty]
    for size in sizes:
        odd, targets = _size_targets(size, size in last)
        for new in targets:
            if new == 0 and any(size in t.shape for name in nonempty for t in _tensors(example.call.get(name))):
                continue
            _add_size_variant(example, size, new, odd)
        _separated_size_variants(example, size, odd)


def _leading_tile_variants(example: _Example) -> None:
    """On the first example, each size of the random tensors that no last dim has at the first of TILE_SIZES, the
    other leading sizes at 2 at most (rows stay as wide): a kernel taking rows or tokens in blocks of 1024 gets a
    partial last block, which no example reaches. (One example suffices: the block is the kernel's, not the data's.)"""
    if example.index:
        return
    frozen = {size for name in example.exact for t in _tensors(example.call[name]) for size in t.shape}
    random = [t for name, value in example.call.items() if example.random(name) for t in _tensors(value)]
    keep = frozen | {t.shape[-1] for t in random if t.dim()}
    for size in sorted({size for t in random for size in t.shape} - keep - {0, 1}):
        def shape_of(t: torch.Tensor, size=size) -> tuple[int, ...]:
            return tuple(TILE_SIZES[0] if s == size else s if s in keep else min(s, 2) for s in t.shape)

        if size >= TILE_SIZES[0] or any(math.prod(shape_of(t)) > MAX_ELEMENTS for t in random):
            continue

        def change(name, t, shape_of=shape_of):
            return example.fresh(name, shape_of(t), t.dtype) if shape_of(t) != tuple(t.shape) else None
        example.add("size-tile", f"with its size {size} as {TILE_SIZES[0]} (other leading sizes at 2 at most)",
                    example.redrawn(example.call, change), _with_size(example, size))


def _separated_size_variants(example: _Example, size: int, new: int) -> None:
    """A size shared by several dims (counted from the last: heads in a key's dim -2 and a cache's, the block size in
    the caches' dim -3) as `new` at one of those positions only, where there are two or more: equal in the example,
    they always moved together, so a kernel reading one for the other passed. The reference says whether the op takes
    the call (one that needs the sizes equal refuses it)."""
    positions: dict[int, list[str]] = {}
    for name, value in example.call.items():
        if example.random(name):
            for t in _tensors(value):
                for dim, s in enumerate(t.shape):
                    if s == size and name not in positions.setdefault(dim - t.dim(), []):
                        positions[dim - t.dim()].append(name)
    if len(positions) < 2 or size < 2:  # (a size of 1 is a broadcast dim more often than a size a kernel reads)
        return
    for dim, names in sorted(positions.items()):
        def change(name, t, dim=dim, names=names):
            if name not in names or t.dim() < -dim or t.shape[dim] != size:
                return None
            shape = list(t.shape)
            shape[dim] = new
            return example.fresh(name, tuple(shape), t.dtype)
        example.add("size-separate", f"with its size {size} as {new} at dim {dim} of {', '.join(names)} only",
                    example.redrawn(example.call, change), names)


def _size_targets(size: int, last_dim: bool) -> tuple[int, list[int]]:
    """(odd, what `size` becomes): 1, 0, `odd` (odd and larger) and, for a last dim, each TILE_SIZES."""
    odd = 3 if size == 1 else size + 1 if size % 2 == 0 else size + 2
    targets = [1, 0, odd] + (list(TILE_SIZES) if last_dim else [])
    return odd, [t for t in dict.fromkeys(targets) if t != size]


def _add_size_variant(example: _Example, size: int, new: int, odd: int) -> None:
    """`size` as `new`, or where the spec's `checks:` refuse that, as the nearest size above it they allow (named
    in the label); left out when none near it is allowed."""
    kind = "size" if new == odd else "size-edge" if new <= 1 else "size-tile"
    call = _resized(example, example.call, size, new)
    label = f"with its size {size} as {new}"
    refused = refused_by_checks(example.op, call) if call is not None and example.op.checked else ""
    if refused:
        call = None
        for allowed in _sizes_above(new) if new else ():
            if allowed == size:
                continue
            call = _resized(example, example.call, size, allowed)
            if call is not None and not refused_by_checks(example.op, call):
                label = f"with its size {size} as {allowed} ({new} is outside {refused})"
                break
            call = None
    hint = ("`{nonempty: true}` in " + ", ".join(f"{example.op.field}.inputs.{name}" for name in _with_size(
        example, size)) + " if the op never takes an empty one") if new == 0 else ""
    example.add(kind, label, call, _with_size(example, size), hint)


def _sizes_above(size: int) -> list[int]:
    """The sizes tried, in order, in place of a size the spec's checks refuse: the next 8 sizes, then the next
    multiples of 16 to 128 (a check wants the size even, a multiple of a block, ...)."""
    return list(dict.fromkeys([size + step for step in range(1, 9)]
                              + [(size // block + 1) * block for block in (16, 32, 64, 128)]))


def _with_size(example: _Example, size: int) -> list[str]:
    return [name for name, value in example.call.items() if example.random(name)
            and any(size in t.shape for t in _tensors(value))]


def _resized(example: _Example, call: Call, size: int, new: int) -> Call | None:
    """`call` with the size symbol `size` as `new` in every random tensor (drawn anew); when that makes a tensor
    larger than MAX_ELEMENTS its other sizes above 8 become 8, then above 2 become 2 (None if still too large)."""
    def shape_of(t: torch.Tensor, others: int | None) -> tuple[int, ...]:
        return tuple(new if s == size else (min(s, others) if others else s) for s in t.shape)

    for others in (None, 8, 2):
        shapes = [shape_of(t, others) for name, value in call.items() if example.random(name) for t in _tensors(value)]
        if all(math.prod(shape) <= MAX_ELEMENTS for shape in shapes):
            break
    else:
        return None

    def change(name, t, others=others):
        if size not in t.shape and not others:
            return None
        return example.fresh(name, shape_of(t, others), t.dtype)
    return example.redrawn(call, change)


def smaller_calls(op, variant: Variant) -> list[tuple[str, Call]]:
    """Smaller calls like `variant.call` (to find a failure's smallest input): each size of its random tensors at 1,
    2 and half of it, one at a time; (description, call) pairs."""
    example = _Example(op, variant.example, variant.call, set(variant.exact), seed=500)
    sizes = sorted({s for name, value in variant.call.items() if example.random(name) for t in _tensors(value)
                    for s in t.shape if s > 1}, reverse=True)
    found = []
    for size in sizes:
        for new in dict.fromkeys((1, 2, size // 2)):
            if new < size:
                call = _resized(example, variant.call, size, new)
                if call is not None:
                    found.append((f"size {size} as {new}", call))
    return found


def _floating_random(example: _Example) -> list[str]:
    return [name for name, value in example.call.items() if example.random(name)
            and any(arithmetic(t) and t.numel() for t in _tensors(value))
            and name not in out_arguments(example.op)]


OUT_NAMES = ("out", "output", "result")  # a written argument so named (or out_*, *_out) is an out=, not a state buffer


def out_arguments(op) -> tuple[str, ...]:
    """The `out=` arguments: what a torch.Tag.out op returns, and the arguments an op writes that are keyword-only
    (ATen's convention) or named as outputs (`out`, `result` as vLLM names them, `out_y`, `y_out`: custom_op takes
    no keyword-only tensor). A KV cache or a state buffer the op updates is neither."""
    if getattr(op, "tag", "") == "out":
        return tuple(op.returned)
    return tuple(a.name for a in op.arguments if a.name in op.written and (
        a.kwarg_only or a.name in OUT_NAMES or a.name.startswith("out_") or a.name.endswith("_out")))


def _value_variants(example: _Example) -> None:
    """The random floating inputs scaled towards their dtype's range, with a NaN, with +-inf, all negative (each
    within its domain), and each with its first row (along the last dim) all zero."""
    names = _floating_random(example)
    if not names:
        return
    field_of = example.op.field

    def domain_ok(name: str, *values: float) -> bool:
        domain = example.domain(name)
        return domain is None or all(domain.allows(v) for v in values)

    def each(kind: str, label: str, fn: Callable[[str, torch.Tensor], torch.Tensor], values: Sequence[float],
             hint: str = "") -> None:
        chosen = [name for name in names if domain_ok(name, *values)]
        if chosen:
            call = {name: _tensor_map(lambda t, name=name: fn(name, t) if t.is_floating_point() else t, value)
                    if name in chosen else value for name, value in example.call.items()}
            example.add(kind, label, call, chosen, hint.format(names=", ".join(chosen)))

    def special(value: float, at: int) -> Callable:
        def put(_name: str, t: torch.Tensor) -> torch.Tensor:
            t = t.contiguous().clone()
            t.view(-1)[at % t.numel()] = value
            return t
        return put

    finite_hint = "`{{finite: true}}` in " + field_of + ".inputs.<name> ({names}) if the op never sees one"
    _large_variants(example, [name for name in names if domain_ok(name, 1e5)])
    each("value", "with a NaN in its floating inputs", special(float("nan"), 1), [float("nan")], finite_hint)
    each("value", "with an inf in its floating inputs", lambda n, t: special(float("-inf"), 2)(n, special(
        float("inf"), 0)(n, t)), [float("inf")], finite_hint)
    each("value", "with every floating input negative", lambda _n, t: -t.abs() - 0.5, [-1.0],
         "`range: [0, null]` in " + field_of + ".inputs.<name> ({names}) if its values are never negative")
    for name in names:
        domain = example.domain(name)
        if domain is not None and domain.low is not None and domain.high is not None:
            call = {**example.call, name: _tensor_map(lambda t, d=domain: _edges(t, d), example.call[name])}
            example.add("value", f"with {name} at the ends of its range [{domain.low}, {domain.high}]", call, [name])
        if domain_ok(name, 0.0):
            call = {**example.call, name: _tensor_map(_zero_row, example.call[name])}
            example.add("value", f"with a row of zeros in {name}", call, [name])


def _large_variants(example: _Example, names: list[str]) -> None:
    """`names`' floating tensors scaled to about LARGE of each swept dtype, in that dtype (tensors of the example's
    first floating dtype drawn anew in it): what overflows in half precision shows in each."""
    main = main_dtype(example.call)
    if not names or main is None:
        return
    for dtype in dict.fromkeys((main, *(example.op.dtypes or (*SWEPT_DTYPES, torch.float64)))):
        scale = LARGE.get(dtype, 1e5)

        def change(name, t, dtype=dtype, scale=scale):
            if name not in names or not t.is_floating_point():
                return None
            t = example.fresh(name, tuple(t.shape), dtype) if t.dtype == main else t
            return (t.double().clamp(-4, 4) * scale).to(t.dtype)
        call = example.redrawn(example.call, change)
        hint = ("a `range:` in " + example.op.field + f".inputs.<name> ({', '.join(names)}) if the op's values are "
                "bounded")
        example.add("value", f"in {_dtype_name(dtype)} with its floating inputs scaled to about {scale:g} (towards the "
                    "dtype's range)", call, names, hint)


def _edges(t: torch.Tensor, domain: Domain) -> torch.Tensor:
    """Every value at one end of the domain's range, alternating."""
    if not t.is_floating_point():
        return t
    ends = torch.tensor([domain.low, domain.high], dtype=torch.float64)
    return ends[torch.arange(t.numel()) % 2].reshape(t.shape).to(t.dtype)


def _zero_row(t: torch.Tensor) -> torch.Tensor:
    if not t.is_floating_point() or not t.numel():
        return t
    if not t.dim():
        return torch.zeros_like(t)
    t = t.contiguous().clone()
    t.view(-1, t.shape[-1])[0] = 0
    return t


_SCALAR_TYPES = (torch.IntType, torch.FloatType, torch.NumberType, torch.BoolType)  # int and SymInt are IntType


def _scalar_arguments(op) -> list:
    return [a for a in op.arguments if isinstance(a.type, _SCALAR_TYPES)]


def _is_int(argument) -> bool:
    return isinstance(argument.type, torch.IntType)


def is_dim(name: str) -> bool:
    stem = name.rstrip("0123456789")
    return stem in DIM_NAMES or stem.endswith("_axis")


def _dim_variants(example: _Example) -> None:
    """Every value an int dim argument can take (-rank .. rank-1 of the example's largest tensor)."""
    rank = max((t.dim() for t in _tensors(list(example.call.values()))), default=0)
    for argument in _scalar_arguments(example.op):
        if not _is_int(argument) or not is_dim(argument.name):
            continue
        given = example.call.get(argument.name, argument.default_value if argument.has_default_value() else None)
        domain = example.domain(argument.name)
        listed = domain.values if domain is not None else None
        for value in listed if listed is not None else range(-rank, rank):
            if value != given and (domain is None or domain.allows(value)):
                example.add("dim", f"with {argument.name}={value}", {**example.call, argument.name: value},
                            [argument.name], f"a `range:` or `values:` in {example.op.field}.inputs.{argument.name}")


def moved(default):
    """Another value of a defaulted scalar: far enough from the default that a kernel ignoring it shows."""
    if isinstance(default, bool):
        return not default
    if isinstance(default, int):
        return default + 1
    if isinstance(default, float):
        return 0.5 if abs(default) < 0.1 else 2 * default
    return None


def _scalar_variants(example: _Example) -> None:
    """Each scalar at 0, negative, positive and (given) moved off its value, in its domain; a bool flipped; a defaulted
    one not given moved off its default (the `default` kind)."""
    for argument in _scalar_arguments(example.op):
        if is_dim(argument.name) and _is_int(argument):
            continue
        default = argument.default_value if argument.has_default_value() else None
        given = argument.name in example.call
        value = example.call[argument.name] if given else default
        if isinstance(value, bool) or isinstance(argument.type, torch.BoolType):
            _flipped_bool(example, argument.name, value, default, given)
        elif isinstance(value, (int, float)):
            _moved_number(example, argument, value, default, given)


def _flipped_bool(example: _Example, name: str, value, default, given: bool) -> None:
    """A bool scalar flipped; one not given flipped off its default (the `default` kind)."""
    if value is None:
        return
    example.add("default" if not given else "scalar", f"with {name}={not value!r}"
                + (f" (its default is {default!r})" if not given else ""), {**example.call, name: not value}, [name])


def _moved_number(example: _Example, argument, value, default, given: bool) -> None:
    """An int or float scalar at 0, negative, positive and (given) moved off its value, in its domain; one not given
    moved off its default first (the `default` kind)."""
    name = argument.name
    domain = example.domain(name)
    listed = domain.values if domain is not None else None  # the spec lists every value: try each, no other
    other = None if given else _moved_default(example, name, default, listed)
    for new in _number_candidates(argument, value, given, listed):
        if new not in (value, other) and (domain is None or domain.allows(new)):
            example.add("scalar", f"with {name}={new!r}", {**example.call, name: new}, [name],
                        f"`range:` or `values:` in {example.op.field}.inputs.{name} if the op never takes {new!r}")


def _moved_default(example: _Example, name: str, default, listed) -> Any:
    """The value a defaulted scalar the example does not give is tried at (added where its domain allows it)."""
    domain = example.domain(name)
    other = moved(default) if listed is None else next((v for v in listed if v != default), None)
    if other is not None and (domain is None or domain.allows(other)):
        example.add("default", f"with {name}={other!r} (its default is {default!r})", {**example.call, name: other},
                    [name])
    return other


def _number_candidates(argument, value, given: bool, listed) -> list:
    """What a number scalar is tried at: the values its domain lists, else 0, negative, positive, moved off a given
    value and, for an int, doubled."""
    negative = -abs(value) if value else (-1 if isinstance(value, int) else -0.5)
    larger = moved(value) if given else None  # a kernel right up to the example's value only (a cap on k)
    # an int doubled: a block size, a group or head count is often refused at value + 1 (it must divide a size),
    # and a kernel with the example's value written in would go unseen
    doubled = 2 * value if _is_int(argument) and isinstance(value, int) and value >= 1 else None
    candidates = listed or (type(value)(0), type(value)(negative), type(value)(abs(value)), larger, doubled)
    return list(dict.fromkeys(c for c in candidates if c is not None))


def _optional_variants(example: _Example) -> None:
    """Each non-empty subset of the `Tensor?` arguments the example gives, left out (None)."""
    given = [a.name for a in example.op.arguments if isinstance(a.type, torch.OptionalType)
             and isinstance(a.type.getElementType(), torch.TensorType) and isinstance(example.call.get(a.name),
                                                                                   torch.Tensor)]
    for mask in range(1, 2 ** min(len(given), 4)):
        dropped = [name for bit, name in enumerate(given) if mask >> bit & 1]
        example.add("optional", f"with {', '.join(dropped)} None",
                    {**example.call, **dict.fromkeys(dropped)}, dropped)


def _promote_variants(example: _Example) -> None:
    """Each input of a `promote(a, b, ...)` of the semantics in another floating dtype than the rest."""
    main = main_dtype(example.call)
    other = torch.float32 if main != torch.float32 else torch.bfloat16
    allowed = example.op.dtypes or (*SWEPT_DTYPES, torch.float64)
    if main is None or other not in allowed:
        return
    names = dict.fromkeys(name for group in (example.op.promotes or ()) for name in group)
    for name in names:
        value = example.call.get(name)
        if not any(t.is_floating_point() for t in _tensors(value)):
            continue
        call = {**example.call, name: _tensor_map(lambda t: t.to(other) if t.is_floating_point() else t, value)}
        example.add("promote", f"with {name} in {_dtype_name(other)} (the semantics promote it)", call, [name])


def _defaults_used_variants(example: _Example) -> None:
    """The defaulted arguments the example gives, left out: the op then runs on its schema's defaults."""
    given = [a.name for a in example.op.arguments if a.has_default_value() and a.name in example.call]
    if given:
        call = {name: value for name, value in example.call.items() if name not in given}
        example.add("defaults", f"with {', '.join(given)} left out (their defaults)", call, given)


INDEX_DTYPES = {torch.int64: torch.int32, torch.int32: torch.int64}


def _index_dtype_variants(example: _Example) -> None:
    """Each argument of int64 (int32) tensors, random or exact, with them in int32 (int64): indexing takes both, a
    kernel that reads a block table as the example's dtype may not."""
    for name, value in example.call.items():
        found = [t.dtype for t in _tensors(value) if t.dtype in INDEX_DTYPES]
        if found:
            other = INDEX_DTYPES[found[0]]
            call = {**example.call, name: _tensor_map(lambda t, o=other: t.to(o) if t.dtype in INDEX_DTYPES else t,
                                                      value)}
            example.add("index-dtype", f"with {name} as {_dtype_name(other)}", call, [name])


def _offset_variants(example: _Example) -> None:
    """Every contiguous tensor of the call one element into a larger buffer (a view at storage offset 1, as a slice
    of a cache or a batch is): a kernel that reads from the storage's start, or assumes aligned memory, shows."""
    moved = [name for name, value in example.call.items() if any(t.is_contiguous() for t in _tensors(value))]
    if moved:
        call = {name: _tensor_map(lambda t: at_offset(t) if t.is_contiguous() else t, value)
                for name, value in example.call.items()}
        example.add("offset", "with every tensor at storage offset 1 (unaligned)", call, moved)


def at_offset(t: torch.Tensor, offset: int = 1) -> torch.Tensor:
    """A contiguous copy of `t` that starts `offset` elements into a larger buffer (unaligned for vector loads)."""
    buffer = torch.zeros(offset + t.numel(), dtype=t.dtype, device=t.device)  # no garbage read twice differs
    return buffer[offset:].view(t.shape).copy_(t)


def _rank_variants(example: _Example) -> None:
    """The random tensors of the highest rank with one more leading dim of 2 (drawn anew): a kernel written for the
    examples' rank (a reshape to 2-D, a loop over rows) shows where the reference is rank-generic; one that is not
    refuses the call, and `checks:` can say so."""
    if out_arguments(example.op):  # an out= op: its out tensor's shape follows the inputs', resized otherwise
        return
    random = {name: _tensors(value) for name, value in example.call.items() if example.random(name)}
    rank = max((t.dim() for ts in random.values() for t in ts), default=0)
    names = [name for name, ts in random.items() if any(t.dim() == rank for t in ts)]
    if not rank or not names:
        return

    def change(name, t):
        return example.fresh(name, (2, *t.shape), t.dtype) if name in names and t.dim() == rank else None
    example.add("rank", f"with a leading dim of 2 on {', '.join(names)}", example.redrawn(example.call, change), names)


def _duplicate_index_variants(example: _Example) -> None:
    """Each index tensor, exact or drawn into a size (`index_into`), not declared `unique`, with its second index
    equal to its first: a scatter that adds through `out[index] += src` loses one of the two."""
    for name, value in example.call.items():
        domain = example.domain(name)
        indexes = example.random(name) is False or (domain is not None and domain.index_into is not None)
        if not indexes or (domain is not None and domain.unique) or not isinstance(value, torch.Tensor):
            continue
        flat = value.reshape(-1)
        if value.dtype not in INDEX_DTYPES or flat.numel() < 2 or int(flat[0]) == int(flat[1]):
            continue
        repeated = value.contiguous().clone()
        repeated.view(-1)[1] = flat[0]
        example.add("duplicate", f"with {name} repeating an index ({name}[1] = {name}[0])",
                    {**example.call, name: repeated}, [name],
                    f"`{{unique: true}}` in {example.op.field}.inputs.{name} if the op never takes an index twice")


def _extreme_variants(example: _Example) -> None:
    """The first example's floating inputs with the extreme of each row (along the int `dim` argument given, else the
    last dim) at its head (the opposite extreme at its tail), then at its tail on the odd and first tile size variants
    of the row's size (a tail past whole vectors): a reduction that skips a 1-element tail (or starts one element
    in) is wrong only when the extreme is there, which random data makes one row length in a chance."""
    if example.index:  # the first example only: where the extreme lies is the data's, not the example's
        return
    names = _floating_random(example)
    dim = next((example.call[a.name] for a in _scalar_arguments(example.op) if _is_int(a) and is_dim(a.name)
                and isinstance(example.call.get(a.name), int)), -1)
    rows = {t.shape[dim] for name in names for t in _tensors(example.call[name]) if -t.dim() <= dim < t.dim()}
    if not names or not rows:
        return
    along = f"along dim {dim}" if dim != -1 else "along the last dim"
    tails = [(variant.label.removeprefix(f"{example.where} ") + ", ", variant.call) for variant in example.found
             if variant.kind in ("size", "size-tile") and _row_size(variant.call, names, dim) not in rows | {None}
             and _row_size(variant.call, names, dim) != TILE_SIZES[-1]]
    for head, (prefix, call) in [(True, ("", example.call)), *((False, tail) for tail in tails)]:
        where = "first" if head else "last"
        changed = {name: _tensor_map(lambda t, name=name, head=head: _extreme_at(t, dim, head, example.domain(name)),
                                     call[name]) if name in names else call[name] for name in call}
        example.add("extreme", f"{prefix}with the largest value of each row {along} in its {where} element", changed,
                    names)


def _row_size(call: Call, names: list[str], dim: int) -> int | None:
    return next((t.shape[dim] for name in names for t in _tensors(call.get(name)) if -t.dim() <= dim < t.dim()), None)


def _extreme_at(t: torch.Tensor, dim: int, head: bool, domain: Domain | None) -> torch.Tensor:
    """`t` with each row's first (`head`) or last element above every other of the row, and the other end below."""
    if not t.is_floating_point() or not -t.dim() <= dim < t.dim() or t.shape[dim] < 2 or not t.numel():
        return t
    t = t.clone()
    big = t.float().abs().amax(dim).nan_to_num(0.0) + 1
    high = torch.full_like(big, domain.high) if domain is not None and domain.high is not None else big
    low = torch.full_like(big, domain.low) if domain is not None and domain.low is not None else -big
    t.select(dim, 0 if head else -1).copy_(high)
    t.select(dim, -1 if head else 0).copy_(low)
    return t
