"""The compile driver: source -> AST -> checked program -> IR -> optimised IR."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from gdsl.diagnostics import CompileError, Diagnostic, GdslError, Span
from gdsl.frontend import ast
from gdsl.frontend.checker import CheckedProgram, check
from gdsl.frontend.lower import lower
from gdsl.frontend.parser import parse
from gdsl.ir.core import Module, Op
from gdsl.passes.base import PassContext
from gdsl.passes.pipeline import PassManager

MAX_SOURCE_BYTES = 1 << 20


@dataclass
class Compiled:
    source: str
    file: str
    ast: ast.Program
    checked: CheckedProgram
    module: Module
    # severity-"warning" diagnostics (a param the layer never uses); the
    # CLI prints them, `gdsl.compile` raises them as `GdslWarning`s
    warnings: list[Diagnostic] = field(default_factory=list)


def unused_params(module: Module) -> list[Diagnostic]:
    """A warning for each declared `param` that no result of its layer
    depends on. Lowering drops it (dead code), so it is not a parameter of
    the module and is not trained; PyTorch would keep an unused parameter
    with `grad` None, so the user is told. One warning per declaration,
    however many times (and with whatever static args) the layer is called."""
    out: dict[Span, Diagnostic] = {}
    for fn in module.funcs.values():
        live = fn.live_values()
        for op in fn.ops:
            if op.name == "param" and op.result not in live and op.span not in out:
                layer = fn.attrs.get("layer", fn.name)
                read = any(op.result in o.operands for o in fn.ops)   # read, but only by dead statements
                how = "feeds nothing the layer returns" if read else "is never used"
                out[op.span] = Diagnostic(op.span, f"param '{op.attrs.get('name')}' of layer {layer} {how}: "
                                                   f"it is not a parameter of the model and is not trained", "warning")
    return sorted(out.values(), key=Diagnostic.sort_key)


def untrainable_error(prog: CheckedProgram) -> CompileError:
    """A train block's model with no params: nothing for the optimizer to step (torch.optim refuses
    an empty parameter list too); at the block's `model =` line (helper-31)."""
    cfg = prog.train
    return CompileError([Diagnostic(
        cfg.model_span, f"model '{cfg.model}' has no params to train: none of the layers it calls declares a "
                        "param that its output uses, and an optimizer needs at least one (as torch.optim "
                        "does); declare a param in a layer, or use the model without training it "
                        "(gdsl.compile(...).module(graph))")], prog.source)


def trains_a_param(lowered) -> bool:
    """Whether the model as lowered (its `repeat`s unrolled with the static args it is given:
    `--set layers=1` makes a `repeat layers - 1` run 0 times) calls a layer whose output depends on
    one of its params (unused_params' liveness): what the built module trains (helper-33)."""
    def has(name: str, seen: tuple = ()) -> bool:
        fn = lowered.funcs.get(name)
        if fn is None or name in seen:
            return False
        live = fn.live_values()
        return any(op.result in live and (op.name == "param" or op.name == "call"
                                          and has(op.attrs.get("callee"), seen + (name,)))
                   for op in fn.ops if op.name in ("param", "call"))
    return any(op.name == "call" and has(op.attrs.get("callee")) for op in lowered.main.ops)


def check_built_trainable(prog: CheckedProgram, lowered) -> None:
    """A train block's model that has no params once built (its only param layer in a `repeat` that
    runs 0 times): the located error single-process `gdsl run` gives when it builds the module, made
    before `gdsl run --np` plans, partitions or starts a rank (was: "the model calls no layer: nothing
    to plan", or the ranks' "the model has no params to train"; helper-33)."""
    if prog.train is not None and not trains_a_param(lowered):
        raise untrainable_error(prog)


def check_plannable(prog: CheckedProgram, lowered) -> None:
    """`gdsl plan`, `gdsl compile --np`: a train block's model that calls no layer once built is
    untrainable as well; said at its `model =` line (was: "the model calls no layer: nothing to
    plan", planning.layer_widths, which a model without a train block still gets; helper-33)."""
    if prog.train is not None and not any(op.name == "call" for op in lowered.main.ops):
        raise untrainable_error(prog)


