"""Whether npugraph_ex is fetched, as opgen's own tests see it, once per process.

opgen's suite takes the cache as it finds it (tests/conftest.py switches the generated tests' fetch on first use off):
the README's test command passes on a fresh machine without the fetch, and with it. Tests that prove nothing without
npugraph_ex carry the `npugraph_ex` marker and skip, naming the fetch command; `.ci/run` runs them (`-m npugraph_ex`)
after fetching, with OPGEN_REQUIRE_NPUGRAPH_EX=1, where a skip is a failure."""

from __future__ import annotations

import pytest

from opgen.npugraph_ex import loader

NPUGRAPH_EX = loader().unavailable()  # None when fetched, else why not (the generated tests' skip reason)
NPUGRAPH_EX_CAPTURE = loader().unavailable(capture=True)
npugraph_ex = pytest.mark.npugraph_ex
skip_without_npugraph_ex = pytest.mark.skipif(NPUGRAPH_EX is not None, reason=str(NPUGRAPH_EX))
# a parametrize id's marks, or a module's pytestmark
NEEDS_NPUGRAPH_EX = [npugraph_ex, skip_without_npugraph_ex]


def needs_npugraph_ex(test):
    """A test that proves nothing without npugraph_ex: marked for .ci/run's npugraph_ex step, skipped without it."""
    return npugraph_ex(skip_without_npugraph_ex(test))
