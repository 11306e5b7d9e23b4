"""vertex_cut: DistGNN's full-batch algorithms over a Libra vertex cut
(Md et al., SC21, §5).

Libra gives every edge to one partition (the least loaded among those
holding an endpoint, §5.1), so each rank holds E/P edges; a vertex whose
edges land in k partitions has k clones, and the replication factor
rho = (sum of clones) / N (§5.1, Table 4) makes a partition hold rho N / P
vertices (Table 8: 596,499 vertices per partition for OGBN-Products on 16
sockets = 2,449,029 * 3.90 / 16). Every aggregation is local, then the split
vertices' partial aggregates are combined through a one-level tree (§5.3,
Algorithm 4): leaves send to the root, the root sends the sum back, so
sum_v 2 (k_v - 1) = 2 (rho - 1) N rows move, 2 (rho - 1) N w / P words per rank.

delay 0 (cd-0) waits for that exchange: exact. delay r (cd-r) sends one of
r bins of split vertices per epoch and applies it r epochs later,
overlapping it with computation: 1/r of the forward words, approximate; its
backward combines the gradients at once (cd-0's words, not overlapped; see
gdsl/dist/functions.py, Delayed, for why). delay None (0c) skips the
exchange: no communication, approximate.
"""
from __future__ import annotations

from dataclasses import replace

from gdsl.cost import symbols as sy
from gdsl.cost.build import (activation_terms, comm, graph_terms, one_allreduce, param_terms, spmm, spmm_width, walk,
                             y_allreduce)
from gdsl.cost.problem import Problem
from gdsl.cost.rdm import Step
from gdsl.cost.record import Cost, OpCost
from gdsl.cost.symbols import Expr, is_num, lg

SYMBOLIC = Problem()
DRPA = "DistGNN §5.3, Algorithm 4 (DRPA)"

# DistGNN Table 4: average replication factor of Libra partitions.
LIBRA_REPLICATION = {
    "reddit": {2: 1.75, 4: 2.94, 8: 4.66, 16: 6.93},
    "ogbn-products": {2: 1.49, 4: 2.16, 8: 2.98, 16: 3.90, 32: 4.85, 64: 5.74},
    "proteins": {2: 1.33, 4: 1.65, 8: 1.91, 16: 2.11, 32: 2.27, 64: 2.37},
    "ogbn-papers": {32: 4.63, 64: 5.63, 128: 6.62},
}


def random_replication(N: Expr, E: Expr, P: Expr) -> float:
    """Replication factor of a random edge placement, P (1 - (1 - 1/P)^(E/N)):
    an upper bound for Libra when no partition has been measured (Libra
    places edges greedily to avoid new clones). At least 1: every vertex
    has its owner's copy, also where E < N leaves most vertices edgeless."""
    rho = P * (1 - (1 - 1 / P) ** (E / N))
    if all(is_num(x) for x in (N, E, P)):
        return max(1.0, float(rho))
    import sympy
    return sympy.Max(1, rho)


def delay_label(delay: Expr | None) -> str:
    """DistGNN's name of a delay: None (or "none") -> 0c, 0 -> cd-0, r -> cd-r."""
    if delay is None or delay == "none":
        return "0c"
    return "cd-0" if is_num(delay) and float(delay) == 0 else f"cd-{delay}"


def vertex_cut(problem: Problem = SYMBOLIC, *, delay: Expr | None = 0, rho: Expr = sy.rho, orders=None) -> Cost:
    pb = problem
    N, E, P = pb.N, pb.E, pb.P
    layers = pb.layers(orders)
    label = delay_label(delay)
    exact, overlap = label == "cd-0", label not in ("cd-0", "0c")

    def on_spmm(st: Step) -> list[OpCost]:
        ops = [spmm(st, E / P, rho * N / P, st.width, "DistGNN §5.1-5.2: local aggregation over E/P edges")]
        if delay is None:
            return ops
        words = 2 * (rho - 1) * N / P * st.width
        delayed = label != "cd-0" and st.phase == "forward"
        if delayed:
            words = words / delay  # one bin of |v_s|/r split vertices per epoch (Algorithm 4 lines 3-5, 9)
        # cd-r's backward combines the gradients at once (gdsl/dist/functions.py, Delayed)
        c = comm("partial_aggregates", st, words, 2 * (P - 1),
                 f"leaves -> root -> leaves for the split vertices of {st.what}", DRPA)
        return ops + [replace(c, overlapped=True) if delayed else c]

    ops = walk(layers, on_spmm=on_spmm, gemm_rows=rho * N / P,
               on_layer=lambda ly: y_allreduce(ly, lg(P)))
    ops = one_allreduce(ops, lg(P))   # the ranks' one gradient all-reduce per epoch (sync_grads)
    mem = (graph_terms(E / P, rho * N / P) + activation_terms(layers, rho * N / P, layers[0].f_in) + param_terms(layers))
    if delay is not None:
        mem.append(("partial-aggregate buffers", 2 * (rho - 1) * N / P * spmm_width(layers)))
    if overlap:
        # cd-r keeps the in-flight aggregates of every layer for r epochs
        # (DistGNN Table 6: cd-5 needs ~1.6x the memory of cd-0).
        mem.append(("delayed aggregates", sum((ly.count * 2 * (rho - 1) * N / P * ly.f_in for ly in layers
                                               if ly.aggregates and not ly.invariant), 0)))
    return Cost("vertex_cut", (("delay", label), ("rho", rho)), tuple(ops), tuple(mem),
                exact=exact, overlap=overlap)
