"""The one table of known graph-entry failures: what `opgen check` says when a rung fails.

A signature matches a failure by rung, exception type and a regular expression on the message (or is
named directly by the worker when it finds a problem without an exception: a leftover copy, a host
sync, ...). Each maps to the layer at fault (the ladder of ../shared/reference/npugraph_ex.md §4),
likely root causes ranked most likely first, the next minimal action, and the opgen rule code when
one applies. The first matching row wins, so specific rows come before general ones. A failure no row
matches is "unclassified" (at the layer of its rung), with its evidence. `opgen check --explain ID` prints a row.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..contract import ALIASED_RETURN, SIDE_EFFECT_ONLY, TAG_CONTRACT
from ..lint.rules import (
    CAPTURE_UNSAFE,
    DISPATCH_KEY_SPELLING,
    DUPLICATE_DEF,
    FAKE_ALLOC_NO_DEVICE,
    FAKE_READS_DATA,
    FAKE_RETURNS_INPUT,
    FAKE_SIGNATURE,
    NO_FAKE,
    TODO_FAKE,
    UNDECLARED_MUTATION,
)

LAYERS = ("static", "eager", "dynamo-fx", "npugraph_ex", "ge-cann", "precision", "performance")
# Where a failure no row knows is shown, by rung.
RUNG_LAYERS = {"import": "eager", "static": "static", "eager": "eager", "opcheck": "dynamo-fx",
               "aot_eager": "dynamo-fx", "npugraph_ex": "npugraph_ex", "fusion": "dynamo-fx", "capture": "ge-cann",
               "compile_cache": "npugraph_ex", "capture_limit": "npugraph_ex", "streams": "ge-cann"}


@dataclass(frozen=True)
class Cause:
    """A likely cause that names a kernel: true only of an op with (`needs`) or without (`lacks`) a kernel at that
    dispatch key, so it is checked against the op's real dispatch keys before it is printed."""

    text: str
    needs: str | None = None
    lacks: str | None = None

    def holds(self, keys: set[str] | None) -> bool:
        """Unknown keys (the op never resolved): printed."""
        if keys is None:
            return True
        return (self.needs is None or self.needs in keys) and (self.lacks is None or self.lacks not in keys)

    def __str__(self) -> str:
        return self.text


def causes_for(signature: Signature, keys: set[str] | None) -> list[str]:
    """The row's causes that hold for an op with kernels at `keys` (None: not known, every cause)."""
    return [str(cause) for cause in signature.causes if not isinstance(cause, Cause) or cause.holds(keys)]


@dataclass(frozen=True)
class Signature:
    id: str
    layer: str | None  # None: the layer of the rung that failed (a crash or a hang)
    title: str
    causes: tuple[str | Cause, ...]
    next_action: str
    rule: str | None = None
    rungs: tuple[str, ...] = ()  # empty: any rung
    types: tuple[str, ...] = ()  # exception class names (the last dotted part); empty: any
    pattern: str | None = None  # regex searched in the message; None: named by the worker only

    def matches(self, rung: str, error: dict) -> bool:
        if self.pattern is None or (self.rungs and rung not in self.rungs):
            return False
        if self.types and error.get("type", "").rsplit(".", 1)[-1] not in self.types:
            return False
        text = f"{error.get('check') or ''}\n{error.get('type', '')}\n{error.get('message', '')}"
        return re.search(self.pattern, text, re.IGNORECASE | re.DOTALL) is not None