def nll_of_raw_values(module: Module) -> list[Diagnostic]:
    """A warning when `loss = nll(...)` reads a model output that is not a
    `log_softmax` (through the layers that return it): nll expects
    log-probabilities, and on raw logits it trains to a negative loss
    without a word (helper-1). cross_entropy is the loss of logits."""
    loss = next((op for op in module.main.ops if op.name == "loss"), None)
    if loss is None or loss.attrs.get("fn") != "nll":
        return []
    def made_by(v):   # the op that computes v, through the layer calls that return it
        seen = set()
        while v.owner is not None and v.owner.name == "call" and v.owner.attrs.get("callee") in module.funcs \
                and v not in seen:
            seen.add(v)
            v = module.funcs[v.owner.attrs["callee"]].results[0]
        return v.owner

    def last_axis(op) -> bool:
        rank = len(op.result.type.shape)   # feature axes (a type's shape has no row axis)
        try:
            axis = int(op.attrs.get("axis", -1))
        except (TypeError, ValueError):
            return False
        return axis in (-1, rank - 1)

    op = made_by(loss.operands[0])
    if op is not None and op.name == "log_softmax":
        return []
    # log(softmax(x)) written by hand is log-probabilities too (was: this warning; helper-31), the
    # softmax over the classes' axis, in the same statement or in a layer the log reads
    if op is not None and op.name == "log" and (sm := made_by(op.operands[0])) is not None \
            and sm.name == "softmax" and last_axis(sm):
        return []
    return [Diagnostic(loss.span, "nll takes log-probabilities, but the model's output is not a log_softmax: on "
                                  "raw scores it trains to a negative loss (end the model with log_softmax(x), or "
                                  "use cross_entropy, which takes logits)", "warning")]


def read_source(path: str | Path) -> str:
    """Read a .gd file as UTF-8 text, refusing binary and huge input."""
    p = Path(path)
    with p.open("rb") as fh:   # at most one byte past the limit: never a whole huge file (or /dev/zero)
        data = fh.read(MAX_SOURCE_BYTES + 1)
    file = str(path)
    if len(data) > MAX_SOURCE_BYTES:
        raise CompileError([Diagnostic(Span(1, 1, 1, 2, file), f"file is larger than {MAX_SOURCE_BYTES} bytes")])
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        # the column of the first bad byte, in characters (the line is valid UTF-8 before it; was column 1;
        # helper-74); no source echo, as for a NUL byte: the line is not text
        col = len(data[data.rfind(b"\n", 0, e.start) + 1: e.start].decode("utf-8")) + 1
        what = "input is not UTF-8 text"
        if data.startswith(b"PK\x03\x04") or data.startswith(b"\x93NUMPY"):   # (was the bare line; helper-70)
            what += " (it is a zip archive or .npy array: data? `gdsl run PROGRAM.gd --data FILE`)"
        raise CompileError([Diagnostic(Span(line, col, line, col + 1, file), what)]) from None
    return normalize_text(text)


def normalize_text(text: str) -> str:
    """Source text as the parser reads it, from a file or a string: a UTF-8
    byte-order mark (some Windows editors write one) is not text; CR-only
    line ends (classic Mac) are line ends like CRLF and LF."""
    return text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")


def front(source: str, file: str, train: str | None = None) -> tuple[ast.Program, CheckedProgram]:
    prog = parse(source, file)
    checked, diags = check(prog, source, train)
    diags.raise_if_any(source)
    return prog, checked


