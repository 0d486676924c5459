"""`opgen check`: climb the graph-entry triage ladder for an operator that already exists.

`command` (torch-free) parses the target and options, runs `worker` (which imports torch) in a
subprocess with a timeout per rung, classifies each failure with `signatures`, and renders the
report with `report`.
"""

from __future__ import annotations

# The ladder, in order. "import" registers the op (importing its module); the rest are the rungs of
# ../shared/reference/npugraph_ex.md §4, numbered 0-5 in the docs, "fusion" (a project's `fusion:` patterns), and
# npugraph_ex's production features after capture: its compile cache, capture_limit and multi-stream scopes.
RUNGS = ("import", "static", "eager", "opcheck", "aot_eager", "npugraph_ex", "fusion", "capture", "compile_cache",
         "capture_limit", "streams")