S = Signature
TABLE: tuple[Signature, ...] = (
    # --- registration (importing the module) ---
    S("op-defined-twice", "eager", "the op is defined twice",
      (("two `define`/`custom_op` calls for the same name (a module imported twice under two names, or "
       "copy-pasted registration)"), "a generated and a hand-written registration of the same op both imported"),
      "keep one definition per op; guard re-imports, or use a distinct overload name", DUPLICATE_DEF.code,
      ("import",), (), r"same name and overload name multiple times|already (has|have) a (kernel|definition)"),
    S("registration-failed", "eager", "importing the registering module raised",
      ("a bad schema string or dispatch key in `define`/`impl`", "an import the module needs is missing"),
      "run `python -c 'import MODULE'` and fix the first error it shows; `opgen lint` the module", None,
      ("import",), (), r"."),
    # --- eager ---
    S("no-kernel-for-device", "eager", "no kernel for the inputs' device (wrong dispatch key)",
      (("the kernel is registered at another dispatch key than the device of the inputs (e.g. 'Meta' or 'CUDA' "
       "instead of 'CPU', 'PrivateUse1' for NPU)"), ("the dispatch key is misspelled or registered for a backend "
       "this build lacks"), "the module registering the kernel was not imported"),
      "register the kernel with lib.impl(name, fn, 'CPU') (and 'PrivateUse1' for NPU); `opgen lint` checks key "
      "spellings", DISPATCH_KEY_SPELLING.code, ("eager", "opcheck", "aot_eager", "npugraph_ex"), ("NotImplementedError",),
      r"Could not run '.*' with arguments from the '\w+' backend"),
    S("custom-op-returns-input", "eager", "a custom_op returns (a view of) one of its inputs",
      ("the kernel returns a mutated input (`x.add_(1); return x`)", ("the kernel returns a view (`x.view(...)`, "
       "`x[0]`) of an input")),
      "return a clone (`return x.clone()`), or return nothing (`-> None`) and declare the mutation in mutates_args",
      ALIASED_RETURN.code, ("eager", "opcheck", "aot_eager"), (),
      r"must not also be an input to this custom operator|may not alias any inputs"),
    S("missing-autograd", "eager", "no autograd formula, and inputs require grad (training)",
      ("the op is used in training but only has an inference kernel", ("register_autograd was called on another "
       "overload or never imported")),
      "add torch.library.register_autograd(op, backward, setup_context=...) (opgen new: `autograd:` in the spec), "
      "or run the op under torch.no_grad()", None, (),
      (), r"no autograd formula was registered|autograd kernel was not registered|test_autograd_registration"),
    # --- fake / schema (opcheck, Dynamo, AOTAutograd) ---
    S("missing-fake", "dynamo-fx", "no fake (Meta) kernel: Dynamo cannot trace the op (graph break)",
      (Cause("register_fake / a Meta impl was never written", lacks="Meta"),
       "the fake is registered in a module that was not imported before torch.compile",
       "the fake is registered for another overload or namespace"),
      "add @torch.library.register_fake('ns::op') returning empty tensors of the output shape", NO_FAKE.code, (),
      ("UnsupportedOperatorException", "Unsupported", "OpCheckError", "RuntimeError"),
      r"UnsupportedOperatorException|does not support running with fake tensors|no fake impl|There was no fake impl registered|"
      r"unsupported operator: "),
    S("npugraph_ex-dynamic-output", "npugraph_ex", "npugraph_ex cannot capture a data-dependent output size",
      ("the op's output size depends on data (new_dynamic_size / nonzero-like): a captured graph fixes sizes",),
      "give the op a static upper bound (pad the output and return a count tensor), or keep it out of the "
      "captured region", None, ("npugraph_ex",), (), r"'ValuePack' and 'int'|unbacked|data-dependent"),
    S("fake-reads-data", "dynamo-fx", "the fake kernel reads tensor data (.item(), data-dependent size)",
      ("the fake computes an output size from tensor values (`x.sum().item()`, `int(n)`, `nonzero`)",
       "a data-dependent output size without torch.library.get_ctx().new_dynamic_size()"),
      "compute sizes from shapes only; for a data-dependent size use ctx = torch.library.get_ctx(); "
      "n = ctx.new_dynamic_size() (opgen semantics: `dynamic`)", FAKE_READS_DATA.code, (), (),
      r"data-dependent|DataDependentOutput|Cannot access data pointer|GuardOnDataDependentSymNode|"
      r"unbacked|_local_scalar_dense"),
    S("fake-wrong-device", "dynamo-fx", "the fake/Meta kernel allocates on a real device",
      ("the Meta kernel builds its result with torch.empty(shape) / torch.zeros(shape) without device=",
       "the fake returns a tensor on a fixed device instead of the inputs' device"),
      "allocate from an input: torch.empty_like(x), x.new_empty(shape), or device=x.device", FAKE_ALLOC_NO_DEVICE.code, (), (),
      r"device must be `meta`|Unhandled FakeTensor Device Propagation|found two different devices|"
      r"Expected all tensors to be on the same device"),
    S("undeclared-mutation", "dynamo-fx", "the kernel writes an argument the schema does not mark Tensor(a!)",
      ("an in-place call (`x.add_`, `x.copy_`, `out[...] = `) on an argument declared read-only",
       "mutates_args= misses the argument (custom_op)"),
      "declare it: `Tensor(a!) x` (Library) or mutates_args=['x'] (custom_op), and return nothing for it",
      UNDECLARED_MUTATION.code, (), (), r"is not defined as mutable but was mutated"),
    # torch compares the fake's aliasing with the kernel's as "check FAKE != REAL": True != False is the fake's
    S("fake-returns-input", "dynamo-fx", "the fake returns (a view of) an input where the kernel returns a new tensor",
      ("the fake returns an argument (`return x`) instead of allocating its output",
       "the fake returns a view of an input (`x.view(...)`, `x[0]`, `x.reshape(...)` of a contiguous x)"),
      "fix the fake, not the kernel: allocate the output there (torch.empty_like(x), x.new_empty(shape))",
      FAKE_RETURNS_INPUT.code, (), (), r"outputs_(alias_inputs|are_inputs) check True != False"),
    S("view-return", "dynamo-fx", "the kernel returns a view of an input the schema does not declare",
      ("the kernel returns `x.view(...)`, `x.reshape(...)` or `x[...]` of an argument", ("the kernel returns the "
       "argument itself")),
      "return a fresh tensor (`.clone()`); opgen never declares aliased returns", FAKE_RETURNS_INPUT.code, (), (),
      r"is not defined to alias output but was aliasing|outputs_alias_inputs|aliases? (an )?input"),
    S("aliased-return-annotation", "dynamo-fx", "the schema returns an alias (`-> Tensor(a!)`), which AOTAutograd "
      "cannot functionalize",
      ("an in-place op declared `-> Tensor(a!)` to return its mutated input", "a view op declared `-> Tensor(a)`"),
      "return nothing: `(Tensor(a!) x) -> ()` (opgen's default), or tag the op torch.Tag.inplace / torch.Tag.out",
      ALIASED_RETURN.code, (), (), r"output has alias annotations"),
    S("mutable-not-functionalizable", "dynamo-fx", "AOTAutograd cannot functionalize the mutable op",
      ("a mutable custom op on a torch older than 2.6 (no auto_functionalized)", ("a mutated argument that is "
       "not a plain Tensor (a list, an optional)")),
      "upgrade torch, or make each mutated argument a plain `Tensor(a!)`", None, (), (),
      r"operator that either mutates or its inputs"),
    S("fake-wrong-shape", "dynamo-fx", "the fake kernel's output shape differs from the real kernel's",
      ("the fake's shape formula is wrong for these inputs", ("the kernel's output shape depends on data "
       "(then the size is dynamic)")),
      "fix the fake's shape so it equals the kernel's for every input (opgen semantics print it once for both)",
      None, (), (), r"mismatched tensor metadata.*Shapes"),
    S("fake-wrong-dtype", "dynamo-fx", "the fake kernel's output dtype differs from the real kernel's",
      ("the fake hard-codes a dtype (`dtype=torch.float32`) while the kernel follows the input", ("the kernel "
       "upcasts (e.g. accumulates in float32) and the fake does not")),
      "give the fake the kernel's dtype rule (e.g. dtype=x.dtype)", None, (), (),
      r"mismatched tensor metadata.*Dtypes"),
    S("fake-wrong-metadata", "dynamo-fx", "the fake kernel's output metadata (strides, device, ...) differs",
      ("the fake returns a non-contiguous or differently strided tensor", "the kernel returns a view"),
      "allocate the fake output with the layout the kernel returns (torch.empty(shape) is contiguous)", None,
      (), (), r"mismatched tensor metadata"),
    S("fake-output-count", "dynamo-fx", "the fake returns None where the kernel returns a tensor, or a tensor where "
      "it returns None (a `Tensor?` or list return)",
      ("the fake decides an optional (`Tensor?`) output on another condition than the kernel (or not at all)",
       "the fake returns a list of another length than the kernel's `Tensor[]`"),
      "return None from the fake exactly where the kernel does, on the same arguments (a `Tensor?` output is "
      "decided by the inputs, never by data), and lists of the kernel's length", None, (), (),
      r"mismatched number of tensor outputs"),
    # The fake raised (opcheck's test_faketensor hands on the fake's own exception; Dynamo wraps it as "Dynamo
    # failed to run FX node with fake tensors: ... got E(...)"). After the rows above, which know particular
    # fake failures by their message, and before graph-break, which would take Dynamo's Unsupported wrappers.
    S("fake-not-implemented", "dynamo-fx", "the fake raises NotImplementedError (a TODO skeleton)",
      ("the fake is still the skeleton `opgen new` writes when the spec has no shape semantics",
       "the fake raises NotImplementedError for a case it does not cover, and the inputs hit it"),
      "write the fake's shape/dtype rule (return torch.empty_like(x) / x.new_empty(shape)); `opgen lint` "
      "finds TODO fakes", TODO_FAKE.code, (), (),
      r"^test_faketensor\nNotImplementedError\n|with fake tensors: .*: got NotImplementedError\("),
    S("fake-signature-mismatch", "dynamo-fx", "the fake cannot take the op's arguments (TypeError calling it)",
      ("the fake's parameters differ from the schema's (one missing, a default missing, a keyword-only one)",
       "the fake raises a TypeError itself"),
      "give the fake the schema's parameter list (for custom_op, the kernel's)", FAKE_SIGNATURE.code, (), (),
      r"TypeError when making fake tensor call|^test_faketensor\nTypeError\n.*argument"),
    S("fake-raised", "dynamo-fx", "the op raised when run with fake tensors (its fake, or a kernel traced on "
      "fake tensors)",
      ("the fake rejects these inputs (a shape or dtype check the kernel does not make, an assertion, a bug)",
       Cause("a CompositeImplicitAutograd kernel is traced with fake tensors and does what only real tensors allow "
             "(a type check, numpy, another library)", needs="CompositeImplicitAutograd")),
      "call the fake on the example's shapes (torch.library.opcheck(op, args)) and fix the exception in the "
      "evidence; a kernel that needs real tensors belongs at CPU/PrivateUse1 with a register_fake", None, (), (),
      r"Dynamo failed to run FX node with fake tensors|when making fake tensor call|^test_faketensor\n"),
    S("compiled-differs-opcheck", "precision", "outputs differ between eager and AOTAutograd tracing",
      ("the kernel depends on global state (grad mode, a counter, a cached tensor)", "the kernel is random",
       "the kernel mutates an input without declaring it"),
      "make the kernel a pure function of its arguments (pass state in as tensors)", None, ("opcheck",), (),
      r"Outputs of the operator are different in eager-mode PyTorch vs AOTDispatcher"),
    S("graph-break", "dynamo-fx", "Dynamo cannot trace the call with fullgraph=True (graph break)",
      ("the reason Dynamo gives (see the evidence)", ("a Python-level wrapper around the op does something Dynamo "
       "does not support")),
      "read the graph-break reason in the evidence; compile without fullgraph and print "
      "torch._dynamo.explain(fn)(*args) for every break", None, (), ("Unsupported", "UserError"), r"."),
    S("backend-compile-failed", "dynamo-fx", "the compiler backend raised while compiling the graph",
      ("the exception inside the backend (see the evidence)",), "fix the error the backend reports; rerun with "
      "TORCH_LOGS=aot_graphs to see the graph it compiled", None, ("aot_eager", "opcheck"),
      ("BackendCompilerFailed",), r"."),
    S("npugraph_ex-compile-failed", "npugraph_ex", "npugraph_ex's backend raised while compiling the graph",
      (("one of npugraph_ex's passes (decompositions, re-inplacing, the graph converter) cannot handle a node "
        "of the graph aot_eager compiled"), ("an argument or return kind npugraph_ex does not support (a list of "
       "mutated tensors, a non-tensor output)"), "the fetched npugraph_ex does not match this torch"),
      "read the exception inside BackendCompilerFailed (the evidence); aot_eager passed, so the difference is "
      "npugraph_ex's: rerun with TORCH_COMPILE_DEBUG=1, and check `opgen check --versions`", None,
      ("npugraph_ex",), ("BackendCompilerFailed",), r"."),
    S("compiled-differs", "precision", "compiled output differs from eager",
      (("the kernel depends on global state (torch.is_grad_enabled(), counters, caches) that differs at compile "
       "time"), Cause("a CompositeImplicitAutograd kernel is traced into the graph: a branch on "
       "torch.compiler.is_compiling() or other trace-time state is baked in", needs="CompositeImplicitAutograd"),
       "the kernel reads memory it does not own (uninitialised output)", ("tolerance: a low-precision "
       "dtype accumulates differently")),
      "compare eager and compiled on one small input; make the kernel a pure function of its arguments", None,
      ("aot_eager", "npugraph_ex", "capture"), ("AssertionError",), r"differs from eager|not close|not equal"),
    # --- named by the worker (no exception) ---
    S("derived-inputs-refused", "eager", "the op raised on the inputs opgen made up (no --inputs, no spec): its "
      "schema says nothing of the dtypes, sizes or values it takes",
      (("the kernel takes particular dtypes (int8, int32) or sizes, or values in a range, and checks them: opgen "
        "made up float32 tensors of a small shape"),
       "the kernel has a bug any input shows (then it raises on real inputs too)"),
      "give the op's real inputs with --inputs FILE (a YAML list like `- {A: {shape: [4, 8], dtype: int8}}`, the "
      "syntax of a spec's examples, docs/spec.md) and run again"),
    S("random-op", "npugraph_ex", "the kernel draws random numbers: not reproducible, and not capturable",
      ("torch.rand*/bernoulli/dropout inside the kernel", "a random seed or offset drawn on the host per call"),
      "an op whose job is to sample: tag it torch.Tag.nondeterministic_seeded (opgen spec: `tags: "
      "[nondeterministic_seeded]`), so that compiled and eager runs, and opgen check, compare seeded draws; any "
      "other op: pass the random values in as a tensor argument (generated outside the graph)", CAPTURE_UNSAFE.code),
    S("cpu-sync-in-kernel", "ge-cann", "the kernel syncs with the host (.item(), .cpu(), ...): fails under capture",
      (("a `.item()`/`.tolist()`/`.cpu()`/`bool(tensor)` in the kernel (on NPU: 'Not allow to synchronize "
       "captured-stream', error 107027)"), "a Python branch on a tensor value (`if x.abs().max() > 1:`)",
       "input validation inside the kernel (`if (idx >= n).any(): raise ...`)",
       "a data-dependent output size, or torch.npu.synchronize()"),
      "keep scalars on the device (pass them as tensors, use torch.where); validate inputs before calling the op; "
      "size-dependent work belongs in the schema", CAPTURE_UNSAFE.code),
    S("capture-frozen-value", "npugraph_ex", "a host value of the kernel is frozen at its capture value",
      (("the kernel reads Python state per call (a module-level config, a global, a step counter): its Python runs "
        "once, at capture, and replays keep that value"), ("the kernel branches on Python state, so a later call "
       "would take another path that a replay never takes")),
      "pass the value as a tensor argument (replays read tensors from device memory), or recompile when it changes",
      None),
    S("capture-recapture", "npugraph_ex", "the graph is recaptured although the caller's buffers did not move, or "
      "new buffers are not handled as AclGraph does",
      (("the kernel gives its mutated argument new memory (`cache.set_(...)`, `resize_`, `.data =`), so its address "
        "changes at every call and AclGraph recaptures each time (recapture_due_to_mutated_input_change)"),
       "a different buffer for a mutated argument is not written (the old one is)"),
      "write the mutated argument in place (copy_, index_copy_, slice assignment), and keep it at one address",
      None),
    S("capture-static-output", "npugraph_ex", "an output is memory the kernel keeps across calls, not a new tensor",
      (("the kernel returns a module-level or cached buffer (a workspace) instead of allocating its output: every "
        "call returns the same tensor, so an output the caller keeps changes at the next call"),
       "the captured outputs are not the graph's pool memory, which npugraph_ex's memory reuse assumes"),
      "allocate the output in the kernel on every call (torch.empty_like(x), x.new_empty(...)); callers clone "
      "outputs they keep across calls (npugraph_ex's outputs are static memory, clone_output=False)", None),
    S("stream-misuse", "ge-cann", "the kernel synchronizes a stream or an event: capture fails, and so does a "
      "multi-stream scope",
      (("`torch.npu.current_stream().synchronize()`, `stream.synchronize()` or `event.synchronize()` in the kernel: "
        "the host waits for a stream of the captured graph"), ("streams ordered by the host instead of by events "
       "on the device (the kernel may run on a side stream of an npugraph_ex scope)")),
      "order streams on the device: `stream.wait_stream(other)`, or `event.record()` then `stream.wait_event(event)`; "
      "never wait on the host inside the op", CAPTURE_UNSAFE.code),
    S("compile-cache-op-not-registered", "npugraph_ex", "the cached graph calls the op, which the process loading "
      "the cache does not register",
      (("the op is registered lazily (on first use, by a module the package does not import, or in `__main__`): "
        "the cached code calls torch.ops.<ns>.<op> directly, and nothing imports the registration"),
       "the loading process does not import the op's package before calling the cached model"),
      "register the op when its package is imported (import the registering module in the package's __init__.py), "
      "and import the package before loading the cache", None),
    S("compile-cache-stale", "npugraph_ex", "a changed op would load the graph compiled for the old one",
      (("npugraph_ex's cache key is the module's str() and the compiler options, nothing of the ops the graph calls: "
        "the cache directory must change with the op (its schema, its fake)"), ("the package's digest "
       "(compile_cache.graph_digest) misses what the graph depends on")),
      "key the cache directory by the op: opgen's generated compile_cache.cache_dir(base); or clear the cache after "
      "every change to a schema or a fake", None),
    S("compile-cache-not-loaded", "npugraph_ex", "a fresh process does not load the compile cache: it compiles again",
      (("loading raised and npugraph_ex cleared the cache as broken (its warning 'Clear broken cache ...' is in the "
        "evidence)"), ("the loading process computes another cache directory (a digest that differs between "
       "processes)"), "Dynamo recompiled: the call differs from the one the cache was compiled for"),
      "read npugraph_ex's warnings in the evidence; load with the same module, config and cache_dir as the compile",
      None),
    S("compile-cache-not-saved", "npugraph_ex", "npugraph_ex's cache_compile saved no cache",
      ("the compiled code could not be serialized, or npugraph_ex skipped the cache (its warning says why)",),
      "read npugraph_ex's 'Skip cache' warning in the evidence", None),
    S("capture-limit", "npugraph_ex", "one graph for two sizes does not capture, replay or fall back as "
      "capture_limit says",
      (("the fake specialises on a size (a branch, a Python int from a shape): each size gets a graph of its own, and "
        "capture_limit never applies"), ("a size beyond capture_limit is not run eagerly, or a repeated size "
       "recaptures instead of replaying (a written buffer moved, an output kept)")),
      "compute the fake's shapes from the input sizes without branching on them; keep written buffers at one "
      "address per size", None),
    S("npugraph_ex-leftover-copy", "npugraph_ex", "npugraph_ex leaves a copy of a mutated buffer in the graph",
      ("the op returns its mutated input (Tag.inplace / Tag.out): npugraph_ex 2.13.0 does not re-inplace it",
       "the mutated argument is not the one the schema marks (a!)", "a view of a mutated input is returned"),
      "declare `Tensor(a!) x` and return nothing (`-> ()`); results are correct but every replay pays a copy",
      TAG_CONTRACT.code),
    S("npugraph_ex-private-input-copy", "npugraph_ex", "a write to an undeclared argument lands in npugraph_ex's "
      "private input copy",
      ("the kernel mutates an argument not marked Tensor(a!) (clone_input=True hands it a copy)",),
      "declare the mutation: `Tensor(a!) x` / mutates_args", UNDECLARED_MUTATION.code),
    S("npugraph_ex-op-eliminated", "npugraph_ex", "the op is not in the graph npugraph_ex captures",
      ("the op returns nothing and mutates nothing, so dead-code elimination drops it", "its output is unused"),
      "mark it with torch.fx.node.has_side_effect(op), or declare the tensors it writes Tensor(a!)", SIDE_EFFECT_ONLY.code),
    S("npugraph_ex-op-decomposed", "npugraph_ex", "the op is decomposed before npugraph_ex sees it",
      (Cause("its kernel is registered at CompositeImplicitAutograd (Library.impl, or vLLM's direct_register_custom_op "
             "with dispatch_key='CompositeImplicitAutograd'), so tracing inlines it into aten ops",
             needs="CompositeImplicitAutograd"),
       "an NPU kernel of the op is never called in the captured graph: the aten ops run instead"),
      "register the kernel at 'CPU' (and 'PrivateUse1' for NPU) with a register_fake, instead of "
      "CompositeImplicitAutograd: the op then stays one node in the graph"),
    S("npugraph_ex-no-graph", "npugraph_ex", "npugraph_ex produced no graph to capture",
      ("the whole call was optimised away", "npugraph_ex fell back to eager"),
      "rerun with TORCH_COMPILE_DEBUG=1 and read npugraph_ex's output_code.py", None),
    S("fusion-not-fired", "performance", "the op's fusion pattern does not fire on its own composite",
      (("the pattern registered is not the composite the model writes: a constant, a dim or an op differs (the "
        "matcher compares them literally)"), ("register_fusions() registers nothing for the route (targets, or "
       "npugraph_ex not importable when it runs)"), "`fusion.when` (or ops[i].dtypes) refuses the example"),
      "compare patterns.py's _<op>_search with the composite; regenerate patterns.py (opgen new) after editing it",
      None),
    S("fusion-partial", "performance", "the fusion leaves nodes of its composite in the graph",
      ("the pattern covers part of the composite (the rest stays and runs beside the op)",),
      "write the whole composite in `fusion.pattern`, returning what the op returns", None),
    S("fusion-wrong-pattern", "precision", "the composite a fusion replaces is not what the op computes",
      ("`fusion.pattern` differs from the kernel's semantics (a missing factor, another reduction dim)",
       "`fusion.when` lets it apply where the op computes something else (gamma with two dims)"),
      "fix `fusion.pattern` in opgen.yaml, or narrow `fusion.when` to the inputs where the two agree", None),
    S("fusion-applies-too-widely", "precision", "the fusion would replace the composite on inputs the kernel refuses",
      ("the kernel takes fewer dtypes (int64 indices only) or shapes than the composite",),
      "add the condition to `fusion.when` (e.g. \"slot_mapping.dtype == int64\"), or list the dtypes in ops[i].dtypes",
      None),
    S("fusion-changes-layout", "precision", "the fused op's outputs have other strides than the composite's",
      (("the op's fake is contiguous (`shape:`/`dtype:`) where the composite keeps an input's layout (a transposed q or "
       "k): a backward compiled for the composite fails on npugraph_ex's and Inductor's stride checks"),),
      "declare `like: <input>` for the output in opgen.yaml, or add a layout condition to `fusion.when` "
      "(\"x.is_contiguous()\")", None),
    S("worker-crash", None, "the process running the rung died",
      ("a segmentation fault or abort in a C++/device kernel", "the kernel exhausted memory"),
      "run the rung's call under gdb or with PYTHONFAULTHANDLER=1; check the kernel's bounds and allocations",
      None),
    S("worker-timeout", None, "the rung did not finish in time (a hang)",
      ("a deadlock or an endless loop in the kernel", "compilation far slower than expected (raise --timeout)"),
      "rerun with a larger --timeout; if it still hangs, dump the stacks with py-spy dump --pid", None),
)
BY_ID = {s.id: s for s in TABLE}