def _reorders_asked(checked: CheckedProgram, module: Module) -> dict[str, tuple[Span, str]]:
    """The layer calls (scope -> the hint's span, its text) whose `order`
    hint asks the order pass to reassociate `A X W` (dense_first, or a
    backward option) where the lowering found it can hold: a linear
    aggregation feeding the `@`."""
    from gdsl.frontend.lower import _needs_linearity
    from gdsl.passes.linearity import order_feasible
    calls = {op.attrs["scope"]: module.funcs.get(op.attrs["callee"]) for op in module.main.ops if op.name == "call"}
    asked: dict[str, tuple[Span, str]] = {}
    default = checked.schedule.get("order")
    if default not in (None, "auto") and _needs_linearity(default) == "dense_first":
        for scope, fn in calls.items():
            if fn is not None and order_feasible(fn, "dense_first")[0]:
                asked[scope] = (checked.schedule_spans["order"], f"order = {default} cannot be carried out for "
                                                                 f"{scope.replace('_', '#')}")
    for h in checked.order_hints:
        scope = f"{h.layer}_{h.occurrence}"
        asked.pop(scope, None)   # a per-call hint overrides the schedule's order
        if _needs_linearity(h.spec) == "dense_first" and calls.get(scope) is not None:
            asked[scope] = (h.value.span, f"order {h.layer}#{h.occurrence} = {h.spec} cannot be carried out")
    return asked


def _declined_hints(checked: CheckedProgram, declined: dict[str, str]) -> dict[str, tuple[Span, str]]:
    """The hints (scope -> span, text) behind the order pass's declines: a
    backward option on a reader of a shared aggregation left sparse-first,
    `sparse_first(backward = dense_first)` included, which `_reorders_asked`
    does not count as a reorder (autograd's own backward) but which the
    merged aggregation cannot record (was: accepted, no order attributes)."""
    out: dict[str, tuple[Span, str]] = {}
    default = checked.schedule.get("order")
    per_call = {f"{h.layer}_{h.occurrence}": h for h in checked.order_hints}
    for scope in declined:
        if (h := per_call.get(scope)) is not None:
            out[scope] = (h.value.span, f"order {h.layer}#{h.occurrence} = {h.spec} cannot be carried out")
        elif default not in (None, "auto"):
            out[scope] = (checked.schedule_spans["order"],
                          f"order = {default} cannot be carried out for {scope.replace('_', '#')}")
    return out


def _unapplied_reorders(asked: dict[str, tuple[Span, str]], module: Module,
                        declined: dict[str, str] | None = None,
                        other_readers: dict[str, str] | None = None,
                        unhandled: dict[str, Op] | None = None) -> list[Diagnostic]:
    """An error for each reorder asked for that the order pass did not carry
    out (was: accepted, and the layer silently ran sparse-first). The pass
    rewrites one form (passes/order.py): the aggregation of one endpoint
    tensor times a graph constant. fold-edge-constants brings sums of such
    products of one tensor to it (`x * c1 + x / c2 - x`); a linear message
    it cannot (terms of `x` and `-x`) is refused."""
    other_readers = other_readers or {}   # scope -> where an `A X` of the handled form is read besides its `@`
    # (one `@` of a call reordered and another not is no reorder carried out: was accepted, helper-5)
    # (nor is one aggregation of a call reordered and another, before a `@` too, left as it was because its
    # message does not fold to the handled form: `unhandled`, scope -> that aggregation; was accepted, helper-26)
    unhandled = unhandled or {}
    done = ({op.attrs.get("scope") for op in module.main.ops if op.attrs.get("order_by") == "hint"}
            - set(other_readers) - set(unhandled))
    why = ("the order pass reorders an aggregation whose message is one endpoint tensor times a graph constant "
           "(`src.h * rsqrt(src.degree * dst.degree)`, or a sum of such terms of one tensor, "
           "`src.h / dst.degree + src.h * 0.5`), and this one's message does not fold to that "
           "form; write the message as one product, or leave the order to the compiler")
    declined = declined or {}   # the order pass's own reason (a shared aggregation)
    live_matmul = {op.attrs.get("scope") for op in module.main.ops if op.name == "matmul"}

    def reason(scope: str) -> str:
        if scope in declined:
            return declined[scope]
        if scope not in live_matmul:   # (was: "does not fold to that form" of a message that does; helper-11)
            # (the layer returns without its `@`, or the model drops the call's result: both leave it dead)
            return ("its `@ param` is not used (what the layer returns does not depend on it, or the model does not "
                    "read the call's result), so no aggregation before a `@` is left to reorder; remove the unused "
                    "`@` or call, or the hint")
        if scope in unhandled and scope not in other_readers and (agg := unhandled[scope]).result.hint:
            return why.replace("this one's message",
                               f"the message gathered into '{agg.result.hint}' (line {agg.span.line})")
        if scope in other_readers:
            return (f"its aggregation (`A X`, before the `@`) is also read {other_readers[scope]}, and dense-first "
                    "computes A (X W) without it; read the aggregation only in the `@`, or leave the order to the "
                    "compiler")
        return why
    return [Diagnostic(span, f"{what}: {reason(scope)}") for scope, (span, what) in asked.items() if scope not in done]


