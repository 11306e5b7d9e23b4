"""From a compiled program to the cost model's question, and its answer.

The cost model (gdsl/cost) reasons about a GCN-like stack of layers with
widths f_0 -> f_1 -> ... -> f_L. A program gives them: f_0 is the width of
the first layer call's input and f_l the width of the l-th call's output
(feature shapes flattened), in call order after `repeat` is unrolled.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import sympy

from gdsl.cost import choose
from gdsl.cost.choose import Choice, fmt_bytes, fmt_time
from gdsl.cost.problem import Problem
from gdsl.cost.profile import Profile, load_profile
from gdsl.diagnostics import GdslError
from gdsl.ir.core import Module


def layer_widths(lowered: Module) -> list:
    """f_0..f_L from the calls of the lowered (not yet inlined) module."""
    calls = [op for op in lowered.main.ops if op.name == "call"]
    if not calls:
        raise GdslError("the model calls no layer: nothing to plan")
    width = lambda t: sympy.Mul(*t.shape) if t.shape else sympy.Integer(1)  # noqa: E731
    if calls[0].operands:
        first = calls[0].operands[0].type
    else:   # a first layer of no arguments reads the features itself (`layer Embed() { t = X @ W }`)
        # (was: an IndexError, an internal error of `gdsl plan` and `gdsl run --np`'s auto plan)
        ops = [*lowered.main.ops, *(op for fn in lowered.funcs.values() for op in fn.ops)]
        first = next((op.result.type for op in ops if op.name == "input" and op.result.type.domain == "vertex"
                      and op.result.type.dtype == "f32"), calls[0].result.type)
    return [width(first)] + [width(op.result.type) for op in calls]


def layer_params(lowered: Module) -> list | None:
    """The parameter words of each layer call, in layer_widths' order: every
    `param` of the called layer and of the layers it calls (weights and
    biases: what the ranks' gradient all-reduce carries, dist/module.py
    sync_grads), 0 for a parameter-free layer (SGC's or APPNP's
    propagation). None when a param's shape is not a number."""
    def words(fn_name: str, seen: tuple = ()) -> int | None:
        fn = lowered.funcs.get(fn_name)
        if fn is None or fn_name in seen:
            return 0
        total = 0
        for op in fn.ops:
            if op.name == "param":
                n = sympy.Mul(*op.result.type.shape) if op.result.type.shape else sympy.Integer(1)
                if not sympy.sympify(n).is_number:
                    return None
                total += int(n)
            elif op.name == "call":
                sub = words(op.attrs["callee"], seen + (fn_name,))
                if sub is None:
                    return None
                total += sub
        return total
    out = [words(op.attrs["callee"]) for op in lowered.main.ops if op.name == "call"]
    return None if any(w is None for w in out) else out


def layer_aggregates(lowered: Module) -> list[bool]:
    """Whether each layer call, in layer_widths' order, aggregates (a
    `gather` in the called layer or a layer it calls): False for a transform
    only (APPNP's or SGC's `Linear`, an MLP's layers), which the cost model
    prices with no SpMM and no exchange (Problem(aggregates=...), as the
    ranks run it; was: every layer priced with one SpMM and its exchanges
    each way)."""
    def has(fn_name: str, seen: tuple = ()) -> bool:
        fn = lowered.funcs.get(fn_name)
        if fn is None or fn_name in seen:
            return False
        return any(op.name == "gather" or (op.name == "call" and has(op.attrs["callee"], seen + (fn_name,)))
                   for op in fn.ops)
    return [has(op.attrs["callee"]) for op in lowered.main.ops if op.name == "call"]


AGGREGATIONS = ("aggregate", "gather", "gat_aggregate")   # the fused IR's aggregations (the partition pass's too)


def optimised_module(lowered: Module, delay: int | str = 0) -> Module:
    """The module the ranks run, from the lowered one: a copy of `lowered`
    through the pass pipeline up to mark-invariant (no partition pass, no
    hoisting: the ranks' compile, `compile_source(delay=delay)`, as
    `gdsl run --np` and `gdsl compile --np` run it). `lowered` is unchanged.
    Its `invariant` marks are what the ranks compute once (dist/module.py
    `_rank_hoisted`)."""
    import copy

    from gdsl.passes.base import PassContext
    from gdsl.passes.pipeline import PassManager
    module = copy.deepcopy(lowered)
    pm = PassManager()
    pm.passes = [p for p in pm.passes if p.name != "partition"]
    return pm.run(module, PassContext(options={"delay": delay, "hoist": False}))