def classify(rung: str, error: dict) -> Signature | None:
    """The first row matching a failure's exception, or None (unclassified)."""
    for signature in TABLE:
        if signature.matches(rung, error):
            return signature
    return None


def explain(identifier: str) -> str | None:
    signature = BY_ID.get(identifier)
    if signature is None:
        return None
    layer = signature.layer or "the failing rung's (static, eager, dynamo-fx, npugraph_ex or ge-cann)"
    lines = [f"{signature.id}: {signature.title}", f"  layer: {layer}"]
    if signature.rule:
        lines.append(f"  rule: {signature.rule} (opgen lint --explain {signature.rule})")
    where = ", ".join(signature.rungs) if signature.rungs else "any rung"
    if signature.pattern is None:
        lines.append("  found by: opgen check itself (no exception)")
    else:
        types = ", ".join(signature.types) if signature.types else "any exception"
        lines.append(f"  matches: {types} at {where}, message /{signature.pattern}/")
    lines.append("  likely causes:")
    lines.extend(f"    {i}. {cause}{_condition(cause)}" for i, cause in enumerate(signature.causes, 1))
    lines.append(f"  next action: {signature.next_action}")
    return "\n".join(lines)


def _condition(cause: str | Cause) -> str:
    if not isinstance(cause, Cause):
        return ""
    if cause.needs:
        return f" (printed for an op with a {cause.needs} kernel)"
    return f" (printed for an op without a {cause.lacks} kernel)" if cause.lacks else ""
