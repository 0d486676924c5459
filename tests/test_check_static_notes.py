"""`opgen check`'s static rung reports what concerns an op that is registered: not opgen's advice on how to write
its registration (OPG107, "custom_op needs an explicit schema="), which a Library-registered op of a generated
project got before, though nothing in it registers with custom_op."""

from __future__ import annotations

import subprocess
import sys

SKIP_ALL_BUT_STATIC = [arg for rung in ("eager", "opcheck", "aot_eager", "npugraph_ex", "fusion", "capture",
                                        "compile_cache", "capture_limit", "streams") for arg in ("--skip", rung)]
MODULE = '''
import torch
lib = torch.library.Library("st_notes", "FRAGMENT")
lib.define("norm(Tensor x) -> (Tensor y, Tensor rstd)")
lib.define("scale(Tensor x, *, Tensor(a!) out) -> ()")
lib.impl("norm", lambda x: (x.clone(), x.sum(-1, keepdim=True)), "CPU")
lib.impl("norm", lambda x: (torch.empty_like(x), x.new_empty(x.shape[:-1] + (1,))), "Meta")
def _scale(x, *, out):
    out.copy_(x)
lib.impl("scale", _scale, "CPU")
lib.impl("scale", lambda x, *, out: None, "Meta")
'''


def _static(tmp_path, target: str) -> subprocess.CompletedProcess:
    (tmp_path / "st_notes_mod.py").write_text(MODULE)
    return subprocess.run([sys.executable, "-m", "opgen", "check", *SKIP_ALL_BUT_STATIC, target], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, check=False)


def test_static_rung_gives_no_registration_advice_for_a_registered_op(tmp_path):
    done = _static(tmp_path, "st_notes_mod:st_notes::norm")
    assert done.returncode == 0, done.stdout + done.stderr
    static = next(line for line in done.stdout.splitlines() if line.strip().startswith("static"))
    assert " pass " in static and "contract rules pass" in static, static
    assert "OPG107" not in static and "custom_op needs" not in static, static


def test_static_rung_still_reports_contract_warnings_of_a_registered_op(tmp_path):
    """The twin: a contract rule that concerns the registered op (OPG106: a keyword-only Tensor, which only the
    Library style can register) is still a note of the static rung."""
    done = _static(tmp_path, "st_notes_mod:st_notes::scale")
    static = next(line for line in done.stdout.splitlines() if line.strip().startswith("static"))
    assert "OPG106" in static, done.stdout + done.stderr