def layer_invariant(lowered: Module, optimised: Module) -> list[bool]:
    """Whether each layer call, in layer_widths' order, has an aggregation
    the ranks compute once (Problem(invariant=...)): True when the
    optimised module's aggregations of that call's scope (`aggregate`,
    `gather`, `gat_aggregate`; the inlined ops of the layers it calls carry
    its scope too) are not none and all of them are ones the ranks of an
    exact plan keep from the first forward (`rank_hoisted_ops`: marked
    `invariant` by mark-invariant, no param and no dropout, as SGC's S^K X).
    False for a layer call with no aggregation left (a transform only, or
    one whose aggregation CSE merged into another call's): priced as
    `layer_aggregates` says."""
    hoisted = rank_hoisted_ops(optimised)
    by_scope: dict[str, list[bool]] = {}
    for op in optimised.main.ops:
        if op.name in AGGREGATIONS and "scope" in op.attrs:
            by_scope.setdefault(op.attrs["scope"], []).append(op in hoisted)
    return [bool(by_scope.get(s)) and all(by_scope[s]) for s in layer_scopes(lowered)]


def rank_hoisted_ops(optimised: Module) -> set:
    """The ops of `optimised` that the ranks of an exact plan run in the
    first forward only (dist/module.py `_rank_hoisted`, through
    backends/reference/executor.py `plan_hoist`; both take passes/invariant.py
    `kept_invariants`): the ops marked `invariant`, less every group of an
    order the order pass chose with a backward other than autograd's (it runs
    whole, passes/order.py `linear_groups`) that has an unmarked op; none
    when a kept value is one such a group computes inside."""
    from gdsl.passes.invariant import kept_invariants
    from gdsl.passes.order import linear_groups
    groups, skipped = [], set()
    for g in linear_groups(optimised):
        if not g.natural:
            groups.append(set(g.ops))
            skipped.update(g.ops[:-1])
    found = kept_invariants(optimised, groups, skipped)
    return set() if found is None else found[0]


def layer_scopes(lowered: Module) -> list[str]:
    """The scope of each layer call, in layer_widths' order: the inlined ops
    of layer l carry scopes[l - 1], which is where the partition pass writes
    layer l's predicted collectives."""
    return [op.attrs["scope"] for op in lowered.main.ops if op.name == "call"]


@dataclass
class Plan:
    problem: Problem
    choice: Choice | None       # None when the sizes are symbolic
    widths: list
    profile: Profile | None = None   # the machine profile the choice was priced on
    hinted: bool = False             # the choice is the schedule's partition hint, not the model's fastest
    skipped: str | None = None       # the model's fastest, when the ranks cannot run it (`runnable`)
    runner_up: str | None = None     # then: the next plan the ranks can run
    skipped_why: str = ""            # then: why ("for this program yet", "on 24 ranks (...)")
    scopes: list | None = None       # each layer call's scope (`GCNConv_1`): layer l's is scopes[l - 1]


def measure_partitions(src, dst, num_nodes: int, P: int, seed: int = 0) -> tuple[dict, dict]:
    """The graph statistics the vertex_cut and edge_cut costs need, measured
    on real partitions of this graph (issue: "a partition's replication
    factor or halo count when computed"): Libra's replication factor rho
    (DistGNN §5.1) and the largest METIS halo S per rank (the edge-cut
    exchange waits for the slowest rank); METIS is skipped without pymetis.
    Returns ({"rho": .., "halo": ..}, {name: how it was measured})."""
    import numpy as np

    from gdsl.graph import partition as gp
    src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
    out, how = {}, {}
    if P > 1 and src.size:
        ep = gp.libra(src, dst, num_nodes, P, seed=seed)
        verts, _ = gp.replicas(src, dst, ep, num_nodes, P)
        out["rho"] = gp.replication_factor(verts, num_nodes)
        how["rho"] = f"measured (Libra vertex cut of this graph at P={P})"
        hashed = gp.rows_hash(num_nodes, P)
        hash_halo = float(max(h.size for h in gp.halo(src, dst, hashed, P)))
        try:
            owner = gp.edge_cut_metis(src, dst, num_nodes, P, seed=seed)
            kind = "METIS edge cut"
        except GdslError:
            owner, kind = hashed, "hash partition (pymetis not installed)"
        out["halo"] = hash_halo if owner is hashed else float(max(h.size for h in gp.halo(src, dst, owner, P)))
        how["halo"] = f"measured (largest halo per rank, {kind} of this graph at P={P})"
        # the halo rows(hash)'s alltoallv exchange moves (was: estimated, hash_halo, with the graph at hand)
        out["rows_halo"] = hash_halo
        how["rows_halo"] = f"measured (largest halo per rank, hash partition of this graph at P={P})"
        # the halo of P3's data-parallel layers: the ranks run them on block rows (dist/part.py;
        # was: the hash estimate, 1535 rows on Cora at P = 4 where the block partition has 1132)
        out["features_halo"] = float(max(h.size for h in gp.halo(src, dst, gp.rows_block(num_nodes, P), P)))
        how["features_halo"] = f"measured (largest halo per rank, block partition of this graph at P={P})"
    return out, how


