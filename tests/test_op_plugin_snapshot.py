"""`opgen add` on a real op-plugin checkout (issue 27): benchmarks/check_op_plugin_snapshot.py's checks (the repo's
own torchnpugen steps, test_compatibility.py's JSON checks, the diff a reviewer reads, clang-format, re-adding).

Needs a checkout: OPGEN_OP_PLUGIN_ROOT=<op-plugin work tree or bare git directory> (it is cloned, never changed).
CI has no network to GitHub or gitcode: there the test skips, saying so; a CI with a mirror of the repository sets
the variable to it (`git clone --mirror https://gitcode.com/Ascend/op-plugin`)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from new_helpers import REPO

ROOT = os.environ.get("OPGEN_OP_PLUGIN_ROOT")


@pytest.mark.slow
@pytest.mark.skipif(not ROOT, reason="no op-plugin checkout: set OPGEN_OP_PLUGIN_ROOT to one (or to a bare mirror)")
def test_three_new_ops_on_the_real_checkout_pass_its_generator_and_compatibility_checks():
    sys.path.insert(0, str(REPO / "benchmarks"))
    from check_op_plugin_snapshot import NEW_OPS, run

    report = run(Path(ROOT), NEW_OPS, with_measure=False)
    assert not report.failed, "\n".join(f"{name}: {detail}" for name, _, detail in report.failed)
    assert len(report.checks) > 20