def _partition_hint_errors(checked: CheckedProgram, module: Module, ranks: int | None = None) -> list[Diagnostic]:
    """The schedule's partition (and delay) hint checked as the ranks check it
    (`dist.support.check_supported`, `check_delay`) on the optimised IR: a hint
    the ranks would refuse is a compile error at the hint (was: it compiled,
    `gdsl plan` said `run --np` executes it, and the ranks refused it after
    partitioning)."""
    sched, spans = checked.schedule, checked.schedule_spans
    part = sched.get("partition", "auto")
    if part == "auto":
        return []
    from gdsl.dist.part import parse_spec
    from gdsl.dist.support import check_delay, check_supported
    try:
        spec = parse_spec(part, delay=sched.get("delay", 0))
    except GdslError:
        return []   # grid2d / grid3d: priced by the cost model, not executed

    def refused(span: Span, message: str, e: GdslError) -> list[Diagnostic]:
        op = getattr(e, "op", None)   # the op the ranks refuse: where the program wrote it
        notes = (Diagnostic(op.span, "this is the op", "note"),) if op is not None and op.span.line > 0 else ()
        return [Diagnostic(span, message, notes=notes)]
    from gdsl.planning import _replicas
    try:   # (with --np: what redistribute(R_A < P) cannot run too; helper-75)
        check_supported(spec.strategy, module, replicas=_replicas(spec, ranks) if ranks else None, P=ranks)
    except GdslError as e:   # its message names the partition: "partition = rows_replicated cannot run op ..."
        return refused(spans["partition"], str(e), e)
    try:
        check_delay(spec.delay if spec.strategy == "vertex_cut" else 0, module)
    except GdslError as e:
        return refused(spans.get("delay", spans["partition"]),
                       f"delay = {sched.get('delay')} cannot hold with partition = {part}: {e}", e)
    return []