RANKS_BACKEND = "reference"   # the ranks' backend when `gdsl run --np P` names none (dist/cli_run.worker_args)


def rank_profile(backend: str | None = None, path=None) -> Profile:
    """The machine profile priced for ranks that run `backend` (None: the
    ranks' default, reference): the profile file's (`path`, else the default
    location) with its SpMM and GEMM rates from ``per_backend[backend]`` where
    `gdsl calibrate` measured that backend; else the file's top-level rates
    (those of the backend calibrate found fastest, or a hand-written
    profile's), or the built-in default profile (rates measured with torch,
    i.e. the reference backend's kernels) when there is no file. Was: the
    top-level rates always, numba's after a full calibrate, while the ranks
    run reference unless --backend says otherwise."""
    import json
    from pathlib import Path

    from gdsl.cost.profile import profile_from_dict
    base = load_profile(path)
    if not base.path:
        return base
    try:
        data = json.loads(Path(base.path).read_text())
    except (OSError, ValueError, RecursionError):   # (load_profile read it a moment ago)
        return base
    from dataclasses import replace
    want = backend or RANKS_BACKEND
    per = data.get("per_backend") if isinstance(data, dict) else None
    if isinstance(per, dict) and isinstance(per.get(want), dict):
        got = profile_from_dict(data, base.path, want)
        return replace(got, source=_joined(got.source, f"rates of backend {want}"))
    if isinstance(per, dict):   # calibrated without it (`gdsl calibrate --backend numba`; triton is not measured)
        top = data.get("backend")
        return replace(base, source=_joined(base.source, f"no rates for backend {want}: the top-level rates"
                                            + (f" ({top}'s)" if isinstance(top, str) else "")))
    return base


def _joined(a: str, b: str) -> str:
    return f"{a}; {b}" if a else b


def plan(lowered: Module, dims: dict[str, int], P: int, memory_per_rank: float | None = None,
         allow_approximate: bool = False, profile: Profile | None = None, graph=None,
         hint: str | None = None, delay=0, backend: str | None = None, halo: str = "alltoallv",
         invariant=None) -> Plan:
    """The cost model's choice for P ranks, priced on `profile` (default:
    `rank_profile(backend)`: the calibrated profile when there is one, with
    the rates of `backend`, the ranks' backend, reference by default).
    `halo` is how the row plans exchange their halo rows (`--halo`:
    alltoallv, the ranks' default, or bcast), which prices rows(hash). With
    `graph` (edges as the program sees them: its graph options applied) the
    replication factor and halo size are measured on real partitions
    (`measure_partitions`) instead of estimated. `hint` (the schedule's
    `partition`, with its `delay`) makes the hinted plan the choice, as
    `gdsl run --np P` executes it; the cost model's own fastest stays in the
    reason and the table. Each layer call is priced with its aggregation
    computed once when the ranks keep it from the first forward
    (`invariant`, one bool per layer call; default: `layer_invariant` of
    the module the ranks run, `optimised_module(lowered, delay)`), so
    `gdsl plan`, `gdsl compile --np` and `gdsl run --np`'s auto, which all
    plan from the lowered module, price the same flags."""
    if delay != 0:
        allow_approximate = True
    widths = layer_widths(lowered)
    numeric = all(sympy.sympify(w).is_number for w in widths) and "N" in dims and "E" in dims
    if not numeric:
        pb = Problem(P=P, widths=tuple(widths))
        return Plan(pb, None, widths, scopes=layer_scopes(lowered))
    # each layer's own parameter words (was: every layer priced as a GCN layer with an f_{l-1} x f_l W,
    # so a parameter-free propagation layer got a phantom GEMM and weight all-reduce)
    params = layer_params(lowered)
    if invariant is None:
        # which aggregations the ranks compute once is known in the optimised module only (was: not
        # passed, so SGC's propagations of X were priced with an SpMM and an exchange every epoch)
        invariant = layer_invariant(lowered, optimised_module(lowered, delay))
    pb = Problem(N=dims["N"], E=dims["E"], P=P, widths=tuple(int(w) for w in widths),
                 params=None if params is None else tuple(params), aggregates=tuple(layer_aggregates(lowered)),
                 invariant=tuple(invariant))
    profile = rank_profile(backend) if profile is None else profile
    stats, how = ({}, {}) if graph is None else measure_partitions(graph.src, graph.dst, graph.num_nodes, P)
    extra = {"delay": delay} if isinstance(delay, int) and delay > 0 else {}
    choice = mark_modelled_only(choose(pb, memory_per_rank, allow_approximate=allow_approximate, profile=profile,
                                       measured=how, rows_exchange=halo, **stats, **extra))
    hinted = False
    if hint is not None:
        choice, hinted = hinted_choice(choice, hint, delay, P)
    return Plan(pb, choice, widths, profile, hinted, scopes=layer_scopes(lowered))


