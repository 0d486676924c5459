"""A replacement computes what it replaces: in every dtype a form is traced in, the op's `reference:` (the oracle its
kernels are tested against) gives the form's composite's results bit for bit, or within the `tolerances:` the form
states. A model compiled with the fusions then gives eager's logits (bfloat16 Llama casts back before it scales by the
weight; an op that scales in float32 and casts moved bfloat16 logits by ~0.004).

Every shipped example with `fusion:` is rendered in-process (under a namespace of its own), its patterns.py and
reference.py imported; each form's traces give the shapes and dtypes, three seeds the values."""

from __future__ import annotations

import importlib
import sys
import zlib

import pytest
import torch
from new_helpers import REPO

from opgen.render.templates import render_package
from opgen.spec.load import load_spec_text

FUSED = sorted(path.stem for path in (REPO / "examples").glob("*.yaml") if "\n    fusion:" in path.read_text())


def _generated(root, example: str, edit=lambda text: text):
    text = (REPO / "examples" / f"{example}.yaml").read_text(encoding="utf-8")
    old = next(line for line in text.splitlines() if line.startswith("namespace: "))
    namespace = f"fzn_{example}_{zlib.crc32(edit(text).encode()) % 10_000}"
    spec = load_spec_text(edit(text.replace(old, f"namespace: {namespace}")), f"{example}.yaml")
    for planned in render_package(spec):
        path = root / namespace / planned.path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(planned.content, encoding="utf-8")
    sys.path.insert(0, str(root / namespace))
    return (importlib.import_module(f"{namespace}.patterns"), importlib.import_module(f"{namespace}.reference"),
            spec)


def _values(fusion, example: tuple, seed: int) -> dict | None:
    """Random values of a trace's metadata (None where an input is no floating tensor: indices need valid values)."""
    g = torch.Generator().manual_seed(seed)
    call = {}
    for name, meta in zip(fusion.inputs, example, strict=True):
        if not isinstance(meta, torch.Tensor):
            call[name] = 1e-5 * (seed + 1)
        elif not meta.is_floating_point():
            return None
        else:
            call[name] = (2 * torch.randn(meta.shape, generator=g)).to(meta.dtype)
    return {**call, **fusion.constants}


def differences(patterns, reference, spec) -> list[str]:
    """Per form, trace and seed where the op's reference and the composite differ beyond the form's tolerances."""
    found = []
    for op in spec.ops:
        if op.fusion is None:
            continue
        for fusion in getattr(patterns, f"{op.schema.name.upper()}_FORMS"):
            for example in fusion.example_inputs():
                for seed in range(3):
                    call = _values(fusion, example, seed)
                    if call is None or not fusion.holds(**call):
                        continue
                    got, want = getattr(reference, op.schema.name)(**call), fusion.composite(**call)
                    got, want = (got if isinstance(got, tuple) else (got,)), (want if isinstance(want, tuple) else (want,))
                    for index, (g, w) in enumerate(zip(got, want, strict=True)):
                        rtol, atol = fusion.tolerances.get(w.dtype, (0.0, 0.0))
                        if g.dtype != w.dtype or not torch.allclose(g.double(), w.double(), rtol, atol, equal_nan=True):
                            found.append(f"{fusion.field} ({fusion.name or 'form'}) in {w.dtype}, output {index}, "
                                         f"seed {seed}: max |op - composite| {(g.double() - w.double()).abs().max()}")
    return found


@pytest.mark.parametrize("example", FUSED)
def test_each_shipped_op_computes_its_forms_results_in_the_dtypes_they_are_traced_in(tmp_path, example):
    patterns, reference, spec = _generated(tmp_path, example)
    assert not differences(patterns, reference, spec)


def test_an_op_that_scales_in_float32_then_casts_differs_from_llamas_norm_in_half_precision(tmp_path):
    """Planted: rms_norm's reference as it was (the weight multiplied in float32, then the cast), where the Llama form
    casts back first and multiplies in x's dtype: caught in float16, not in float32. OLMo 2's and Helium's forms (the
    weight in float32) are within the tolerances they state, and without them differ."""
    def float32_scale(text: str) -> str:
        new = "      y = (gamma * (xf * rstd).to(x.dtype)).to(x.dtype)\n"
        assert new in text
        return text.replace(new, "      y = (xf * rstd * gamma.to(xf.dtype)).to(x.dtype)\n")
    found = differences(*_generated(tmp_path, "rms_norm", float32_scale))
    assert found and all("forms[0] (llama) in torch.float16, output 0" in line for line in found), found

    def no_tolerances(text: str) -> str:
        line = next(line for line in text.splitlines() if line.strip().startswith("tolerances: {float16"))
        return text.replace(line + "\n", "")
    found = differences(*_generated(tmp_path, "rms_norm", no_tolerances))  # OLMo 2's and Helium's, alike
    assert {line.split(", seed")[0] for line in found} == {"ops[0].fusion.forms[1] (olmo2) in torch.float16, output 0",
                                                           "ops[0].fusion.forms[2] (helium) in torch.float16, output 0"}


def test_a_rotation_that_leaves_the_pairs_de_interleaved_is_not_ernies_form(tmp_path):
    """Planted: rotary_every_two's Ernie 4.5 form written with rotary_interleaved's output order (`torch.cat` of the
    rotated halves where Ernie stacks each pair back in place): caught in both dtypes it is traced in; the shipped
    form (stack, then flatten) is the op's, bit for bit (test_each_shipped_op_... above)."""
    def concatenated(text: str) -> str:
        old = "            rotated = torch.stack((-x2, x1), dim=-1).flatten(-2)\n"
        assert old in text
        return text.replace(old, "            rotated = torch.cat((-x2, x1), dim=-1)\n")
    found = differences(*_generated(tmp_path, "rotary_pairs", concatenated))
    assert found and {line.split(" in ")[0] for line in found} == {"ops[2].fusion.forms[1] (ernie)"}, found
    assert {line.split(" in ")[1].split(",")[0] for line in found} == {"torch.bfloat16", "torch.float32"}, found