def compile_source(source: str, file: str = "<input>", *, dims: dict[str, int] | None = None,
                   overrides: dict[str, Any] | None = None, train: str | None = None,
                   stop_after: str | None = None,
                   after_each: Callable[[str, Module], None] | None = None,
                   disable: tuple[str, ...] = (), ranks: int | None = None, edges: int | None = None,
                   memory_per_rank: float | None = None, graph=None, delay: int | str | None = 0,
                   hoist: bool = False) -> Compiled:
    """Run the whole front end and the pass pipeline (or stop after a pass);
    `disable` names optional passes to skip (e.g. `fuse`, to test it).
    `delay` is the distributed plan's DistGNN delay when the program is
    compiled for one (r > 0: cd-r; the order pass reads it). `hoist`: the
    module will compute the values marked invariant once (single process
    only: ignored with `ranks`), so the order pass aggregates their inputs
    sparse-first (passes/order.py)."""
    prog, checked = front(source, file, train)
    module, diags = lower(checked, dims, overrides)
    diags.raise_if_any(source)
    if module is None:  # pragma: no cover - lower reports why
        raise CompileError([Diagnostic(Span(1, 1, 1, 2, file), "nothing to compile")], source)
    warnings = sorted(checked.warnings + unused_params(module) + nll_of_raw_values(module), key=Diagnostic.sort_key)
    if after_each:
        after_each("lower", module)
    ctx = PassContext(dims=dict(dims or {}), options={"delay": delay, "hoist": hoist and ranks is None})
    if ranks is not None and stop_after != "lower":
        from gdsl.planning import plan
        check_plannable(checked, module)   # a train block's model with no layer once built: its located error
        sched = checked.schedule
        hint = sched.get("partition") if sched.get("partition") not in (None, "auto") else None
        hint_delay = sched.get("delay", 0) if hint else 0
        sizes = {**(dims or {}), **({"E": edges} if edges else {})}
        # plan() prices each layer's `invariant` flag as the module optimised at hint_delay marks it
        # (planning.optimised_module: this pipeline, less partition, on a copy); the passes below run
        # at order_delay, so the flags are read again where the two differ: the plan recorded is the
        # one priced on the IR this compile dumps
        result = plan(module, sizes, ranks, memory_per_rank, graph=graph, hint=hint, delay=hint_delay)
        hinted_delay = result.choice is not None and result.hinted and result.choice.best.cost.strategy == "vertex_cut"
        order_delay = hint_delay if hinted_delay else delay
        if result.choice is not None and order_delay != hint_delay:
            from gdsl.planning import layer_invariant, optimised_module
            flags = tuple(layer_invariant(module, optimised_module(module, order_delay)))
            if flags != result.problem.invariant:
                result = plan(module, sizes, ranks, memory_per_rank, graph=graph, hint=hint, delay=hint_delay,
                              invariant=flags)
        if result.choice is not None and not result.hinted:
            # record what `gdsl run --np` executes: the fastest plan the ranks can run
            from gdsl.planning import runnable
            result = runnable(result, lambda d: compile_source(source, file, dims=dims, overrides=overrides,
                                                               train=train, delay=d).module)
        if result.choice is not None:
            ctx.options["plan"] = result
            if hinted_delay:
                # the hinted cd-r plan: its delay reaches the order pass as it does on each rank
                ctx.options["delay"] = hint_delay
    asked = _reorders_asked(checked, module)
    pm = PassManager(after_each=after_each)
    pm.passes = [p for p in pm.passes if p.name not in disable]
    module = pm.run(module, ctx, stop_after=stop_after)
    ran = [p.name for p in pm.passes]
    # (the order pass rewrites fused IR only: not checked when a test disables fuse)
    if "order" in ran and "fuse" in ran and (stop_after is None or stop_after in ran
                                                 and ran.index(stop_after) >= ran.index("order")):
        declined = ctx.options.get("order_declined") or {}
        asked = {**_declined_hints(checked, declined), **asked}
        if errors := _unapplied_reorders(asked, module, declined, ctx.options.get("order_other_readers") or {},
                                         ctx.options.get("order_unhandled") or {}):
            raise CompileError(errors, source)
    if stop_after is None and "fuse" in ran:
        if errors := _partition_hint_errors(checked, module, ranks):
            raise CompileError(errors, source)
    if stop_after is None and ctx.options.get("order_hoist_dependent"):
        module.mask_keys = mask_keys(module, lambda: compile_source(
            source, file, dims=dims, overrides=overrides, train=train, disable=disable, hoist=True).module)
    return Compiled(source, file, prog, checked, module, warnings)


def mask_keys(module: Module, hoisting: Callable[[], Module]) -> list[int] | None:
    """The op keys of `module`'s dropout masks as the compile `gdsl run` executes
    (`hoisting()`, hoist=True) numbers them: the k-th dropout's position there.
    A mask is seeded with its op's position (ReferenceModule.mask_seed); where
    the order pass ordered an aggregation of an invariant input by width here
    and sparse-first there, the ops before a dropout differ in number
    (`GCNConv[C](X) + GCNConv[C](X)`: one shared A X there, two dense-first
    layers here), and the ranks and `prog.module(graph)` drew other masks than
    a single `gdsl run`. None (each op's own position) without dropouts, or if
    the two compiles' dropouts do not pair up."""
    mine = [op for op in module.main.ops if op.name == "dropout"]
    if not mine:
        return None
    try:
        ops = hoisting().main.ops
    except GdslError:   # (no known case: the two compiles differ in the order pass only)
        return None
    theirs = [i for i, op in enumerate(ops) if op.name == "dropout"]
    if len(theirs) != len(mine) or any(ops[i].attrs["p"] != op.attrs["p"] for i, op in zip(theirs, mine)):
        return None
    return theirs