MODELLED_ONLY = ("grid2d", "grid3d")   # priced by the cost model, never executed by the ranks
MODELLED_WHY = "modelled, not executed by the ranks"


def mark_modelled_only(choice: Choice) -> Choice:
    """`choice` with grid2d and grid3d (priced, never executed: CAGNET's 2D
    and 3D plans have no runtime) marked not runnable, as a rows_replicated(c)
    the ranks refuse on P ranks is: `x` in `gdsl plan`'s table with the reason
    under it, `"runnable": false` in its --json, never the choice, a
    runner-up or on the Pareto front (was: the --json said not runnable, the
    table showed them unmarked, and `gdsl plan` could choose one). The
    choice, the front and the reason are made again as choose() makes them;
    unchanged when no such candidate is unmarked (cost.choose may come to
    mark them itself)."""
    from dataclasses import replace

    from gdsl.cost import rdm
    from gdsl.cost.choose import NoPlanFits, _reason
    if not any(c.cost.strategy in MODELLED_ONLY and c.runnable for c in choice.candidates):
        return choice
    cands = tuple(replace(c, not_runnable=MODELLED_WHY) if c.cost.strategy in MODELLED_ONLY and c.runnable else c
                  for c in choice.candidates)
    able = [c for c in cands if c.runnable] or list(cands)
    front = tuple(able[i] for i in rdm.pareto({i: (c.time, c.memory_bytes) for i, c in enumerate(able)}))
    fitting = [c for c in able if c.fits]
    if not fitting:   # only a grid plan fitted (choose() raises this when none fits at all)
        small = min(able, key=lambda c: c.memory_bytes)
        raise NoPlanFits(f"no plan the ranks can run fits in {fmt_bytes(choice.memory_per_rank)} per rank: the "
                         f"smallest, {small.name}, needs {fmt_bytes(small.memory_bytes)} per rank (grid2d and grid3d "
                         "are modelled, not executed). Use more ranks or more memory per rank.")
    best = fitting[0]
    return replace(choice, best=best, candidates=cands, pareto=front,
                   reason=_reason(best, cands, choice.memory_per_rank))


def _replicas(spec, P: int):
    """redistribute's R_A (its argument; none given: P), else None."""
    return (P if spec.arg is None else int(spec.arg)) if spec.strategy == "redistribute" else None


def first_runnable(choice: Choice, P: int, optimised: Callable[[int | str], Module], approximate: bool = False,
                   delay=0, halo: str = "alltoallv", seed: int = 0):
    """The fastest candidate of `choice` that `gdsl run --np P` executes, with
    its spec: (candidate, Spec), or None. A candidate must fit the memory per
    rank, name an executable plan (not grid2d/grid3d) and pass the ranks' own
    check (`dist.support.check_supported`, `check_delay`) on the program's optimised IR,
    `optimised(delay)` (e.g. RDM cannot run an edge softmax). `gdsl run`'s
    `auto` and `gdsl compile --np` both choose with it."""
    from gdsl.dist.cli_run import _from_candidate
    from gdsl.dist.support import check_delay, check_supported
    from gdsl.dist.part import parse_spec
    for cand in choice.candidates:
        if not cand.fits:
            continue
        text = _from_candidate(cand, P, approximate)
        if text is None:
            continue
        try:
            spec = parse_spec(text, delay=delay if text.startswith("vertex_cut") else 0, halo=halo, seed=seed)
            check_supported(spec.strategy, optimised(spec.delay), replicas=_replicas(spec, P), P=P)
            check_delay(spec.delay, optimised(spec.delay))
        except GdslError:
            continue
        return cand, spec
    return None


