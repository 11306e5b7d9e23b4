"""Choose a plan: enumerate the strategies for given numbers, predict each
one's time and memory, keep the Pareto set (time vs memory per rank) and pick
the fastest plan that fits (ARCHITECTURE "Cost model"; RDM §IV-B keeps the
Pareto set to time its members in the first epochs).

Orders: redistribute tries every RDM configuration (RDM §IV-B, O(L 2^L)
each) with and without memoisation and keeps the fastest per R_A; the
strategies whose communication rides on each SpMM use the "narrow" order
(each SpMM at the narrower width, RDM §IV-A-1); grid2d and grid3d are
CAGNET's algorithms as published.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Iterable, Sequence

from gdsl.cost import rdm
from gdsl.cost.distgnn import random_replication, vertex_cut
from gdsl.cost.halo import edge_cut, hash_halo
from gdsl.cost.cagnet import grid2d, grid3d, replicate, rows, rows_replicated
from gdsl.cost.p3 import features
from gdsl.cost.problem import OrderConfig, Problem
from gdsl.diagnostics import GdslError
from gdsl.cost.profile import DEFAULT_PROFILE, Profile, comm_time, compute_time, predict_time
from gdsl.cost.record import Cost, _subs
from gdsl.cost.redistribute import redistribute
from gdsl.cost.symbols import WORD_BYTES, is_num

MAX_ENUMERATED_LAYERS = 4  # 4^4 * 2 = 512 RDM configurations per R_A
ALL = ("replicate", "rows", "rows_replicated", "grid2d", "grid3d", "features",
       "redistribute", "vertex_cut", "edge_cut")


class NoPlanFits(GdslError, ValueError):
    """No candidate fits the memory per rank; the message says how much the
    smallest and the fastest would need. A user error wherever it surfaces
    (`gdsl plan`, `gdsl compile --np`, `gdsl run --np`)."""


@dataclass(frozen=True)
class Candidate:
    cost: Cost
    time: float                 # seconds per epoch
    compute: float
    comm: float
    memory_bytes: float         # per rank
    fits: bool = True
    estimates: tuple[str, ...] = ()
    not_runnable: str = ""      # why the ranks cannot run it at these sizes ("" when they can)

    @property
    def name(self) -> str:
        return self.cost.name

    @property
    def runnable(self) -> bool:
        return not self.not_runnable


@dataclass(frozen=True)
class Choice:
    best: Candidate
    candidates: tuple[Candidate, ...]   # fastest first
    pareto: tuple[Candidate, ...]
    reason: str
    memory_per_rank: float | None = None
    estimates: tuple[str, ...] = field(default=())

    def table(self, limit: int | None = None) -> str:
        return format_table(self, limit)


def _divisors(P: int) -> list[int]:
    """P's divisors, ascending, in O(sqrt P) (was O(P): `gdsl plan --np 10**9` hung)."""
    small = [d for d in range(1, math.isqrt(P) + 1) if P % d == 0]
    return small + [P // d for d in reversed(small) if d * d != P]


def rows_replicated_refusal(P: int, c: int) -> str:
    """Why the ranks do not run rows_replicated(c) on P ranks, or "": they run
    whole broadcast stages only, c*c | P (CAGNET Algorithm 2 "outlines the
    special case where c^2 perfectly divides p"; gdsl/graph/partition.py
    refuses the others). The model prices every c | P with c*c <= P, as
    CAGNET's own implementation runs them (§IV-B, uneven last column)."""
    if P % (c * c) == 0:
        return ""
    return f"1.5D needs c*c = {c * c} to divide P = {P}"


def _is_power(P: int, k: int) -> bool:
    q = round(P ** (1.0 / k))
    return q ** k == P


def candidates(problem: Problem, *, profile: Profile = DEFAULT_PROFILE, memory_per_rank: float | None = None,
               strategies: Iterable[str] | None = None, rho: float | None = None, halo: float | None = None,
               allow_approximate: bool = False, delay: int = 5, orders="narrow",
               measured: dict | None = None, rows_halo: float | None = None,
               rows_exchange: str = "alltoallv", features_halo: float | None = None) -> list[Candidate]:
    """Every candidate plan for numeric sizes, evaluated; fastest first.

    ``halo``: the edge cut's S (METIS). ``rows_halo``: the largest halo per
    rank of the hash partition `rows(hash)` runs on (measured; default the
    expected halo of a random hash partition, ``hash_halo``), which its
    exchange moves under ``rows_exchange = "alltoallv"`` (the ranks'
    default, `--halo alltoallv`); ``"bcast"`` prices CAGNET's broadcast,
    what `--halo bcast` runs (helper-34; was: always the broadcast), and
    prices edge_cut's exchange so too: the ranks run it as rows(metis) under
    the same --halo (helper-37; was: S w words under --halo bcast).
    ``features_halo``: the largest halo per rank of the block partition P3's
    data-parallel layers run on (gdsl/dist/part.py `_features`: rows(block));
    default the hash estimate ``hash_halo`` (1535 rows for Cora at P = 4,
    where the ranks move 1132; helper-37)."""
    pb = problem
    for k in ("N", "E", "F", "H", "C", "L", "P"):
        if pb.widths is not None and k in ("F", "H", "C", "L"):
            continue
        if not is_num(getattr(pb, k)):
            raise ValueError(f"choose needs numbers; {k} is {getattr(pb, k)}")
    P = int(pb.P)
    wanted = tuple(strategies) if strategies is not None else ALL
    unknown = set(wanted) - set(ALL)
    if unknown:
        raise ValueError(f"unknown strategies {sorted(unknown)}; known: {', '.join(ALL)}")
    notes: dict[str, tuple[str, ...]] = {}
    rho_note = halo_note = ()
    measured = measured or {}
    if rho is not None and "rho" in measured:
        rho_note = (f"rho={rho:.3g} {measured['rho']}",)
    if halo is not None and "halo" in measured:
        halo_note = (f"S={halo:.4g} {measured['halo']}",)
    if rho is None:
        rho = random_replication(pb.N, pb.E, P)
        rho_note = (f"rho={rho:.3g} estimated (random edge placement; a measured Libra partition is lower)",)
    if halo is None:
        halo_note = (f"S={hash_halo(pb.N, pb.E, P):.4g} estimated (random hash partition; METIS is lower)",)
    rows_note = ()
    if rows_exchange == "alltoallv":
        if rows_halo is not None and "rows_halo" in measured:
            rows_note = (f"hash partition's S={rows_halo:.4g} {measured['rows_halo']}",)
        elif rows_halo is None:
            rows_note = (f"hash partition's S={hash_halo(pb.N, pb.E, P):.4g} estimated (random hash partition)",)
    costs: list[Cost] = []
    if "replicate" in wanted:
        costs.append(replicate(pb, orders=orders))
    if P > 1:
        if "rows" in wanted:
            costs.append(rows(pb, orders=orders, exchange=rows_exchange, halo=rows_halo))
            notes[costs[-1].name] = rows_note
        if "rows_replicated" in wanted:
            costs += [rows_replicated(pb, c, orders=orders) for c in _divisors(P) if 2 <= c and c * c <= P]
        if "grid2d" in wanted and _is_power(P, 2):
            costs.append(grid2d(pb))
        if "grid3d" in wanted and _is_power(P, 3):
            costs.append(grid3d(pb))
        if "features" in wanted:
            costs.append(features(pb, features_halo, orders=orders))
            # (was: the edge cut's note, "S=140 measured (... METIS ...)", beside a hash estimate)
            notes[costs[-1].name] = (() if pb.depth == 1 else
                                     (f"S={hash_halo(pb.N, pb.E, P):.4g} estimated (random hash partition; P3's "
                                      "block rows may be lower)",) if features_halo is None else
                                     (f"block partition's S={features_halo:.4g} "
                                      f"{(measured or {}).get('features_halo', 'given')}",))
        if "redistribute" in wanted:
            for R_A in _divisors(P):
                costs += _best_rdm(pb, R_A, profile, memory_per_rank)
        if "vertex_cut" in wanted:
            delays = [0] + ([delay, None] if allow_approximate else [])
            for d in delays:
                # cd-r aggregates the features sparse-first (passes/order.py, order_by=delay)
                o = "delay_safe" if orders == "narrow" and d not in (0, None) else orders
                costs.append(vertex_cut(pb, delay=d, rho=rho, orders=o))
                notes[costs[-1].name] = rho_note
        if "edge_cut" in wanted:
            # --halo applies to edge_cut (run as rows(metis)) as to rows(hash) (helper-37)
            costs.append(edge_cut(pb, hash_halo(pb.N, pb.E, P) if halo is None else halo, orders=orders,
                                  exchange=rows_exchange))
            notes[costs[-1].name] = halo_note
    out = [_evaluate(cst, profile, memory_per_rank, notes.get(cst.name, ())) for cst in costs]
    out = [replace(cd, not_runnable=rows_replicated_refusal(P, int(dict(cd.cost.params)["c"])))
           if cd.cost.strategy == "rows_replicated" else cd for cd in out]
    return sorted(out, key=lambda cd: (cd.time, cd.memory_bytes, cd.name))


def _best_rdm(pb: Problem, R_A: int, profile: Profile, memory_per_rank: float | None) -> list[Cost]:
    """The fastest RDM configuration for this R_A, and the fastest that fits if that is another."""
    n = len(pb.layer_widths()) - 1
    if n <= MAX_ENUMERATED_LAYERS:
        configs = rdm.configurations(n, memoize=(True, False))
    else:  # 4^L configurations is too many: CAGNET's order and the narrow one
        narrow = pb.layers("narrow")
        configs = [OrderConfig("S" * n, "S" * n),
                   OrderConfig("".join(ly.fwd for ly in narrow), "".join(ly.bwd for ly in reversed(narrow)))]
    scored = []
    for cfg in configs:
        cst = redistribute(pb, R_A, config=cfg)
        scored.append((predict_time(cst, profile), WORD_BYTES * cst.memory, cfg.id, cst))
    scored.sort(key=lambda t: (t[0], t[1], t[2]))
    best = [scored[0][3]]
    if memory_per_rank is not None and scored[0][1] > memory_per_rank:
        fitting = [t for t in scored if t[1] <= memory_per_rank]
        if fitting:
            best.append(fitting[0][3])
    return best


def _evaluate(cst: Cost, profile: Profile, memory_per_rank: float | None, notes: tuple[str, ...]) -> Candidate:
    vals = profile.values()
    mem = WORD_BYTES * float(cst.memory)
    return Candidate(cst, float(predict_time(cst, profile)), float(_subs(compute_time(cst), vals)),
                     float(_subs(comm_time(cst), vals)), mem,
                     memory_per_rank is None or mem <= memory_per_rank, notes)


def choose(problem: Problem, memory_per_rank: float | None = None, **options) -> Choice:
    """The fastest candidate that fits ``memory_per_rank`` bytes, with the
    Pareto set and a reason; :class:`NoPlanFits` if none fits. Options are
    those of :func:`candidates` (strategies, rho, halo, allow_approximate,
    delay, profile, orders)."""
    cands = candidates(problem, memory_per_rank=memory_per_rank, **options)
    if not cands:
        raise ValueError("no strategy to choose from")
    # a plan the ranks refuse at these sizes (rows_replicated(c) unless c*c | P) is listed, marked,
    # and neither chosen nor on the Pareto front (was: chosen, then skipped by `partition = auto`,
    # and unmarked in `gdsl plan`'s table when it was not the fastest)
    able = [cd for cd in cands if cd.runnable] or cands
    front_ids = rdm.pareto({i: (cd.time, cd.memory_bytes) for i, cd in enumerate(able)})
    front = tuple(able[i] for i in front_ids)
    fitting = [cd for cd in able if cd.fits]
    if not fitting:
        small = min(able, key=lambda cd: cd.memory_bytes)
        fastest = ("it is also the fastest" if small is able[0] else
                   f"the fastest, {able[0].name}, needs {fmt_bytes(able[0].memory_bytes)}")
        raise NoPlanFits(
            f"no plan fits in {fmt_bytes(memory_per_rank)} per rank on P={int(problem.P)} ranks: "
            f"the smallest, {small.name}, needs {fmt_bytes(small.memory_bytes)} per rank; {fastest}. "
            f"Use more ranks or more memory per rank.")
    best = fitting[0]
    return Choice(best, tuple(cands), front, _reason(best, cands, memory_per_rank), memory_per_rank,
                  tuple(sorted({n for cd in cands for n in cd.estimates})))


def _reason(best: Candidate, cands: Sequence[Candidate], memory_per_rank: float | None) -> str:
    where = "" if memory_per_rank is None else f" that fits {fmt_bytes(memory_per_rank)} per rank"
    parts = [f"{best.name} is the fastest plan{where}: {fmt_time(best.time)} per epoch predicted "
             f"({fmt_time(best.compute)} compute, {fmt_time(best.comm)} communication"
             f"{', overlapped' if best.cost.overlap else ''}), {fmt_bytes(best.memory_bytes)} per rank"]
    others = [cd for cd in cands if cd is not best and cd.fits and cd.runnable]
    if others:
        parts.append(f"runner-up {others[0].name} at {fmt_time(others[0].time)}")
    refused = [cd for cd in cands if not cd.runnable and cd.time < best.time][:2]
    if refused:
        parts.append("faster but not runnable: " + ", ".join(
            f"{cd.name} ({fmt_time(cd.time)}, {cd.not_runnable})" for cd in refused))
    too_big = [cd for cd in cands if not cd.fits and cd.runnable and cd.time < best.time][:2]
    if too_big:
        parts.append("faster but over memory: " + ", ".join(
            f"{cd.name} ({fmt_time(cd.time)}, needs {fmt_bytes(cd.memory_bytes)})" for cd in too_big))
    if best.estimates:
        parts.append("; ".join(best.estimates))
    return "; ".join(parts)


def _sig3(v: float) -> str:
    """v to 3 significant digits, never in e-notation (was: '1.02e+03 MiB',
    '1e+03 ms' just under a unit's boundary, '1.2e+03 s')."""
    s = f"{v:.3g}"
    return f"{float(s):.0f}" if "e" in s else s


def _rounds_below(v: float, limit: float) -> bool:
    """v stays below `limit` once shown with 3 significant digits."""
    return float(f"{v:.3g}") < limit


def fmt_bytes(b: float | None) -> str:
    if b is None:
        return "unlimited"
    units = (("PiB", 2 ** 50), ("TiB", 2 ** 40), ("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10))
    for n, (unit, k) in enumerate(units):
        # 1023.9 MiB reads 1024 at 3 digits: 1 GiB is shown (was: 1.02e+03 MiB)
        if b >= k or (n + 1 < len(units) and not _rounds_below(b / units[n + 1][1], 1000)):
            return f"{_sig3(b / k)} {unit}"
    return f"{b:.0f} B"


def fmt_time(t: float) -> str:
    if t >= 1 or not _rounds_below(t * 1e3, 1000):
        return f"{_sig3(t)} s"
    if t >= 1e-3 or not _rounds_below(t * 1e6, 1000):
        return f"{_sig3(t * 1e3)} ms"
    return f"{_sig3(t * 1e6)} us"


def _fmt_count(x: float) -> str:
    if x == 0:
        return "0"
    e = int(math.floor(math.log10(abs(x)) / 3)) if abs(x) >= 1 else 0
    e = min(e, 4)
    if e < 4 and not _rounds_below(abs(x) / 10 ** (3 * e), 1000):   # 999.7k reads 1M (was: 1e+03k)
        e += 1
    return f"{_sig3(x / 10 ** (3 * e))}{['', 'k', 'M', 'G', 'T'][e]}"


def format_table(choice: Choice, limit: int | None = None) -> str:
    """The candidates, fastest first: * chosen, P on the time/memory Pareto front,
    ! over memory, ~ approximate (LANGUAGE.md: plans that trade freshness
    for speed are marked so in the plan table), x not runnable at these
    sizes, with the reason on a line under the table."""
    front = {id(cd) for cd in choice.pareto}
    head = ("", "plan", "time/epoch", "compute", "comm", "words/rank", "msgs/rank", "memory/rank")
    rows_ = [head]
    refused = []
    for cd in choice.candidates[:limit]:
        mark = (("*" if cd is choice.best else "") + ("P" if id(cd) in front else "") + ("" if cd.fits else "!")
                + ("" if cd.cost.exact else "~") + ("" if cd.runnable else "x"))
        if not cd.runnable:
            refused.append(f"x  {cd.name}: not runnable: {cd.not_runnable}")
        rows_.append((mark, cd.name, fmt_time(cd.time), fmt_time(cd.compute), fmt_time(cd.comm),
                      _fmt_count(float(cd.cost.words)), _fmt_count(float(cd.cost.messages)),
                      fmt_bytes(cd.memory_bytes)))
    widths = [max(len(r[i]) for r in rows_) for i in range(len(head))]
    lines = ["  ".join(v.ljust(w) if i < 2 else v.rjust(w) for i, (v, w) in enumerate(zip(r, widths))).rstrip()
             for r in rows_]
    return "\n".join(lines + refused)