def runnable(result: Plan, optimised: Callable[[int | str], Module]) -> Plan:
    """`result` with the fastest plan the ranks can run as its choice (what
    `gdsl run --np P` executes under partition = auto), the model's own
    fastest named in the reason; unchanged for a hinted choice or when no
    plan is runnable."""
    from dataclasses import replace
    if result.choice is None or result.hinted:
        return result
    found = first_runnable(result.choice, int(result.problem.P), optimised)
    if found is None or found[0] is result.choice.best:
        return result
    from gdsl.dist.cli_run import why_not_runnable
    cand, best = found[0], result.choice.best
    because = why_not_runnable(best, int(result.problem.P))
    why = f"{cand.name}: the ranks cannot run the cost model's fastest, {best.name}, {because} ({result.choice.reason})"
    rest = replace(result.choice, candidates=tuple(c for c in result.choice.candidates if c is not cand))
    runner = first_runnable(rest, int(result.problem.P), optimised)
    return replace(result, choice=replace(result.choice, best=cand, reason=why), skipped=best.name,
                   runner_up=runner[0].name if runner else "none", skipped_why=because)


def hinted_choice(choice: Choice, hint: str, delay, P: int) -> tuple[Choice, bool]:
    """`choice` with the candidate the schedule's partition hint names as its
    best (the plan `gdsl run --np P` executes), and True; or unchanged with
    a note, and False, when the cost model prices no such plan (e.g.
    rows_replicated(c) with c * c > P)."""
    from dataclasses import replace

    from gdsl.cost.distgnn import delay_label
    from gdsl.dist.cli_run import _from_candidate
    from gdsl.dist.part import parse_spec
    try:
        want = parse_spec(hint, delay=delay)
    except GdslError:
        return choice, False   # grid2d / grid3d: priced, not executed; the model's choice stands
    label = delay_label(want.delay)
    for cand in choice.candidates:
        text = _from_candidate(cand, P, approximate=True)
        if text is None:
            continue
        got = parse_spec(text)
        if got.strategy != want.strategy:
            continue
        if want.strategy == "rows" and (got.arg == "metis") != (want.arg == "metis"):
            continue   # rows(hash|random|block) are priced alike; rows(metis) is the edge cut
        if want.strategy in ("rows_replicated", "redistribute") and got.arg != want.arg:
            continue
        if want.strategy == "vertex_cut" and dict(cand.cost.params).get("delay") != label:
            continue
        alike = ""
        if want.strategy == "rows" and want.arg != got.arg:
            # rows(random) / rows(block) are priced as rows(hash); name the plan run executes
            # (was: "executes rows(partition=hash)" for a rows(random) hint)
            params = tuple((k, want.arg if k == "partition" else v) for k, v in cand.cost.params)
            cand = replace(cand, cost=replace(cand.cost, params=params))
            alike = f", priced as rows({got.arg}) (the cost model prices hash, random and block rows alike)"
        elif cand is choice.best:
            return choice, True
        why = (f"{cand.name}: the schedule's hint (partition = {hint}"
               + (f", delay = {want.delay}" if want.strategy == "vertex_cut" and want.delay != 0 else "")
               + f"), {fmt_time(cand.time)} per epoch predicted{alike}"
               + ("" if cand.fits else f", over the memory per rank ({fmt_bytes(cand.memory_bytes)})")
               + f"; the cost model's own choice: {choice.reason}")
        return replace(choice, best=cand, reason=why), True
    return replace(choice, reason=choice.reason + f"; the schedule's hint (partition = {hint}) is not priced "
                                                  "by the cost model, so this choice is the model's"), False


def idle_ranks_warning(P: int, N: int) -> str | None:
    """The warning for more ranks than vertices: a plan that splits the
    vertices leaves ranks without any (they still join every collective)."""
    if P <= N:
        return None
    return (f"{P} ranks for {N} vertices: a plan that splits the vertices leaves at least {P - N} "
            f"rank{'s' if P - N > 1 else ''} with none")


def parse_bytes(text: str) -> float:
    units = {"K": 2 ** 10, "M": 2 ** 20, "G": 2 ** 30, "T": 2 ** 40}
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    mult = units.get(t[-1:], 1)
    try:
        v = float(t[:-1] if mult != 1 else t) * mult
    except ValueError:
        raise GdslError(f"--mem-per-rank: cannot read '{text}' (e.g. 4G, 512M)") from None
    if math.isnan(v) or v < 1:   # '0.0001K' is less than a byte
        raise GdslError(f"--mem-per-rank must be at least one byte, got '{text}'")
    if not math.isfinite(v):   # 1e400 (was: 'must be at least one byte')
        raise GdslError(f"--mem-per-rank is too large: '{text}' is beyond float's range")
    return v
